"""The SGLang bridge with a real worker process around a fake engine emitting SGLang's shapes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from dataclasses import replace
from typing import Any

import jsonschema
import pytest

from backends import sglang_chat
from backends.base import Chunk
from backends.errors import EngineUnavailable, UpstreamRejected
from backends.pool import EnginePool, Replica, StreamInfo
from backends.sglang import SglangEngine
from tests.backends.conftest import LoopThread, sglang_bridge_options
from tests.backends.fake_sglang import FakeTokenizer, expected_text, generated
from tests.backends.test_contract import chat, collect

pytestmark = pytest.mark.slow

TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "parameters": {
            "type": "object",
            "properties": {
                "q": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["q", "tags"],
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "clock",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
    },
}


def test_incremental_mode_delivers_the_same_text(engine_loop: LoopThread) -> None:
    """SGLang sends cumulative text by default and increments when asked; same result."""
    engine = SglangEngine(
        name="sglang-inc", model="fake", **sglang_bridge_options(incremental_streaming_output=True)
    )
    engine_loop.run(engine.start())
    try:
        request = chat("hello", max_tokens=9)
        chunks = engine_loop.run(collect(engine, request))
        messages = [dict(m) for m in request.messages or ()]
        assert [c.text for c in chunks if c.text] == [
            piece for piece in _pieces(expected_text(messages, 9))
        ]
        assert chunks[-1].finish_reason == "length"
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 9
    finally:
        engine_loop.run(engine.aclose())
    assert engine.exit_code == 0  # a clean shutdown, not a kill


def _pieces(text: str) -> list[str]:
    return [" " + p for p in text.split(" ") if p]


def test_load_snapshots_reach_the_pool(sglang_bridge: Any, engine_loop: LoopThread) -> None:
    async def during() -> tuple[int, float]:
        stream = sglang_bridge.stream(chat("slow", max_tokens=200))
        await anext(stream)
        await asyncio.sleep(0.3)  # a few load reports (every 50 ms)
        load = sglang_bridge.load()
        await stream.aclose()
        return load.running, load.kv_usage

    running, kv_usage = engine_loop.run(during())
    assert running >= 1 and kv_usage > 0


def test_tools_are_refused_without_a_tool_call_parser(engine_loop: LoopThread) -> None:
    engine = SglangEngine(name="sglang-plain", model="fake", **sglang_bridge_options(tools=False))
    engine_loop.run(engine.start())
    try:
        request = replace(chat("x"), tools=(TOOL,))
        with pytest.raises(UpstreamRejected, match="tools"):
            engine_loop.run(collect(engine, request))
        assert engine.unfinished() == 0 and "tools" not in engine.capabilities
    finally:
        engine_loop.run(engine.aclose())


def test_an_unknown_tool_call_parser_fails_at_start(engine_loop: LoopThread) -> None:
    options = {**sglang_bridge_options(), "tool_call_parser": "no-such-format"}
    engine = SglangEngine(name="sglang-bad", model="fake", **options)
    with pytest.raises(EngineUnavailable):
        engine_loop.run(engine.start())


def _calls(chunks: list[Chunk]) -> tuple[dict[int, dict[str, str]], Chunk]:
    """Stream deltas assembled by index, and the last chunk."""
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for d in chunk.tool_call_deltas or ():
            call = calls.setdefault(d["index"], {"id": "", "name": "", "arguments": ""})
            call["id"] += d.get("id") or ""
            call["name"] += d["function"].get("name") or ""
            call["arguments"] += d["function"].get("arguments") or ""
    return calls, chunks[-1]


def _flat(whole: Any) -> dict[int, dict[str, str]]:
    return {
        i: {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for i, c in enumerate(whole)
    }


@pytest.mark.parametrize(
    "choice",
    [None, "auto", "required", {"type": "function", "function": {"name": "lookup"}}],
)
def test_a_tool_call_streams_as_openai_deltas_and_ends_whole(
    sglang_bridge: Any, engine_loop: LoopThread, choice: Any
) -> None:
    """auto: SGLang's parser reads the model's hermes call; required / named: the call
    array the json_schema constraint produced. Either way the deltas add up to the calls."""
    request = replace(chat("what is 7?", max_tokens=200), tools=(CLOCK, TOOL), tool_choice=choice)
    calls, last = _calls(engine_loop.run(collect(sglang_bridge, request)))
    assert last.finish_reason == "tool_calls" and last.tool_calls is not None
    assert calls == _flat(last.tool_calls)
    expected = "clock" if choice in (None, "auto", "required") else "lookup"
    assert calls[0]["name"] == expected and calls[0]["id"].startswith("call_")
    schema = (CLOCK if expected == "clock" else TOOL)["function"]["parameters"]
    jsonschema.validate(json.loads(calls[0]["arguments"]), schema)
    assert sglang_bridge.unfinished() == 0


def test_a_template_that_takes_bare_functions_gets_them(engine_loop: LoopThread) -> None:
    """As SGLang's server: when the template refuses OpenAI-wrapped tools, the worker
    renders again with the bare functions (Mistral's templates want those)."""
    options = sglang_bridge_options(fake_bare_functions=True)
    engine = SglangEngine(name="sglang-bare", model="fake", **options)
    engine_loop.run(engine.start())
    try:
        request = replace(chat("what is 7?", max_tokens=200), tools=(TOOL,))
        last = engine_loop.run(collect(engine, request))[-1]
        assert last.finish_reason == "tool_calls" and last.tool_calls is not None
        assert last.tool_calls[0]["function"]["name"] == "lookup"
    finally:
        engine_loop.run(engine.aclose())


def test_tool_choice_none_answers_in_text(sglang_bridge: Any, engine_loop: LoopThread) -> None:
    request = replace(chat("hello", max_tokens=5), tools=(TOOL,), tool_choice="none")
    chunks = engine_loop.run(collect(sglang_bridge, request))
    messages = [dict(m) for m in request.messages or ()]
    assert "".join(c.text for c in chunks) == expected_text(messages, 5)  # no tools rendered
    assert chunks[-1].tool_calls is None and chunks[-1].finish_reason == "length"


def test_the_second_leg_of_a_tool_loop_is_rendered_with_the_tools(
    sglang_bridge: Any, engine_loop: LoopThread
) -> None:
    """assistant tool_calls (content null, arguments a JSON string) + a tool result reach
    the chat template as templates read them; the model then answers in text."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"q": 7}'},
    }
    messages = (
        {"role": "user", "content": [{"type": "text", "text": "what is 7?"}]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "seven"},
    )
    request = replace(chat("x", max_tokens=6), messages=messages, tools=(TOOL,))
    chunks = engine_loop.run(collect(sglang_bridge, request))
    rendered = FakeTokenizer().apply_chat_template(
        sglang_chat.template_messages(messages), False, True, tools=[TOOL]
    )
    assert "".join(c.text for c in chunks) == generated(rendered, 6)
    assert chunks[-1].tool_calls is None and chunks[-1].finish_reason == "length"


@pytest.mark.parametrize("kind", ["json_object", "json_schema"])
def test_response_format_is_decoded_under_sglang_json_schema(
    sglang_bridge: Any, engine_loop: LoopThread, kind: str
) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    }
    rf: dict[str, Any] = {"type": kind}
    if kind == "json_schema":
        rf["json_schema"] = {"name": "trip", "schema": schema, "strict": True}
    request = replace(chat("plan a trip", max_tokens=100), response_format=rf)
    chunks = engine_loop.run(collect(sglang_bridge, request))
    answer = json.loads("".join(c.text for c in chunks))
    jsonschema.validate(answer, schema if kind == "json_schema" else {"type": "object"})
    assert chunks[-1].finish_reason == "stop"


def test_bad_history_arguments_are_refused_before_the_worker(
    sglang_bridge: Any, engine_loop: LoopThread
) -> None:
    call = {"id": "c", "type": "function", "function": {"name": "lookup", "arguments": "{oops"}}
    messages = ({"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [call]})
    started = sglang_bridge.counters.started
    with pytest.raises(UpstreamRejected, match=r"messages\[1\]"):
        engine_loop.run(collect(sglang_bridge, replace(chat("x"), messages=messages)))
    assert sglang_bridge.counters.started == started and sglang_bridge.unfinished() == 0


def test_worker_death_is_reported_and_the_pool_moves_on(engine_loop: LoopThread) -> None:
    def builder(i: int) -> SglangEngine:
        return SglangEngine(
            name=f"sglang-{i}", model="fake", **sglang_bridge_options(fake_token_delay_s=0.01)
        )

    replicas = [Replica(builder(i), builder=lambda i=i: builder(i)) for i in range(2)]
    for r in replicas:
        r.rebuild_backoff_s = 0.1
    pool = EnginePool("small", replicas)

    async def scenario() -> tuple[str, str, StreamInfo]:
        await asyncio.gather(*(r.engine.start() for r in replicas))
        info = StreamInfo()
        stream = pool.stream(chat("long answer", max_tokens=300), info)
        await anext(stream)
        victim = next(r for r in replicas if r.name == info.replica)
        assert isinstance(victim.engine, SglangEngine) and victim.engine.process is not None
        os.kill(victim.engine.process.pid, signal.SIGKILL)  # the worker dies mid-stream
        with pytest.raises(EngineUnavailable):
            async for _ in stream:
                pass
        after = StreamInfo()
        async for _ in pool.stream(chat("next"), after):
            pass
        await asyncio.wait_for(victim.wait_rebuilt(), 60)
        return victim.name, str(after.replica), after

    started = time.monotonic()
    try:
        victim, served_by, after = engine_loop.run(scenario(), timeout=120)
        assert served_by != victim and after.attempts == 1
        rebuilt = next(r for r in replicas if r.name == victim)
        assert rebuilt.rebuilds == 1 and rebuilt.healthy()
        assert time.monotonic() - started < 60
    finally:

        async def close() -> None:
            await asyncio.gather(*(r.aclose() for r in replicas))

        engine_loop.run(close())


def test_a_template_error_is_reported_at_once_and_frees_the_slot(
    sglang_bridge: Any, engine_loop: LoopThread
) -> None:
    """The worker reports every exception (here the chat template's): the request fails in
    well under request_timeout_s and nothing stays held."""
    request = chat("x")
    object.__setattr__(request, "messages", ({"role": "narrator", "content": "x"},))
    started = time.monotonic()
    with pytest.raises(UpstreamRejected, match="unknown role"):
        engine_loop.run(collect(sglang_bridge, request), timeout=10)
    assert time.monotonic() - started < 5
    assert sglang_bridge.unfinished() == 0
    assert "".join(c.text for c in engine_loop.run(collect(sglang_bridge, chat("ok"))))
