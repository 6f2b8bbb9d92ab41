"""A run's answer as its caller gets it, whoever the caller is: the chunks (``answer``)
for a stream, or the whole text and final chunk (``collect``) for one body.

The HTTP edge (``gateway.edge.respond``) and the batch runner (``gateway.batches.lines``)
both take a ``Run`` from the core and read its answer here; nothing here knows HTTP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

from backends.base import Chunk, TokenLogprob
from gateway.core.serving import Run


def answer(run: Run) -> AsyncIterator[Chunk]:
    """The run's chunks as the caller gets them: with ``guardrails.restore``, this
    request's placeholders turned back into its values (the cache and the stores kept
    the placeholders)."""
    guard = run.guard
    if guard is not None and guard.restores:
        return guard.restored(run.chunks())
    return run.chunks()


async def collect(run: Run) -> tuple[str, Chunk]:
    """Open the run and drain it: its text, and its final chunk carrying every token's
    log-probabilities (each chunk carried its own)."""
    await run.open()
    parts: list[str] = []
    logprobs: list[TokenLogprob] = []
    final: Chunk | None = None
    async for chunk in answer(run):
        parts.append(chunk.text)
        logprobs.extend(chunk.logprobs or ())
        if chunk.finish_reason is not None:
            final = chunk
    assert final is not None, "an engine stream ends with a final chunk"
    if logprobs:
        final = replace(final, logprobs=tuple(logprobs))
    return "".join(parts), final
