"""The token loop of the llama.cpp engine (runs on the engine's worker thread).

``Llama.generate`` gives one token at a time; this loop owns what OpenAI's API adds on
top: stop strings (text that could start one is held back), the grammar, the
log-probabilities of each token (read from the logits that produced it, so the model
needs no ``logits_all`` buffer) and tool calls read back from the constrained text.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from backends.base import Chunk, EngineCounters, GenerationRequest, TokenLogprob, Usage
from backends.errors import ContextExceeded
from backends.llamacpp_tools import ToolCallReader
from backends.token_bound import piece as whole_piece
from backends.tool_calls import ToolPlan

DEFAULT_TEMPERATURE = 0.8


@dataclass(frozen=True, slots=True)
class Job:
    request: GenerationRequest
    prompt: str
    template_stops: tuple[str, ...]
    plan: ToolPlan
    grammar: str | None


def prompt_param(request: GenerationRequest) -> str:
    """The request field a context error names."""
    return "prompt" if request.prompt is not None else "messages"


def _held_back(text: str, stops: tuple[str, ...]) -> int:
    """How many trailing characters of ``text`` could be the start of a stop string."""
    held = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), held, -1):
            if text.endswith(stop[:size]):
                held = size
                break
    return held


def _logprob(llama: Any, token: int, top: int) -> TokenLogprob:
    import numpy as np

    logits = np.ctypeslib.as_array(llama._ctx.get_logits(), shape=(llama.n_vocab(),))
    shifted = logits.astype(np.float64) - float(logits.max())
    logprobs = shifted - np.log(np.exp(shifted).sum())
    alternatives: list[tuple[str, float, bytes]] = []
    if top:
        best = np.argpartition(-logprobs, top)[:top]
        for index in sorted(best.tolist(), key=lambda i: -logprobs[i]):
            piece = whole_piece(llama, index)
            alternatives.append((piece.decode(errors="replace"), float(logprobs[index]), piece))
    piece = whole_piece(llama, token)
    return TokenLogprob(
        piece.decode(errors="replace"), float(logprobs[token]), piece, tuple(alternatives)
    )


def decode(
    llama: Any,
    job: Job,
    *,
    n_ctx: int,
    default_max_tokens: int,
    counters: EngineCounters,
    cancel: threading.Event,
) -> Iterator[Chunk]:
    """Chunks of one generation; the last carries the finish reason, usage and calls."""
    from llama_cpp import llama_cpp
    from llama_cpp.llama_grammar import LlamaGrammar

    request, sampling = job.request, job.request.sampling
    prompt_tokens = llama.tokenize(job.prompt.encode(), add_bos=True, special=True)
    if len(prompt_tokens) >= n_ctx:
        raise ContextExceeded(
            len(prompt_tokens), n_ctx, at_least=False, param=prompt_param(request)
        )
    max_tokens = min(sampling.max_tokens or default_max_tokens, n_ctx - len(prompt_tokens))
    llama.set_seed(sampling.seed if sampling.seed is not None else random.getrandbits(32))
    grammar = LlamaGrammar.from_string(job.grammar, verbose=False) if job.grammar else None
    stops = sampling.stop + job.template_stops
    top = request.top_logprobs or 0
    reader = ToolCallReader(job.plan)
    completion: list[int] = []
    produced = bytearray()  # the completion's bytes, piece by piece
    pending: list[TokenLogprob] = []
    released = 0
    finish = "length"
    matched: str | None = None  # the request's stop string that ended the text
    text = ""
    for token in llama.generate(
        prompt_tokens,
        top_k=40,
        top_p=1.0 if sampling.top_p is None else sampling.top_p,
        min_p=0.05,
        temp=DEFAULT_TEMPERATURE if sampling.temperature is None else sampling.temperature,
        repeat_penalty=1.0,
        frequency_penalty=sampling.frequency_penalty or 0.0,
        presence_penalty=sampling.presence_penalty or 0.0,
        grammar=grammar,
    ):
        if cancel.is_set():
            return
        if llama_cpp.llama_vocab_is_eog(llama._model.vocab, token):
            finish = "stop"
            break
        if request.logprobs:
            pending.append(_logprob(llama, token, top))
        completion.append(token)
        counters.generated_tokens += 1
        produced += whole_piece(llama, token)  # a piece over 32 bytes too (token_bound)
        text = produced.decode(errors="ignore")
        found = [(i, s) for s in stops if (i := text.find(s)) >= 0]
        if found:
            cut, stop = min(found)
            text, finish = text[:cut], "stop"
            matched = stop if stop in sampling.stop else None
            break
        safe = len(text) - _held_back(text, stops)
        if safe > released:
            yield _piece(reader, text[released:safe], pending)
            released, pending = safe, []
        if len(completion) >= max_tokens:
            break
    if len(text) > released or pending:
        yield _piece(reader, text[released:], pending)
    deltas, calls = reader.finish()
    if calls is not None and finish == "stop":
        finish = "tool_calls"
    if deltas:
        yield Chunk(tool_call_deltas=tuple(deltas))
    usage = Usage(prompt_tokens=len(prompt_tokens), completion_tokens=len(completion))
    yield Chunk(finish_reason=finish, usage=usage, tool_calls=calls, stop_sequence=matched)


def _piece(reader: ToolCallReader, text: str, logprobs: list[TokenLogprob]) -> Chunk:
    content, deltas = reader.feed(text)
    return Chunk(
        text=content,
        tool_call_deltas=tuple(deltas) or None,
        logprobs=tuple(logprobs) or None,
    )
