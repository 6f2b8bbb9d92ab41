"""One contract for every backend: the protocol fake, llama.cpp (SmolLM2), vLLM on CPU
(a tiny random Llama built here) and the SGLang bridge (real worker process, fake engine).

Every backend runs through the same assertions; only the reference for "the final
text" comes from each library's own non-streaming path.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from backends.base import Chunk, Engine, GenerationRequest, SamplingParams
from backends.fake import FakeEngine
from tests.backends.conftest import LoopThread
from tests.backends.fake_sglang import expected_text
from tiergate_testing.tiny_llama import WORDS


@dataclass
class Subject:
    engine: Engine
    reference: Callable[[GenerationRequest], Awaitable[str]]
    unfinished: Callable[[], int]
    prefix_cache: bool
    exact_length_usage: bool = True


def chat(content: str, *, max_tokens: int = 24, system: str | None = None, **sampling: Any):
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": content}
    ]
    return GenerationRequest(
        request_id=f"test-{uuid.uuid4().hex[:8]}",
        model="any",
        sampling=SamplingParams(max_tokens=max_tokens, **sampling),
        messages=tuple(messages),
    )


async def collect(engine: Engine, request: GenerationRequest) -> list[Chunk]:
    return [chunk async for chunk in engine.stream(request)]


def fake_subject() -> Subject:
    engine = FakeEngine(name="fake-0", model="fake", tokens=24)

    async def reference(request: GenerationRequest) -> str:
        return "".join(engine.words(request)[: request.sampling.max_tokens])

    return Subject(engine, reference, lambda: engine.counters.active, prefix_cache=False)


def llamacpp_subject(engine: Any) -> Subject:
    async def reference(request: GenerationRequest) -> str:
        prompt, stops = engine.render(request)
        s = request.sampling

        def complete() -> str:
            # The library's non-streaming call on the engine's own thread and model.
            result = engine._llama.create_completion(
                prompt=prompt,
                max_tokens=s.max_tokens,
                temperature=s.temperature,
                seed=s.seed,
                stop=list(stops) or None,
            )
            return str(result["choices"][0]["text"])

        async with engine._lock:
            return (
                await __import__("asyncio")
                .get_running_loop()
                .run_in_executor(engine._executor, complete)
            )

    # llama.cpp reports completion tokens by re-tokenising the text, which may merge pieces.
    return Subject(
        engine, reference, lambda: engine.load().running, False, exact_length_usage=False
    )


def vllm_subject(engine: Any) -> Subject:
    async def reference(request: GenerationRequest) -> str:
        from vllm.sampling_params import RequestOutputKind

        prep = await engine._prepare(engine.llm, request)
        prep.sampling.output_kind = RequestOutputKind.FINAL_ONLY
        final = None
        reference_id = f"ref-{uuid.uuid4().hex}"
        async for output in engine.llm.generate(prep.prompt, prep.sampling, reference_id):
            final = output
        assert final is not None
        return str(final.outputs[0].text)

    return Subject(engine, reference, engine.unfinished, prefix_cache=True)


def sglang_subject(engine: Any) -> Subject:
    async def reference(request: GenerationRequest) -> str:
        messages = [dict(m) for m in request.messages or ()]
        return expected_text(messages, request.sampling.max_tokens or 0)

    return Subject(engine, reference, engine.unfinished, prefix_cache=True)


BACKENDS = [
    "fake",
    pytest.param("llamacpp", marks=pytest.mark.slow),
    pytest.param("vllm", marks=pytest.mark.slow),
    pytest.param("sglang-bridge", marks=pytest.mark.slow),
]


@pytest.fixture(params=BACKENDS)
def subject(request: pytest.FixtureRequest) -> Subject:
    name = request.param
    if name == "fake":
        return fake_subject()
    if name == "llamacpp":
        return llamacpp_subject(request.getfixturevalue("llamacpp_engine"))
    if name == "vllm":
        return vllm_subject(request.getfixturevalue("vllm_engines")[0])
    return sglang_subject(request.getfixturevalue("sglang_bridge"))


def test_deltas_concatenate_to_the_final_text(subject: Subject, engine_loop: LoopThread) -> None:
    request = chat("Name three colours of the rainbow.", temperature=0.0, seed=1)
    chunks = engine_loop.run(collect(subject.engine, request))
    deltas = [c.text for c in chunks if c.text]
    assert len(deltas) >= 2
    assert chunks[-1].finish_reason in {"stop", "length"}
    assert all(c.finish_reason is None for c in chunks[:-1])
    assert "".join(deltas) == engine_loop.run(subject.reference(request))


def test_usage_is_consistent(subject: Subject, engine_loop: LoopThread) -> None:
    request = chat("Write one line about the sea.", max_tokens=12, temperature=0.0, seed=2)
    chunks = engine_loop.run(collect(subject.engine, request))
    final = chunks[-1]
    assert final.usage is not None
    usage = final.usage
    assert usage.prompt_tokens > 5  # the chat template's markers are counted too
    assert 0 < usage.completion_tokens <= 12
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert 0 <= usage.cached_tokens <= usage.prompt_tokens
    if final.finish_reason == "length":
        slack = 0 if subject.exact_length_usage else 3
        assert abs(usage.completion_tokens - 12) <= slack


def test_cancel_frees_the_slot(subject: Subject, engine_loop: LoopThread) -> None:
    counters = subject.engine.counters
    aborted = counters.aborted
    request = chat("Tell me a very long story.", max_tokens=400, temperature=0.8, seed=3)

    async def read_three_then_cancel() -> int:
        stream = subject.engine.stream(request)
        seen = 0
        async for chunk in stream:
            seen += bool(chunk.text)
            if seen >= 3:
                break
        await stream.aclose()  # type: ignore[attr-defined]
        return seen

    assert engine_loop.run(read_three_then_cancel()) == 3
    deadline = time.monotonic() + 10
    while subject.unfinished() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert subject.unfinished() == 0
    assert counters.aborted == aborted + 1
    assert counters.active == 0
    # The slot is usable again.
    after = engine_loop.run(collect(subject.engine, chat("Again.", max_tokens=4)))
    assert after[-1].usage is not None


def long_prefix(words: int = 400) -> str:
    rng = random.Random(uuid.uuid4().int)  # unseen by the engine, so the first turn misses
    return " ".join(rng.choice(WORDS) for _ in range(words))


def test_shared_prefix_reports_cached_tokens(subject: Subject, engine_loop: LoopThread) -> None:
    if not subject.prefix_cache:
        pytest.skip("this backend has no prefix cache to report")
    system = long_prefix()
    first = engine_loop.run(collect(subject.engine, chat("first question", system=system)))
    second = engine_loop.run(collect(subject.engine, chat("second question", system=system)))
    assert first[-1].usage is not None and second[-1].usage is not None
    assert first[-1].usage.prompt_tokens >= 256
    assert first[-1].usage.cached_tokens == 0
    assert second[-1].usage.cached_tokens >= 128
    assert second[-1].usage.cached_tokens < second[-1].usage.prompt_tokens


def test_capabilities_are_declared_and_enforced_by_the_engine(
    subject: Subject, engine_loop: LoopThread
) -> None:
    from dataclasses import replace

    from backends.base import FEATURES
    from backends.errors import UpstreamRejected

    capabilities = subject.engine.capabilities
    assert capabilities <= FEATURES
    assert "passthrough" not in capabilities  # in-process engines forward nothing
    request = replace(chat("x", max_tokens=2), passthrough={"reasoning_effort": "low"})
    with pytest.raises(UpstreamRejected, match="reasoning_effort"):
        engine_loop.run(collect(subject.engine, request))
    assert subject.engine.counters.active == 0
