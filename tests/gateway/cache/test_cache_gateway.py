"""The prompt cache through the real gateway (uvicorn, official client, real MiniLM), on
Redis 7 (stream index), Redis 8 (vector sets) and the in-process store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.redis_servers import REDIS7_URL, RedisProcess, cache_prefix, delete_prefix
from tiergate_testing.configs import OTHER_KEY, TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

ADMIN_KEY = "tg-admin-key-for-cache-tests"
QUESTION = "What is the boiling point of water at sea level?"
PARAPHRASE = "At sea level, what's the boiling point of water?"

pytestmark = pytest.mark.slow  # loads the sentence model per gateway


def cache_config(redis_url: str | None, prefix: str, **engine: Any) -> dict[str, Any]:
    config = fake_config(**engine)
    config["redis_url"] = redis_url
    config["cache"] = {"semantic": True, "key_prefix": prefix}
    config["admin"] = {"key_from_env": "TIERGATE_CACHE_TEST_ADMIN"}
    # "large" fails after two tokens: its answers must never be cached.
    config["engines"]["fake-large"]["options"] = {"tokens": 8, "fail_after_tokens": 2}
    config["engines"]["fake-medium"]["options"] = {"tokens": 40, "token_delay_s": 0.02}
    config["tenants"]["globex"]["cache"] = {"hit_charge": 1.0}  # globex pays full price on hits
    return config


@pytest.fixture(scope="module", params=["redis7", "redis8", "memory"])
def gateway(request: pytest.FixtureRequest, redis8: RedisProcess) -> Iterator[RunningGateway]:
    url = {"redis7": REDIS7_URL, "redis8": redis8.url, "memory": None}[request.param]
    prefix = cache_prefix()
    monkey = pytest.MonkeyPatch()
    monkey.setenv("TIERGATE_CACHE_TEST_ADMIN", ADMIN_KEY)
    try:
        with running_gateway(cache_config(url, prefix)) as running:
            yield running
    finally:
        monkey.undo()
        if url is not None:
            delete_prefix(url, prefix)


def client(gateway: RunningGateway, key: str = TEST_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=key, max_retries=0)


def ask(
    gateway: RunningGateway,
    content: str,
    *,
    key: str = TEST_KEY,
    model: str = "small",
    headers: dict[str, str] | None = None,
    **params: Any,
) -> tuple[str, dict[str, str]]:
    params.setdefault("temperature", 0)
    raw = client(gateway, key).chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "user", "content": content}],
        extra_headers=headers,
        **params,
    )
    return raw.parse().choices[0].message.content or "", dict(raw.headers)


def stream_events(
    gateway: RunningGateway, content: str, model: str = "small"
) -> tuple[list[Any], str]:
    response = httpx.post(
        gateway.base_url + "/v1/chat/completions",
        json={
            "model": model,
            "stream": True,
            "temperature": 0,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": content}],
        },
        headers={"authorization": f"Bearer {TEST_KEY}"},
        timeout=30,
    )
    assert response.status_code == 200
    events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    return events, response.headers["x-tiergate-cache"]


def started(gateway: RunningGateway, engine: str = "fake-small") -> int:
    return gateway.state.parts.replicas[engine][0].engine.counters.started


def test_exact_hit_is_free_and_saving_is_counted(gateway: RunningGateway) -> None:
    text, headers = ask(gateway, "Name three primary colours.")
    assert headers["x-tiergate-cache"] == "miss"
    before, saved = started(gateway), gateway.state.parts.cache.counters.saved_usd  # type: ignore[union-attr]
    again, hit = ask(gateway, "Name three primary colours.")
    assert hit["x-tiergate-cache"] == "exact" and again == text
    assert float(hit["x-tiergate-cost-usd"]) == 0.0 and float(headers["x-tiergate-cost-usd"]) > 0
    assert started(gateway) == before  # the engine was not asked
    assert gateway.state.parts.cache.counters.saved_usd == pytest.approx(  # type: ignore[union-attr]
        saved + float(headers["x-tiergate-cost-usd"])
    )


def test_semantic_hit_for_a_paraphrase_same_tenant_only(gateway: RunningGateway) -> None:
    answer, first = ask(gateway, QUESTION)
    assert first["x-tiergate-cache"] == "miss"
    same, hit = ask(gateway, PARAPHRASE)
    assert hit["x-tiergate-cache"] == "semantic" and same == answer
    assert float(hit["x-tiergate-cache-similarity"]) >= 0.5
    # The other tenant gets neither the exact entry nor the semantic one (no-store: its own
    # misses must not fill its cache meanwhile).
    keep_out = {"Cache-Control": "no-store"}
    _, other_exact = ask(gateway, QUESTION, key=OTHER_KEY, headers=keep_out)
    _, other_para = ask(gateway, PARAPHRASE, key=OTHER_KEY, headers=keep_out)
    assert other_exact["x-tiergate-cache"] == "miss"
    assert other_para["x-tiergate-cache"] == "miss"


def test_near_miss_and_changed_parameters_miss(gateway: RunningGateway) -> None:
    ask(gateway, "Convert 5 miles to kilometres.")
    for content, params in (
        ("Convert 50 miles to kilometres.", {}),  # a changed number
        ("Convert 5 kilometres to miles.", {}),  # swapped units
        ("Convert 5 miles to kilometres.", {"max_tokens": 3}),
        ("Convert 5 miles to kilometres.", {"seed": 3}),
        ("Convert 5 miles to kilometres.", {"stop": ["w"]}),
        ("Convert 5 miles to kilometres.", {"top_p": 0.5}),
        # the fake honours no json modes; "text" is still another key
        ("Convert 5 miles to kilometres.", {"response_format": {"type": "text"}}),
    ):
        _, headers = ask(gateway, content, **params)
        assert headers["x-tiergate-cache"] == "miss", (content, params)
    _, tier = ask(gateway, "Convert 5 miles to kilometres.", model="fake-small")
    assert tier["x-tiergate-cache"] == "miss"  # another requested model is another key


def test_earlier_turns_must_match_exactly(gateway: RunningGateway) -> None:
    def turn(system: str) -> str:
        raw = client(gateway).chat.completions.with_raw_response.create(
            model="small",
            temperature=0,
            messages=[
                {"role": "system", "content": system},
                {"role": "user", "content": "Summarise our refund policy."},
            ],
        )
        return str(raw.headers["x-tiergate-cache"])

    assert turn("You are the support bot of Acme Shoes.") == "miss"
    assert turn("You are the support bot of Acme Shoes.") == "exact"
    assert turn("You are the support bot of Acme Hats.") == "miss"


def test_stream_replays_identically(gateway: RunningGateway) -> None:
    live, first = stream_events(gateway, "Stream me a short poem about rivers.")
    cached, second = stream_events(gateway, "Stream me a short poem about rivers.")
    assert (first, second) == ("miss", "exact")

    def shape(events: list[str]) -> list[Any]:
        bodies = [json.loads(e) for e in events[:-1]]
        return [{k: v for k, v in b.items() if k not in ("id", "created")} for b in bodies]

    assert cached[-1] == live[-1] == "[DONE]"
    assert shape(cached) == shape(live)
    # A non-streamed request is answered from the same entry.
    text, headers = ask(gateway, "Stream me a short poem about rivers.")
    assert headers["x-tiergate-cache"] == "exact"
    deltas = [json.loads(e)["choices"][0]["delta"].get("content") for e in live[:-2]]
    assert text == "".join(d for d in deltas if d)


def test_errors_are_never_cached(gateway: RunningGateway) -> None:
    for _ in range(2):
        events, status = stream_events(gateway, "This one fails midway.", model="large")
        assert status == "miss"
        assert json.loads(events[-2])["error"]["code"] == "upstream_error"
    assert gateway.state.parts.replicas["fake-large"][0].engine.counters.started >= 2


def test_cut_off_stream_is_never_cached(gateway: RunningGateway) -> None:
    body = {
        "model": "medium",
        "stream": True,
        "temperature": 0,
        "messages": [{"role": "user", "content": "A long answer I will not wait for."}],
    }
    auth = {"authorization": f"Bearer {TEST_KEY}"}
    with httpx.stream(
        "POST", gateway.base_url + "/v1/chat/completions", json=body, headers=auth, timeout=30
    ) as response:
        assert response.headers["x-tiergate-cache"] == "miss"
        for count, _ in enumerate(response.iter_lines()):
            if count >= 4:
                break  # leave mid-stream
    _, headers = ask(gateway, "A long answer I will not wait for.", model="medium")
    assert headers["x-tiergate-cache"] == "miss"
    _, again = ask(gateway, "A long answer I will not wait for.", model="medium")
    assert again["x-tiergate-cache"] == "exact"  # the complete one was stored


def test_cache_control_and_temperature_policy(gateway: RunningGateway) -> None:
    prompt = "List the planets of the solar system."
    _, stored = ask(gateway, prompt, headers={"Cache-Control": "no-store"})
    assert stored["x-tiergate-cache"] == "miss"
    _, still_missing = ask(gateway, prompt)
    assert still_missing["x-tiergate-cache"] == "miss"  # no-store kept it out; this stored it
    _, skipped = ask(gateway, prompt, headers={"Cache-Control": "no-cache"})
    assert skipped["x-tiergate-cache"] == "bypass"
    _, hot = ask(gateway, prompt, temperature=0.9)
    assert hot["x-tiergate-cache"] == "bypass"  # not deterministic: never cached
    _, unset = ask(gateway, prompt, temperature=None)
    assert unset["x-tiergate-cache"] == "bypass"  # OpenAI's default temperature is 1
    _, seeded = ask(gateway, prompt, temperature=0.9, seed=11)
    assert seeded["x-tiergate-cache"] == "miss"
    _, seeded_again = ask(gateway, prompt, temperature=0.9, seed=11)
    assert seeded_again["x-tiergate-cache"] == "exact"


def test_admin_usage_and_flush(gateway: RunningGateway) -> None:
    ask(gateway, "Admin test: what is a prime number?")
    ask(gateway, "Admin test: what is a prime number?", key=OTHER_KEY)
    auth = {"authorization": f"Bearer {ADMIN_KEY}"}
    usage = httpx.get(gateway.base_url + "/admin/api/cache", headers=auth).json()
    assert usage["tenants"]["acme"]["entries"] >= 1
    assert usage["tenants"]["acme"]["memory_bytes"] > 0
    assert usage["counters"]["exact_hits"] >= 0
    # Semantic hits per tenant: acme got one in the paraphrase test, globex none.
    assert usage["tenants"]["acme"]["semantic_hits"] >= 1
    assert usage["tenants"]["globex"]["semantic_hits"] == 0
    # The shared figures: lookups, hits, and the swapped units refused as reordered words.
    shared = usage["tenants"]["acme"]["shared"]
    assert shared["lookups"] >= 5 and shared["semantic_hits"] >= 1
    assert shared["refused"].get("reordered", 0) >= 1
    assert set(shared["verifier"]) == {"calls", "mean_ms", "p50_ms", "p99_ms"}
    denied = httpx.delete(
        gateway.base_url + "/admin/api/cache/acme", headers={"authorization": f"Bearer {TEST_KEY}"}
    )
    assert denied.status_code == 403
    flushed = httpx.delete(gateway.base_url + "/admin/api/cache/acme", headers=auth).json()
    assert flushed["removed"] >= 1
    one = httpx.get(gateway.base_url + "/admin/api/cache/acme", headers=auth).json()
    assert one["entries"] == 0
    _, acme = ask(gateway, "Admin test: what is a prime number?")
    _, globex = ask(gateway, "Admin test: what is a prime number?", key=OTHER_KEY)
    assert acme["x-tiergate-cache"] == "miss" and globex["x-tiergate-cache"] == "exact"
    missing = httpx.get(gateway.base_url + "/admin/api/cache/nobody", headers=auth)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "tenant_not_found"


def test_hit_charge_and_text_completions(gateway: RunningGateway) -> None:
    _, first = ask(gateway, "Charge me for hits, please.", key=OTHER_KEY)
    _, hit = ask(gateway, "Charge me for hits, please.", key=OTHER_KEY)
    assert hit["x-tiergate-cache"] == "exact"
    assert float(hit["x-tiergate-cost-usd"]) == pytest.approx(float(first["x-tiergate-cost-usd"]))
    text = client(gateway).completions.with_raw_response
    one = text.create(model="small", prompt="Once upon a time", max_tokens=4, temperature=0)
    two = text.create(model="small", prompt="Once upon a time", max_tokens=4, temperature=0)
    assert (one.headers["x-tiergate-cache"], two.headers["x-tiergate-cache"]) == ("miss", "exact")
    assert one.parse().choices[0].text == two.parse().choices[0].text
    chat_twin = client(gateway).chat.completions.with_raw_response.create(
        model="small", messages=[{"role": "user", "content": "Once upon a time"}], temperature=0
    )
    assert chat_twin.headers["x-tiergate-cache"] != "exact"  # chat and text never share keys
