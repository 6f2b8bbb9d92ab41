"""The compatibility policy's machinery (``gateway.wire.compat``), as every route family uses it."""

from __future__ import annotations

import pytest

from gateway.errors import InvalidRequest
from gateway.wire.compat import HEADER, Compat, hosted_tools, review

KINDS = {"prompt_cache_key": "hint", "reasoning": "hint", "background": "refused", "n": "honoured"}


def test_hints_are_named_in_order_honoured_fields_are_not() -> None:
    found = review({"reasoning", "n", "prompt_cache_key"}, KINDS)  # type: ignore[arg-type]
    assert found == Compat(ignored=("prompt_cache_key", "reasoning"))
    assert found.headers() == {HEADER: "prompt_cache_key, reasoning"}
    assert review({"n"}, KINDS).headers() == {}  # type: ignore[arg-type]


@pytest.mark.parametrize(("field", "why"), [("background", "no tier"), ("mystery", "unknown")])
def test_refused_and_unknown_fields_are_a_400_naming_them(field: str, why: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        review({field, "reasoning"}, KINDS)  # type: ignore[arg-type]
    assert refused.value.param == field and refused.value.code == "unsupported_parameter"
    assert why in refused.value.message


def test_hosted_tools_are_stripped_when_lenient_and_refused_when_strict() -> None:
    types = ["function", "web_search", "namespace", "web_search", "mcp"]
    kept, compat = hosted_tools(types, frozenset({"function", "namespace"}), "lenient")
    assert kept == [0, 2] and compat.stripped_tools == ("web_search", "mcp")
    assert compat.named == ("tools:web_search", "tools:mcp")
    with pytest.raises(InvalidRequest) as refused:
        hosted_tools(types, frozenset({"function", "namespace"}), "strict")
    assert refused.value.param == "tools[1]" and refused.value.code == "unsupported_tool"


def test_merged_keeps_each_name_once() -> None:
    one = Compat(ignored=("a",), stripped_tools=("web_search",))
    two = Compat(ignored=("a", "b"), stripped_tools=("web_search", "mcp"))
    assert one.merged(two) == Compat(("a", "b"), ("web_search", "mcp"))
