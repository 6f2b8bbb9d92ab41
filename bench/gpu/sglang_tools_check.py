"""GPU check (not CI): tools and structured outputs on a real SGLang engine, through a real
gateway, with the official openai SDK.

CI runs the same paths against a fake engine and a fake ``FunctionCallParser`` (SGLang
needs CUDA). This runs them on ``sglang.Engine`` with a small local instruct model and
SGLang's own parser, and prints one JSON line per check, then a summary; the exit status
is the number of failed checks. What it asserts is what constrained decoding guarantees
(``required`` / named calls and ``json_schema`` answers valid for their schemas, streamed
deltas adding up to the same call); ``auto`` is reported, not asserted (a model may
answer in text). Budget: model load plus under a minute.

    python -m bench.gpu.sglang_tools_check --model /models/Qwen2.5-0.5B-Instruct --parser qwen25
    python -m bench.gpu.sglang_tools_check --fake    # the CI fakes: checks the script itself

Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from tiergate_testing.tools import ASK, NAMED, SCHEMAS, TOOLS, stream_tool_calls


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    if args.fake:
        from tests.backends.conftest import sglang_bridge_options

        return sglang_bridge_options()
    return {
        "model_path": str(args.model.resolve()),
        "device_ids": [args.device],
        "server_args": {
            "mem_fraction_static": args.mem_fraction,
            "context_length": 4096,
            "disable_cuda_graph": not args.cuda_graph,  # a quicker start for a check
        },
        "tool_call_parser": args.parser,
        "start_timeout_s": 600,
    }


def one_call(client: Any, choice: Any) -> dict[str, Any]:
    import jsonschema

    result = client.chat.completions.create(
        model="small",
        messages=ASK,
        tools=TOOLS,
        tool_choice=choice,
        max_tokens=120,
        temperature=0,
    )
    choice0 = result.choices[0]
    calls = choice0.message.tool_calls or []
    assert choice0.finish_reason == "tool_calls", choice0.finish_reason
    assert len(calls) >= 1
    for call in calls:
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    if isinstance(choice, dict):
        assert calls[0].function.name == "get_weather"
    return {"calls": [(c.function.name, c.function.arguments) for c in calls]}


def streamed_equals_whole(client: Any, choice: Any) -> dict[str, Any]:
    params: Any = {
        "model": "small",
        "messages": ASK,
        "tools": TOOLS,
        "tool_choice": choice,
        "max_tokens": 120,
        "temperature": 0,
    }
    whole = client.chat.completions.create(**params).choices[0].message.tool_calls or []
    calls, finish, fragments = stream_tool_calls(client, params)
    assert finish == "tool_calls", finish
    assert [(c["name"], c["arguments"]) for c in calls.values()] == [
        (c.function.name, c.function.arguments) for c in whole
    ]
    return {"fragments": fragments}


def tool_loop(client: Any) -> dict[str, Any]:
    first = client.chat.completions.create(
        model="small", messages=ASK, tools=TOOLS, tool_choice=NAMED, max_tokens=120
    )
    message = first.choices[0].message
    call = (message.tool_calls or [])[0]
    history: list[Any] = [
        *ASK,
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"forecast": "sunny"}'},
    ]
    second = client.chat.completions.create(
        model="small", messages=history, tools=TOOLS, max_tokens=60
    )
    assert second.choices[0].message.content, second
    return {"answer": second.choices[0].message.content[:80]}


def auto(client: Any) -> dict[str, Any]:
    result = client.chat.completions.create(
        model="small", messages=ASK, tools=TOOLS, max_tokens=120, temperature=0
    )
    choice = result.choices[0]
    calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
    return {"finish": choice.finish_reason, "calls": calls, "text": choice.message.content}


def structured(client: Any) -> dict[str, Any]:
    from pydantic import BaseModel, Field

    class Forecast(BaseModel):
        city: Literal["Paris", "London", "Tokyo"]
        days: int = Field(ge=1, le=7)
        sunny: bool

    parsed = (
        client.chat.completions.parse(
            model="small", messages=ASK, response_format=Forecast, max_tokens=80
        )
        .choices[0]
        .message.parsed
    )
    assert isinstance(parsed, Forecast)
    plain = client.chat.completions.create(
        model="small", messages=ASK, response_format={"type": "json_object"}, max_tokens=80
    )
    assert isinstance(json.loads(plain.choices[0].message.content or ""), dict)
    return {"parsed": parsed.model_dump()}


def main() -> int:
    parser = argparse.ArgumentParser(description="SGLang tools + json_schema, real engine")
    parser.add_argument("--model", type=Path, help="local HF instruct model folder")
    parser.add_argument("--parser", default="qwen25", help="SGLang tool_call_parser")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--mem-fraction", type=float, default=0.5)
    parser.add_argument("--cuda-graph", action="store_true", help="capture CUDA graphs")
    parser.add_argument("--fake", action="store_true", help="the CI fakes, no GPU")
    args = parser.parse_args()
    if not args.fake and args.model is None:
        parser.error("--model is required unless --fake")
    import openai

    from tiergate_testing.configs import TEST_KEY, fake_config
    from tiergate_testing.gateways import running_gateway

    config = fake_config()
    config["engines"]["sglang"] = {
        "backend": "sglang",
        "model": "checked",
        "options": engine_options(args),
    }
    config["tiers"]["small"] = {"engines": ["sglang"]}
    config["prices"]["checked"] = {"input": 1.0, "output": 1.0}
    checks: dict[str, Callable[[Any], dict[str, Any]]] = {
        "required": lambda c: one_call(c, "required"),
        "named": lambda c: one_call(c, NAMED),
        "stream_required": lambda c: streamed_equals_whole(c, "required"),
        "stream_named": lambda c: streamed_equals_whole(c, NAMED),
        "tool_loop": tool_loop,
        "structured": structured,
        "auto (reported)": auto,
    }
    failed = 0
    started = time.monotonic()
    with running_gateway(config, start_timeout_s=900) as gateway:
        print(json.dumps({"ready_s": round(time.monotonic() - started, 1)}), flush=True)
        client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY)
        for name, check in checks.items():
            try:
                print(json.dumps({"check": name, "ok": True, **check(client)}), flush=True)
            except Exception as exc:  # every check reports; the count is the exit status
                failed += 1
                print(json.dumps({"check": name, "ok": False, "error": repr(exc)}), flush=True)
    print(json.dumps({"failed": failed, "total_s": round(time.monotonic() - started, 1)}))
    return failed


if __name__ == "__main__":
    raise SystemExit(main())
