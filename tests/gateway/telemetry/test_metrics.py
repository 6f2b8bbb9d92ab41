"""``GET /metrics`` after real traffic through the official client, read with
prometheus_client's own text parser."""

from __future__ import annotations

import json
import re
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from policies.stores.ledger import SpendEvent
from tests.support import REPO
from tiergate_testing.configs import OTHER_KEY, TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

PRICES = {"fake-small": (0.1, 0.2), "fake-medium": (1.0, 2.0), "fake-large": (10.0, 20.0)}


def scrape(gateway: RunningGateway) -> list[Sample]:
    response = httpx.get(f"{gateway.base_url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return [s for family in text_string_to_metric_families(response.text) for s in family.samples]


def value(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum over the samples named ``name`` whose labels include ``labels``."""
    found = [s.value for s in samples if s.name == name and labels.items() <= s.labels.items()]
    assert found, f"no sample {name} {labels}"
    return sum(found)


def ledger_events(gateway: RunningGateway) -> list[SpendEvent]:
    now = time.time()
    events: list[SpendEvent] = gateway.call(
        gateway.state.parts.money.ledger.events(now - 600, now + 60)
    )
    return events


def client(gateway: RunningGateway, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=key, max_retries=0)


def traffic_config() -> dict[str, object]:
    config = fake_config(tokens=6)
    engines = config["engines"]
    engines["fake-small"]["replicas"] = 2
    engines["fake-large"]["options"] = {"tokens": 6, "first_token_delay_s": 0.3}
    engines["fake-medium"]["options"] = {"tokens": 8, "token_delay_s": 0.5}
    engines["fake-medium"]["max_inflight"] = 2
    config["metrics"] = {
        "tenant_label": True,
        "autoscale": {
            "up_p99_s": 0.25,
            "down_p99_s": 0.15,
            "up_utilisation": 0.8,
            "down_utilisation": 0.3,
        },
    }
    return config


def test_counters_and_histograms_move_with_traffic() -> None:
    with running_gateway(traffic_config()) as gateway:
        before = scrape(gateway)
        assert not [s for s in before if s.name == "tiergate_requests_total"]
        acme, globex = client(gateway, TEST_KEY), client(gateway, OTHER_KEY)
        usages: list[tuple[str, int, int]] = []
        for i in range(3):
            reply = acme.chat.completions.create(
                model="small", messages=[{"role": "user", "content": f"hi {i}"}]
            )
            assert reply.usage is not None
            usages.append(("fake-small", reply.usage.prompt_tokens, reply.usage.completion_tokens))
        stream = globex.completions.create(
            model="large",
            prompt="one two three",
            stream=True,
            stream_options={"include_usage": True},
        )
        final = [chunk for chunk in stream if chunk.usage is not None]
        assert final and final[-1].usage is not None
        usages.append(
            ("fake-large", final[-1].usage.prompt_tokens, final[-1].usage.completion_tokens)
        )

        samples = scrape(gateway)
        assert (
            value(
                samples,
                "tiergate_requests_total",
                tenant="acme",
                tier="small",
                model="fake-small",
                status="ok",
                cache="bypass",
            )
            == 3
        )
        assert (
            value(samples, "tiergate_requests_total", tenant="globex", tier="large", status="ok")
            == 1
        )
        assert value(samples, "tiergate_time_to_first_token_seconds_count", tier="small") == 3
        assert value(samples, "tiergate_time_to_first_token_seconds_count", tier="large") == 1
        assert value(samples, "tiergate_time_to_first_token_seconds_sum", tier="large") >= 0.3
        # The 0.3 s first token lands above the 0.25 s bucket.
        assert (
            value(samples, "tiergate_time_to_first_token_seconds_bucket", tier="large", le="0.25")
            == 0
        )
        assert (
            value(samples, "tiergate_time_to_first_token_seconds_bucket", tier="large", le="2.0")
            == 1
        )
        assert value(samples, "tiergate_time_per_output_token_seconds_count", tier="small") == 3
        assert (
            value(samples, "tiergate_request_duration_seconds_count", tier="small", status="ok")
            == 3
        )
        assert value(samples, "tiergate_request_duration_seconds_sum", tier="large") >= value(
            samples, "tiergate_time_to_first_token_seconds_sum", tier="large"
        )
        assert value(samples, "tiergate_tokens_total", direction="input") == sum(
            u[1] for u in usages
        )
        assert value(samples, "tiergate_tokens_total", direction="output") == sum(
            u[2] for u in usages
        )
        cost = sum((p * PRICES[m][0] + c * PRICES[m][1]) / 1e6 for m, p, c in usages)
        baseline = sum((p * 10.0 + c * 20.0) / 1e6 for _, p, c in usages)
        assert value(samples, "tiergate_cost_usd_total") == pytest.approx(cost)
        assert value(samples, "tiergate_saved_usd_total", reason="routing") == pytest.approx(
            baseline - cost
        )

        # Engine gauges, one series per replica; the hit rate once an engine reports one.
        for engine in ("fake-small-0", "fake-small-1", "fake-medium-0", "fake-large-0"):
            assert value(samples, "tiergate_engine_healthy", engine=engine) == 1
            assert value(samples, "tiergate_engine_inflight", engine=engine) == 0
            assert value(samples, "tiergate_engine_queue_depth", engine=engine) == 0
        assert not [s for s in samples if s.name == "tiergate_engine_prefix_cache_hit_rate"]
        gateway.state.parts.replicas["fake-small"][0].engine.counters.extra.update(
            prefix_cache_hits=3.0, prefix_cache_queries=4.0
        )
        rate = value(
            scrape(gateway), "tiergate_engine_prefix_cache_hit_rate", engine="fake-small-0"
        )
        assert rate == pytest.approx(0.75)

        # Autoscaling: large is slow (p99 TTFT 0.3 s > 0.25 s) → up; small is fast and idle → down.
        assert value(samples, "tiergate_autoscale_recommended_replicas", tier="large") == 2
        assert value(samples, "tiergate_autoscale_direction", tier="large") == 1
        assert value(samples, "tiergate_autoscale_recommended_replicas", tier="small") == 1
        assert value(samples, "tiergate_autoscale_direction", tier="small") == -1
        assert value(samples, "tiergate_tier_replicas", tier="small") == 2

        # Medium has room for two: two open streams fill it → utilisation 1 → up.
        body = {"model": "medium", "messages": [{"role": "user", "content": "x"}], "stream": True}
        headers = {"authorization": f"Bearer {TEST_KEY}"}
        with httpx.Client(base_url=gateway.base_url, headers=headers, timeout=10) as http:
            with (
                http.stream("POST", "/v1/chat/completions", json=body) as one,
                http.stream("POST", "/v1/chat/completions", json=body) as two,
            ):
                assert one.status_code == two.status_code == 200
                busy = scrape(gateway)
                assert value(busy, "tiergate_engine_inflight", engine="fake-medium-0") == 2
                assert value(busy, "tiergate_tier_utilisation_ratio", tier="medium") == 1.0
                assert value(busy, "tiergate_autoscale_direction", tier="medium") == 1
        # Leaving mid-stream is counted as cancelled once the engine request is aborted.
        for _ in range(200):
            after = scrape(gateway)
            cancelled = [
                s
                for s in after
                if s.name == "tiergate_requests_total" and s.labels["status"] == "cancelled"
            ]
            if sum(s.value for s in cancelled) == 2:
                break
            time.sleep(0.02)
        assert value(after, "tiergate_requests_total", tier="medium", status="cancelled") == 2
        assert value(after, "tiergate_engine_inflight", engine="fake-medium-0") == 0
        # A cancelled stream is charged (its prompt reached an engine): /metrics says what
        # the ledger says, request by request summed per tier.
        for _ in range(200):
            events = [e for e in ledger_events(gateway) if e.status == "cancelled"]
            if len(events) == 2:
                break
            time.sleep(0.02)
        assert len(events) == 2 and all(e.cost_usd > 0 for e in events)
        assert value(scrape(gateway), "tiergate_cost_usd_total", tier="medium") == pytest.approx(
            sum(e.cost_usd for e in events)
        )
        ledger = ledger_events(gateway)
        for tier in ("small", "large"):
            assert value(scrape(gateway), "tiergate_cost_usd_total", tier=tier) == pytest.approx(
                sum(e.cost_usd for e in ledger if e.tier == tier)
            )


def test_failures_denials_and_no_tenant_label() -> None:
    config = fake_config(tokens=4)
    config["engines"]["fake-large"]["options"] = {"dead": True}
    config["tiers"]["large"]["fallback"] = None
    config["metrics"] = {"tenant_label": False}
    config["tenants"]["acme"]["rate_limit"] = {"requests_per_minute": 2}
    config["tenants"]["globex"]["budget"] = {"limit_usd": 0.0}
    with running_gateway(config) as gateway:
        acme, globex = client(gateway, TEST_KEY), client(gateway, OTHER_KEY)
        hi = [{"role": "user", "content": "x"}]
        with pytest.raises(openai.APIStatusError) as refused:
            acme.chat.completions.create(model="large", messages=hi)  # type: ignore[arg-type]
        assert refused.value.status_code == 503
        acme.chat.completions.create(model="small", messages=hi)  # type: ignore[arg-type]
        for _ in range(2):  # the third and fourth request in the minute
            with pytest.raises(openai.RateLimitError) as limited:
                acme.chat.completions.create(model="small", messages=hi)  # type: ignore[arg-type]
            assert limited.value.code == "rate_limit_exceeded"
        with pytest.raises(openai.RateLimitError) as broke:
            globex.chat.completions.create(model="small", messages=hi)  # type: ignore[arg-type]
        assert broke.value.code == "insufficient_quota"
        samples = scrape(gateway)
        assert value(samples, "tiergate_requests_total", tier="large", status="error") == 1
        assert value(samples, "tiergate_requests_total", tier="small", status="ok") == 1
        assert (
            value(samples, "tiergate_request_duration_seconds_count", tier="large", status="error")
            == 1
        )
        assert value(samples, "tiergate_engine_healthy", engine="fake-large-0") == 0
        assert value(samples, "tiergate_denials_total", reason="budget") == 1
        assert value(samples, "tiergate_denials_total", reason="rate_limit") == 2
        assert value(samples, "tiergate_classifier_duration_seconds_count") == 0  # no `auto`
        assert not [s for s in samples if "tenant" in s.labels]
        # The ledger records each refusal with its reason, as the counter does.
        denied = [e for e in ledger_events(gateway) if e.kind == "denied"]
        assert sorted(e.status for e in denied) == ["budget", "rate_limit", "rate_limit"]


def test_grafana_dashboard_queries_only_exported_metrics() -> None:
    dashboard = json.loads((REPO / "deploy" / "grafana" / "tiergate.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    wanted = {m for e in exprs for m in re.findall(r"\btiergate_[a-z0-9_]+", e)}
    config = fake_config(tokens=3)
    config["tenants"]["globex"]["budget"] = {"limit_usd": 0.0}
    with running_gateway(config) as gateway:
        client(gateway, TEST_KEY).chat.completions.create(
            model="small", messages=[{"role": "user", "content": "x"}]
        )
        with pytest.raises(openai.RateLimitError):  # a real denial, so the series exists
            client(gateway, OTHER_KEY).chat.completions.create(
                model="small", messages=[{"role": "user", "content": "x"}]
            )
        gateway.state.parts.replicas["fake-small"][0].engine.counters.extra[
            "prefix_cache_hit_rate"
        ] = 0.5
        exported = {s.name for s in scrape(gateway)}
    missing = wanted - exported
    assert not missing, missing
    assert len(wanted) >= 15
