"""The one entrance into the serving core (``gateway.core.entrance``): the only place an
``Ask`` is built, whoever calls (the HTTP edge, a batch line, ``/v1/route``,
count_tokens), and what it takes from the caller's options and from the format's turn."""

from __future__ import annotations

import ast

from backends.base import GenerationRequest, SamplingParams
from gateway.core.entrance import Options, ask_for, tier_only
from gateway.wire.compat import Compat
from gateway.wire.format import Turn
from policies.schema import ApiKey, TenantSpec
from policies.tenants import Principal
from routers.session import SessionHint
from tests.support import REPO

PRINCIPAL = Principal("acme", "k", TenantSpec(keys=(ApiKey(id="k", sha256="0" * 64),)))
GENERATION = GenerationRequest(
    "chatcmpl-1", "auto", SamplingParams(max_tokens=8), ({"role": "user", "content": "hi"},)
)
BODY_SESSION = SessionHint("prompt_cache_key", "conversation-1")


def turn() -> Turn:
    return Turn("auto", GENERATION, True, True, {"team": "a"}, Compat(), BODY_SESSION)


def test_an_ask_is_built_in_one_place() -> None:
    built = []
    for path in sorted((REPO / "gateway").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Ask":
                built.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert len(built) == 1 and built[0].startswith("gateway/core/entrance.py:"), built


def test_the_turn_as_the_format_gave_it_without_options() -> None:
    ask = ask_for(PRINCIPAL, turn(), Options())
    assert (ask.principal, ask.requested_model, ask.generation) == (PRINCIPAL, "auto", GENERATION)
    assert (ask.stream, ask.include_usage, ask.metadata) == (True, True, {"team": "a"})
    assert (ask.cache_control, ask.forced_tier, ask.priority) == (None, None, "interactive")
    assert ask.session == BODY_SESSION


def test_the_options_the_core_honours() -> None:
    header = SessionHint("header", "s-1")
    options = Options("no-store", "large", header, "batch", "chatcmpl-stable")
    ask = ask_for(PRINCIPAL, turn(), options)
    assert (ask.cache_control, ask.forced_tier, ask.priority) == ("no-store", "large", "batch")
    assert ask.session == header  # the caller's before the body's
    assert ask.generation.request_id == "chatcmpl-stable"
    assert ask.generation.messages == GENERATION.messages


def test_a_request_asked_only_for_its_tier_neither_streams_nor_is_annotated() -> None:
    ask = ask_for(PRINCIPAL, tier_only("auto", GENERATION, BODY_SESSION), Options())
    assert (ask.stream, ask.include_usage, ask.metadata) == (False, False, None)
    assert ask.session == BODY_SESSION
    assert ask_for(PRINCIPAL, tier_only("auto", GENERATION), Options()).session is None
