"""The fake engine as a tool-calling model (``tools``, ``tool_script``) and its memory."""

from __future__ import annotations

import gc
import json
import tracemalloc
import uuid
from typing import Any

from backends import fake
from backends.base import Chunk, GenerationRequest, SamplingParams
from backends.fake import FakeEngine
from backends.options import FakeOptions

SHELL = {"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}
SCRIPT = FakeOptions.model_validate(
    {
        "tools": True,
        "tool_script": [
            {"when": "list the files", "call": "shell", "arguments": {"command": ["ls", "-1"]}}
        ],
    }
)


def request(*messages: dict[str, Any], tools: bool = True) -> GenerationRequest:
    return GenerationRequest(
        request_id=f"t-{uuid.uuid4().hex[:8]}",
        model="fake",
        sampling=SamplingParams(max_tokens=64),
        messages=messages,
        tools=(SHELL,) if tools else None,
    )


async def collect(engine: FakeEngine, req: GenerationRequest) -> list[Chunk]:
    return [c async for c in engine.stream(req)]


async def test_a_matching_user_turn_streams_the_scripted_call() -> None:
    engine = FakeEngine(name="f", model="fake", **SCRIPT.kwargs())
    assert "tools" in engine.capabilities
    chunks = await collect(engine, request({"role": "user", "content": "Please LIST the files"}))
    final = chunks[-1]
    assert final.finish_reason == "tool_calls"
    assert final.tool_calls is not None and len(final.tool_calls) == 1
    call = final.tool_calls[0]
    assert call["function"]["name"] == "shell"
    assert json.loads(call["function"]["arguments"]) == {"command": ["ls", "-1"]}
    streamed = "".join(
        d["function"].get("arguments", "") for c in chunks[:-1] for d in c.tool_call_deltas or ()
    )
    assert streamed == call["function"]["arguments"]
    assert chunks[0].tool_call_deltas and chunks[0].tool_call_deltas[0]["id"] == call["id"]
    assert engine.counters.active == 0 and engine.counters.finished == 1


async def test_a_tool_result_is_quoted_and_other_turns_get_words() -> None:
    engine = FakeEngine(name="f", model="fake", **SCRIPT.kwargs())
    after = await collect(
        engine,
        request(
            {"role": "user", "content": "list the files"},
            {"role": "tool", "tool_call_id": "call_1", "content": "README.md\nsetup.py"},
        ),
    )
    text = "".join(c.text for c in after)
    assert text == " The tool returned: README.md setup.py" and after[-1].finish_reason == "stop"
    # No rule matches, or the tool is not offered: the deterministic words.
    for req in (
        request({"role": "user", "content": "hello"}),
        request({"role": "user", "content": "list the files"}, tools=False),
    ):
        chunks = await collect(engine, req)
        assert chunks[-1].finish_reason == "stop" and not chunks[-1].tool_calls
        assert "".join(c.text for c in chunks) == "".join(engine.words(req))


async def test_the_fake_keeps_nothing_per_request() -> None:
    engine = FakeEngine(name="f", model="fake", tokens=4)

    async def run(n: int) -> None:
        for i in range(n):
            await collect(engine, request({"role": "user", "content": f"unique {i}"}, tools=False))

    await run(200)  # warm-up: caches, interned strings
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    await run(2000)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    # Only what this test and the engine allocated (other threads of the session — an
    # engine from an earlier test winding down — allocate meanwhile).
    mine = [tracemalloc.Filter(True, __file__), tracemalloc.Filter(True, fake.__file__)]
    grown = sum(
        s.size_diff
        for s in after.filter_traces(mine).compare_to(before.filter_traces(mine), "filename")
    )
    assert grown < 20 * 2000, f"{grown} bytes retained over 2000 requests"
