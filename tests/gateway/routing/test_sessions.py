"""``routing.sessions`` through the real gateway (official clients, uvicorn, fake engines
scripted to call tools): each wire format names its session, a session keeps its tier
across two replicas on one Redis, every failure signal moves it one tier up, and a turn
prices the prefix its tier already caches."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from policies.schema import GatewayConfig
from routers.tier_costs import expected_costs, prefix_costs
from tests.redis_servers import REDIS7_URL, delete_prefix, unique_root
from tiergate_testing.configs import OTHER_KEY, TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

TIERS = ["small", "medium", "large"]
SYSTEM = "You are a coding agent with a shell tool."
TASK = "Say hello in Spanish, then run the tests."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a shell command in the repository.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    }
]
SCRIPT = [
    {
        "when": "run the tests",
        "call": "run",
        "arguments": {"cmd": "pytest -q tests/test_parser.py"},
    },
    {"when": "broken call", "call": "run", "arguments": {"cmd": "ls -la"}, "broken": True},
]
HEADERS = {"authorization": f"Bearer {TEST_KEY}"}


def session_config(tmp: Path, **top: Any) -> dict[str, Any]:
    labels = tmp / "labels.jsonl"
    labels.write_text("")
    config = fake_config(tools=True, tool_script=SCRIPT)
    for tier, price in zip(TIERS, (0.1, 1.0, 10.0), strict=True):  # cached input: a tenth
        config["prices"][f"fake-{tier}"] = {
            "input": price,
            "cached_input": price / 10,
            "output": 2 * price,
        }
    for tenant in config["tenants"].values():
        tenant["cache"] = {"enabled": False}  # a turn sent again is routed, not replayed
    config["routing"] = {
        "classifier": {"max_wait_ms": 1},
        "objective": {"quality": 0.95},
        "target": {"min_samples": 100_000},  # the reference traffic's λ: deterministic
        "feedback": {
            "sample": 0.0,
            "judge": {"labels": str(labels)},
            "record_flush_s": 0.05,
            "refit": {"online": False},
        },
    }
    config.update(top)
    return config


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    with running_gateway(session_config(tmp_path_factory.mktemp("sessions"))) as running:
        yield running


def opening(task: str = TASK, system: str = SYSTEM) -> list[dict[str, Any]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": task}]


def tool_round(messages: list[dict[str, Any]], i: int) -> list[dict[str, Any]]:
    """The conversation after one more tool round (a scripted call and its result)."""
    call = {"id": f"call_{i}", "type": "function", "function": {"name": "run", "arguments": "{}"}}
    return [
        *messages,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": f"round {i}: 3 passed " * 30},
    ]


def chat(
    base_url: str,
    messages: list[dict[str, Any]],
    key: str = TEST_KEY,
    max_tokens: int = 64,
    **extra: Any,
) -> Any:
    with openai.OpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0) as client:
        return client.chat.completions.with_raw_response.create(
            model="auto", messages=messages, tools=TOOLS, max_tokens=max_tokens, **extra
        )


def explain(base_url: str, messages: list[dict[str, Any]], **headers: str) -> dict[str, Any]:
    answer = httpx.post(
        base_url + "/v1/route",
        json={"messages": messages, "tools": TOOLS},
        headers={**HEADERS, **headers},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def session_of(raw: Any) -> str:
    value: str = raw.headers["x-tiergate-session"]
    return value


def wait_for(check: Any, timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_chat_names_sessions_by_prefix_user_cache_key_and_header(gateway: RunningGateway) -> None:
    url = gateway.base_url
    first = chat(url, opening())
    grown = chat(url, tool_round(opening(), 0))
    assert session_of(first) == session_of(grown)  # the conversation's stable prefix
    assert session_of(chat(url, opening(system="Another agent."))) != session_of(first)
    # ``user`` names the person: it scopes the derived session, it does not replace it
    alice, bob = chat(url, opening(), user="alice"), chat(url, opening(), user="bob")
    assert len({session_of(alice), session_of(bob), session_of(first)}) == 3
    assert session_of(chat(url, tool_round(opening(), 0), user="alice")) == session_of(alice)
    # ``x-session-id`` names the conversation whatever it says (``prompt_cache_key`` does
    # too; on chat it is also forwarded to the engine, which the fake one refuses)
    named = {"x-session-id": "task-42"}
    a = chat(url, opening(), extra_headers=named)
    b = chat(url, opening(task="something else"), extra_headers=named)
    assert session_of(a) == session_of(b) != session_of(first)
    # another tenant with the same header is another session
    c = chat(url, opening(), key=OTHER_KEY, extra_headers=named)
    assert session_of(c) != session_of(a)


def test_responses_chain_and_cache_key_name_the_session(gateway: RunningGateway) -> None:
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)
    first = client.responses.with_raw_response.create(
        model="auto", instructions=SYSTEM, input=TASK, max_output_tokens=32
    )
    answer = first.parse()
    follow = client.responses.with_raw_response.create(
        model="auto",
        previous_response_id=answer.id,
        input="Now explain what you did.",
        max_output_tokens=32,
    )
    assert session_of(follow) == session_of(first)
    third = client.responses.with_raw_response.create(
        model="auto",
        previous_response_id=follow.parse().id,
        input="And once more.",
        max_output_tokens=32,
    )
    assert session_of(third) == session_of(first)
    keyed = [
        client.responses.with_raw_response.create(
            model="auto", input=text, max_output_tokens=16, extra_body={"prompt_cache_key": "k1"}
        )
        for text in ("one task", "a different text")
    ]
    assert session_of(keyed[0]) == session_of(keyed[1]) != session_of(first)


def test_messages_user_id_scopes_the_conversation(gateway: RunningGateway) -> None:
    client = anthropic.Anthropic(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0)

    def ask(user: str, turns: list[dict[str, Any]]) -> Any:
        return client.messages.with_raw_response.create(
            model="auto",
            system=SYSTEM,
            max_tokens=32,
            messages=turns,  # type: ignore[arg-type]
            metadata={"user_id": user},
        )

    start = [{"role": "user", "content": TASK}]
    grown = [
        *start,
        {"role": "assistant", "content": "Hola."},
        {"role": "user", "content": "And in French?"},
    ]
    a1, a2, b1 = (
        ask("user_a_session_1", start),
        ask("user_a_session_1", grown),
        ask("user_b", start),
    )
    assert session_of(a1) == session_of(a2) != session_of(b1)


def test_a_session_keeps_its_tier_across_two_replicas_on_redis(tmp_path: Path) -> None:
    root = unique_root()
    config = session_config(tmp_path, redis_url=REDIS7_URL, redis_prefix=root)
    try:
        with running_gateway(config) as a, running_gateway(config) as b:
            replicas = [a.base_url, b.base_url]
            messages = opening(
                task="Prove that the parser handles nested brackets, then run the tests."
            )
            tiers, sessions = [], []
            for turn in range(6):
                raw = chat(replicas[turn % 2], messages)
                tiers.append(raw.headers["x-tiergate-tier"])
                sessions.append(session_of(raw))
                messages = tool_round(messages, turn)
            assert len(set(sessions)) == 1 and len(set(tiers)) == 1, tiers
            # the replica that did not serve the last turn knows the session from Redis
            shown = explain(replicas[0], messages)
            assert shown["session"]["turn"] == 7 and shown["session"]["tier"] == tiers[0]
            assert shown["session"]["cached_prefix_chars"] > 0 and not shown["session"]["moved"]
            assert "stays on" in shown["objective"]["reason"]
    finally:
        delete_prefix(REDIS7_URL, root)


def escalated(
    gateway: RunningGateway, messages: list[dict[str, Any]], start: str
) -> dict[str, Any]:
    """The next turn's route once the session's signal has arrived (it is noted in the
    background when the failing turn ends)."""

    def moved() -> dict[str, Any] | None:
        shown = explain(gateway.base_url, messages)
        return shown if shown["session"]["moved"] else None

    shown: dict[str, Any] = wait_for(moved)
    assert shown["tier"] == TIERS[TIERS.index(start) + 1]
    return shown


def started(gateway: RunningGateway, task: str) -> tuple[list[dict[str, Any]], str, Any]:
    messages = opening(task=task)
    raw = chat(gateway.base_url, messages)
    tier = raw.headers["x-tiergate-tier"]
    assert tier != "large", "the signal tests need a session that can move up"
    return messages, tier, raw


def test_a_retried_turn_escalates(gateway: RunningGateway) -> None:
    messages, tier, _ = started(gateway, "Say hello in Spanish and run the tests (retry case).")
    messages = tool_round(messages, 0)
    assert chat(gateway.base_url, messages).headers["x-tiergate-tier"] == tier
    again = chat(gateway.base_url, messages)  # the same turn sent again
    assert again.headers["x-tiergate-tier"] == TIERS[TIERS.index(tier) + 1]
    shown = explain(gateway.base_url, tool_round(messages, 1))
    assert shown["tier"] == again.headers["x-tiergate-tier"]  # the session stays up there
    assert "stays on" in shown["session"]["reason"]


def test_count_tokens_counts_on_the_tier_its_session_routes_to(gateway: RunningGateway) -> None:
    """``count_tokens`` reads the headers the real request is routed by: an
    ``x-session-id`` session that has moved up counts (and answers) on its tier."""
    named = {"x-session-id": "count-tokens-session"}
    messages = opening(task="Say hello in Spanish and run the tests (count case).")
    tier = chat(gateway.base_url, messages, extra_headers=named).headers["x-tiergate-tier"]
    assert tier != "large", "the session must be able to move up"
    again = chat(gateway.base_url, messages, extra_headers=named)  # retried: one tier up
    assert again.headers["x-tiergate-tier"] == TIERS[TIERS.index(tier) + 1]
    client = anthropic.Anthropic(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0)
    turn: Any = [{"role": "user", "content": "Now list the files, please."}]
    counted = client.messages.with_raw_response.count_tokens(
        model="auto", system=SYSTEM, messages=turn, extra_headers=named
    )
    assert counted.headers["x-tiergate-tier"] == again.headers["x-tiergate-tier"]
    real = client.messages.with_raw_response.create(
        model="auto", system=SYSTEM, max_tokens=16, messages=turn, extra_headers=named
    )
    assert real.headers["x-tiergate-tier"] == counted.headers["x-tiergate-tier"]
    assert session_of(real) == session_of(again)


def test_a_bad_verdict_escalates(gateway: RunningGateway) -> None:
    messages, tier, raw = started(gateway, "Say hello in Spanish and run the tests (verdict case).")
    answer = httpx.post(
        gateway.base_url + "/v1/feedback",
        json={"request_id": raw.parse().id, "verdict": "bad"},
        headers=HEADERS,
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["session_escalates"] is True
    shown = escalated(gateway, tool_round(messages, 0), tier)
    assert "bad feedback verdict" in shown["session"]["reason"]


def test_a_tool_call_the_engine_could_not_form_escalates(gateway: RunningGateway) -> None:
    messages, tier, raw = started(gateway, "Say hello in Spanish, then make a broken call.")
    assert raw.parse().choices[0].message.tool_calls  # the engine's malformed call
    shown = escalated(gateway, tool_round(messages, 0), tier)
    assert "could not form" in shown["session"]["reason"]


def test_an_answer_cut_inside_a_tool_call_escalates(gateway: RunningGateway) -> None:
    messages = opening(task="Say hello in Spanish and run the tests (cut case).")
    raw = chat(gateway.base_url, messages, max_tokens=2)  # the call's arguments are cut
    tier = raw.headers["x-tiergate-tier"]
    assert tier != "large" and raw.parse().choices[0].finish_reason == "length"
    shown = escalated(gateway, tool_round(messages, 0), tier)
    assert "cut by length inside a tool call" in shown["session"]["reason"]


def test_a_later_turn_prices_its_cached_prefix(gateway: RunningGateway) -> None:
    messages = opening(task="Say hello in Spanish and run the tests (pricing case).")
    for turn in range(3):
        raw = chat(gateway.base_url, messages)
        messages = tool_round(messages, turn)
    tier = raw.headers["x-tiergate-tier"]
    shown = explain(gateway.base_url, messages)
    session, costs = shown["session"], shown["objective"]["expected_cost_usd"]
    config: GatewayConfig = gateway.state.config
    objective = config.routing.objective
    assert objective is not None
    chars = sum(len(m["content"] or "") for m in messages)
    cold = dict(zip(TIERS, expected_costs(config, objective, chars), strict=True))
    # the last turn's context is cached on the session's tier: its cost falls by the
    # cached share; every other tier pays full input on the whole context
    held = session["cached_prefix_chars"]
    assert held > 0 and session["tier"] == tier
    warm = prefix_costs(config, objective, chars, {tier: held})
    assert costs[tier] == pytest.approx(warm[TIERS.index(tier)]) and costs[tier] < cold[tier]
    for other in set(TIERS) - {tier}:
        assert costs[other] == pytest.approx(cold[other])


def test_sessions_off_route_each_turn_alone(tmp_path: Path) -> None:
    config = session_config(tmp_path)
    config["routing"]["sessions"] = None
    with running_gateway(config) as running:
        raw = chat(running.base_url, tool_round(opening(), 0))
        assert "x-tiergate-session" not in raw.headers
        assert explain(running.base_url, opening())["session"] is None


async def test_the_serving_replica_is_noted_only_where_the_pool_has_a_choice() -> None:
    """A tier served by one replica has no replica to remember (one write fewer a turn);
    with two, the next turn's hint is noted."""
    import asyncio

    from backends.pool import EnginePool
    from policies.stores.sessions import REPLICA, MemorySessionStore
    from routers.live_sessions import Sessions
    from routers.session import SessionKey
    from routers.session_policy import SessionTurn
    from tests.backends.test_pool import replicas

    store = MemorySessionStore()
    pools = {"small": EnginePool("small", replicas(1)), "large": EnginePool("large", replicas(2))}
    background: set[asyncio.Task[None]] = set()
    sessions = Sessions(store, pools, background)
    for n, tier in enumerate(("small", "large")):
        key = SessionKey(f"{n:032x}", "header")
        await store.write(key.id, b"{}", f"req-{n}", None, 60, 100)
        turn = SessionTurn(key, 1, tier, "new", False, 0)
        sessions.finished(turn, tier, "stop", None, "fake-0")
        await asyncio.gather(*background)
    assert REPLICA not in await store.read(f"{0:032x}")  # one replica: nothing to choose
    assert (await store.read(f"{1:032x}"))[REPLICA] == b"large\0fake-0"
