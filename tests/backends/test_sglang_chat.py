"""The SGLang request and response shaping that needs no SGLang: the constrained call
array, template messages, and OpenAI deltas from the (fake) FunctionCallParser's items."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import jsonschema
import pytest

from backends import sglang_chat
from backends.base import GenerationRequest, SamplingParams
from backends.tool_calls import CallArrayReader, call_array_schema
from tests.backends.fake_sglang_calls import FunctionCallParser, Tool

LOOKUP = {
    "name": "lookup",
    "parameters": {
        "type": "object",
        "properties": {"q": {"type": "integer"}},
        "required": ["q"],
        "additionalProperties": False,
    },
}
CLOCK = {"name": "clock", "parameters": {"type": "object", "properties": {}}}
TOOLS = ({"type": "function", "function": LOOKUP}, {"type": "function", "function": CLOCK})


def request(**fields: Any) -> GenerationRequest:
    base = GenerationRequest(
        request_id="r",
        model="m",
        sampling=SamplingParams(max_tokens=8),
        messages=({"role": "user", "content": "hi"},),
    )
    return replace(base, **fields)


def test_named_call_schema_admits_only_valid_calls_to_that_function() -> None:
    schema = call_array_schema([LOOKUP], parallel=False)
    jsonschema.Draft202012Validator.check_schema(schema)
    valid = jsonschema.Draft202012Validator(schema)
    assert valid.is_valid([{"name": "lookup", "parameters": {"q": 3}}])
    assert not valid.is_valid([{"name": "lookup", "parameters": {"q": "3"}}])
    assert not valid.is_valid([{"name": "clock", "parameters": {}}])
    assert not valid.is_valid([])
    assert not valid.is_valid([{"name": "lookup", "parameters": {"q": 1}}] * 2)


def test_required_schema_admits_any_listed_function_and_merges_defs() -> None:
    item = {"$ref": "#/$defs/Item"}
    defs = {"Item": {"type": "string"}}
    a = {"name": "a", "parameters": {"type": "object", "properties": {"i": item}, "$defs": defs}}
    schema = call_array_schema([a, CLOCK])
    assert schema["$defs"] == defs
    valid = jsonschema.Draft202012Validator(schema)
    assert valid.is_valid(
        [{"name": "a", "parameters": {"i": "x"}}, {"name": "clock", "parameters": {}}]
    )
    assert not valid.is_valid([{"name": "a", "parameters": {"i": 1}}])
    clash = {"name": "b", "parameters": {"$defs": {"Item": {"type": "integer"}}}}
    with pytest.raises(ValueError, match="Item"):
        call_array_schema([a, clash])


def test_call_array_reader_streams_each_call_once_complete() -> None:
    text = '[{"name":"lookup","parameters":{"q":7}}, {"name":"clock","parameters":{}}]'
    reader = CallArrayReader()
    deltas = [d for ch in text for d in reader.feed(ch)]
    whole = reader.whole()
    assert whole is not None and [c["function"]["name"] for c in whole] == ["lookup", "clock"]
    assert json.loads(whole[0]["function"]["arguments"]) == {"q": 7}
    assert [d["index"] for d in deltas] == [0, 0, 1, 1]
    assert deltas[0]["id"] == whole[0]["id"] and deltas[0]["type"] == "function"
    assert "".join(d["function"]["arguments"] for d in deltas if d["index"] == 0) == '{"q": 7}'


def test_prepare_follows_tool_choice() -> None:
    none = sglang_chat.prepare(request(tools=TOOLS, tool_choice="none"))
    assert none.tools is None and none.reading == "text" and "json_schema" not in none.sampling
    auto = sglang_chat.prepare(request(tools=TOOLS))
    assert auto.reading == "parser" and len(auto.tools or ()) == 2
    assert auto.sampling == {"skip_special_tokens": False}
    named = sglang_chat.prepare(
        request(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "clock"}})
    )
    assert named.reading == "array" and [t["function"]["name"] for t in named.tools or ()] == [
        "clock"
    ]
    assert json.loads(named.sampling["json_schema"]) == call_array_schema([CLOCK])
    single = sglang_chat.prepare(
        request(tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    )
    assert json.loads(single.sampling["json_schema"])["maxItems"] == 1


def test_response_format_becomes_sglang_json_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}
    assert json.loads(sglang_chat.prepare(request(response_format=rf)).sampling["json_schema"]) == (
        schema
    )
    plain = sglang_chat.prepare(request(response_format={"type": "json_object"}))
    assert json.loads(plain.sampling["json_schema"]) == {"type": "object"}
    assert sglang_chat.prepare(request(response_format={"type": "text"})).sampling == {}


def test_a_strict_tool_under_auto_is_refused_by_name() -> None:
    strict = ({"type": "function", "function": {**LOOKUP, "strict": True}},)
    with pytest.raises(ValueError, match=r"tools\[0\]\.function\.strict"):
        sglang_chat.prepare(request(tools=strict))
    forced = sglang_chat.prepare(request(tools=strict, tool_choice="required"))
    assert forced.reading == "array"


def test_template_messages_are_what_hf_templates_read() -> None:
    messages = (
        {
            "role": "developer",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": 1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "42"}]},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
    )
    out = sglang_chat.template_messages(messages)
    assert out[0] == {"role": "system", "content": "a\nb"}
    assert out[1]["content"] == "" and out[1]["tool_calls"][0]["function"]["arguments"] == {"q": 1}
    assert out[1]["tool_calls"][0]["id"] == "c1"
    assert out[2] == {"role": "tool", "tool_call_id": "c1", "content": "42"}
    assert out[3]["content"] == messages[3]["content"]  # a multimodal engine's renderer reads parts
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == '{"q": 1}'  # not mutated


def test_bad_history_arguments_are_named() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "lookup", "arguments": "[1]"}}
    messages = ({"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [call]})
    with pytest.raises(ValueError, match=r"messages\[1\]\.tool_calls\[0\]\.function\.arguments"):
        sglang_chat.prepare(request(messages=messages))


def _parsed(text: str, parallel: bool = True) -> tuple[str, list[dict[str, Any]], Any]:
    """``text`` streamed a few characters at a time through the fake FunctionCallParser
    into a CallStream: the content, every delta, and the whole calls."""
    tools = [Tool.model_validate(t) for t in TOOLS]
    parser = FunctionCallParser(tools, "hermes")
    stream = sglang_chat.CallStream("parser", parallel=parallel)
    content, deltas = "", []
    for i in range(0, len(text), 3):
        normal, items = parser.parse_stream_chunk(text[i : i + 3])
        got, new = stream.feed(normal, [i.model_dump() for i in items])
        content, deltas = content + got, deltas + new
    _, final = FunctionCallParser(tools, "hermes").parse_non_stream(text)
    owed, whole = stream.finish([i.model_dump() for i in final])
    return content, deltas + owed, whole


def _assembled(deltas: list[dict[str, Any]]) -> dict[int, str]:
    out: dict[int, str] = {}
    for d in deltas:
        out[d["index"]] = out.get(d["index"], "") + d["function"]["arguments"]
    return out


def test_parser_items_become_openai_deltas_that_add_up_to_the_whole_calls() -> None:
    text = (
        'Checking.<tool_call>\n{"name": "lookup", "arguments": {"q": 12345}}\n</tool_call>'
        '<tool_call>\n{"name": "clock", "arguments": {}}\n</tool_call>'
    )
    content, deltas, whole = _parsed(text)
    assert content == "Checking."
    assert [c["function"]["name"] for c in whole] == ["lookup", "clock"]
    assert _assembled(deltas) == {0: '{"q": 12345}', 1: "{}"}
    assert [c["function"]["arguments"] for c in whole] == ['{"q": 12345}', "{}"]
    firsts = [d for d in deltas if "id" in d]
    assert [d["id"] for d in firsts] == [c["id"] for c in whole]
    assert all(c["id"].startswith("call_") for c in whole)
    assert len([d for d in deltas if d["function"]["arguments"]]) > 2  # fragments, not whole


def test_parallel_false_keeps_the_first_call_only() -> None:
    text = (
        '<tool_call>\n{"name": "lookup", "arguments": {"q": 1}}\n</tool_call>'
        '<tool_call>\n{"name": "clock", "arguments": {}}\n</tool_call>'
    )
    _, deltas, whole = _parsed(text, parallel=False)
    assert [c["function"]["name"] for c in whole] == ["lookup"]
    assert {d["index"] for d in deltas} == {0}


def test_the_parsers_full_reading_completes_or_corrects_the_stream() -> None:
    stream = sglang_chat.CallStream("parser")
    stream.feed("", [{"tool_index": 0, "name": "lookup", "parameters": ""}])
    stream.feed("", [{"tool_index": 0, "name": None, "parameters": '{"q": '}])
    owed, whole = stream.finish([{"tool_index": 0, "name": "lookup", "parameters": '{"q": 5}'}])
    assert [d["function"]["arguments"] for d in owed] == ["5}"]
    assert whole is not None and whole[0]["function"]["arguments"] == '{"q": 5}'
    astray = sglang_chat.CallStream("parser")
    astray.feed("", [{"tool_index": 0, "name": "lookup", "parameters": '{"z'}])
    _, whole = astray.finish([{"tool_index": 0, "name": "lookup", "parameters": '{"q": 5}'}])
    assert whole is not None and whole[0]["function"]["arguments"] == '{"q": 5}'
