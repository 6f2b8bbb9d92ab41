"""The llama.cpp tool-call grammar and reader, without a model: every grammar we build
parses as GBNF, and the reader's streamed deltas join into the whole call however the
text is split."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from backends.llamacpp_tools import ToolCallReader, build_grammar
from backends.tool_calls import ToolPlan, tool_plan


class Inner(BaseModel):
    label: str


class Outer(BaseModel):
    items: list[Inner]
    count: int


TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "no_params"}},
    {
        "type": "function",
        "function": {"name": "with_defs", "parameters": Outer.model_json_schema()},
    },
]
SCHEMA = {"type": "json_schema", "json_schema": {"name": "o", "schema": Outer.model_json_schema()}}


@pytest.mark.parametrize(
    ("choice", "response_format"),
    [
        ("required", None),
        ("auto", None),
        ("auto", SCHEMA),
        ({"type": "function", "function": {"name": "with_defs"}}, None),
        ("none", {"type": "json_object"}),
        ("none", SCHEMA),
    ],
)
def test_every_grammar_parses(choice: Any, response_format: Any) -> None:
    from llama_cpp.llama_grammar import LlamaGrammar

    text = build_grammar(tool_plan(TOOLS, choice), response_format)
    assert text is not None and text.startswith("root ::= ")
    LlamaGrammar.from_string(text, verbose=False)  # raises on a malformed grammar


def test_same_named_definitions_in_two_tools_get_their_own_rules() -> None:
    class Item(BaseModel):
        size: int

    class Holder(BaseModel):
        item: Item

    class OtherItem(BaseModel):
        colour: str

    other = OtherItem.model_json_schema()
    other_holder = {
        "type": "object",
        "properties": {"item": {"$ref": "#/$defs/Item"}},
        "$defs": {"Item": other},
    }
    tools: list[Any] = [
        {"type": "function", "function": {"name": "a", "parameters": Holder.model_json_schema()}},
        {"type": "function", "function": {"name": "b", "parameters": other_holder}},
    ]
    before = json.dumps(tools, sort_keys=True)
    text = build_grammar(tool_plan(tools, "required"), None)
    assert text is not None
    assert "tool0-Item" in text and "tool1-Item" in text
    assert json.dumps(tools, sort_keys=True) == before  # the request is left as it came


def test_free_text_needs_no_grammar() -> None:
    assert build_grammar(tool_plan(TOOLS, "none"), None) is None
    assert build_grammar(tool_plan(None, None), {"type": "text"}) is None


def test_a_named_choice_keeps_only_that_function() -> None:
    plan = tool_plan(TOOLS, {"type": "function", "function": {"name": "with_defs"}})
    assert plan.mode == "forced" and [f["name"] for f in plan.functions] == ["with_defs"]


OUTPUT = (
    '<tool_call>{"name": "with_defs", "arguments": '
    '{"items": [{"label": "a}b"}], "count": 2} }</tool_call>'
)


@pytest.mark.parametrize("step", [1, 2, 5, 13, len(OUTPUT)])
def test_streamed_deltas_join_into_the_whole_call(step: int) -> None:
    reader = ToolCallReader(ToolPlan("auto", tuple(t["function"] for t in TOOLS)))
    deltas = []
    for i in range(0, len(OUTPUT), step):
        content, new = reader.feed(OUTPUT[i : i + step])
        assert content == ""
        deltas += new
    last, calls = reader.finish()
    deltas += last
    assert calls is not None and len(calls) == 1
    arguments = calls[0]["function"]["arguments"]
    assert json.loads(arguments) == {"items": [{"label": "a}b"}], "count": 2}
    assert deltas[0]["id"] == calls[0]["id"] and deltas[0]["function"]["name"] == "with_defs"
    assert "".join(d["function"]["arguments"] for d in deltas) == arguments


def test_auto_text_passes_through_as_content() -> None:
    reader = ToolCallReader(ToolPlan("auto", ()))
    assert reader.feed("Hello") == ("Hello", [])
    assert reader.feed(" <b>") == (" <b>", [])
    assert reader.finish() == ([], None)
