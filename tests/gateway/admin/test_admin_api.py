"""The admin side over real HTTP: who may open it, the session cookie, and the JSON numbers
against a seeded ledger (in-process and on the real Redis)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from gateway.admin.limits import BudgetLimit, limits_of
from gateway.admin.report import budget_rows
from policies.schema import GatewayConfig, TenantSpec
from policies.stores.ledger import DayAggregate
from tests.gateway.ledger_seed import ADMIN_KEY, admin_config, expected, seeded_events
from tiergate_testing.configs import OTHER_KEY, TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

# The budgets feature declares per-tenant limits in the config; before it lands, none.
BUDGETS_IN_CONFIG = "budget" in TenantSpec.model_fields
ADMIN_PATHS = ("/admin", "/admin/api/overview", "/admin/api/denials")


@pytest.fixture(params=["memory", "redis"])
def seeded(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RunningGateway]:
    config = admin_config(fake_config())
    if BUDGETS_IN_CONFIG:
        config["tenants"]["acme"]["budget"] = {"limit_usd": 50.0, "window": "monthly"}
    prefix = ""
    if request.param == "redis":
        # Keys of this test only: a random prefix, however the ledger names its keys.
        prefix = f"tgtest{uuid.uuid4().hex}"
        if "redis_prefix" in GatewayConfig.model_fields:
            config["redis_prefix"] = prefix
        config["redis_url"] = "redis://127.0.0.1:6379/0"
    with running_gateway(config) as gateway:
        for event in seeded_events():
            gateway.call(gateway.state.parts.money.ledger.record(event))
        yield gateway
        if prefix:
            redis = gateway.state.parts.store.client  # type: ignore[attr-defined]

            async def cleanup() -> None:
                keys = [k async for k in redis.scan_iter(match=f"{prefix}*")]
                if keys:
                    await redis.delete(*keys)

            gateway.call(cleanup())


def assert_series(got: dict[str, list[float]], want: dict[str, list[float]]) -> None:
    assert set(got) == set(want)
    for name, values in want.items():
        assert got[name] == pytest.approx(values), name


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_tenant_keys_and_wrong_keys_never_open_admin(seeded: RunningGateway) -> None:
    with httpx.Client(base_url=seeded.base_url) as client:
        for path in ADMIN_PATHS:
            for key in (TEST_KEY, OTHER_KEY, "tg-wrong-admin-key"):
                response = client.get(path, headers=bearer(key))
                assert response.status_code == 403, (path, key)
                assert response.json()["error"]["code"] == "permission_denied"
        for path in ADMIN_PATHS[1:]:
            response = client.get(path)
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "invalid_api_key"
        # Without a session, /admin is the login form and shows no data.
        page = client.get("/admin")
        assert (
            page.status_code == 200 and 'name="key"' in page.text and "chart-spend" not in page.text
        )
        for key in (TEST_KEY, "tg-wrong-admin-key", ""):
            refused = client.post("/admin/login", data={"key": key})
            assert refused.status_code == 401 and "not the admin key" in refused.text
            assert "set-cookie" not in refused.headers
        # The key is never accepted from a URL.
        assert client.get(f"/admin/login?key={ADMIN_KEY}").status_code == 405
        assert client.get(f"/admin/api/overview?key={ADMIN_KEY}").status_code == 401


def test_login_session_cookie_and_logout(seeded: RunningGateway) -> None:
    with httpx.Client(base_url=seeded.base_url) as client:
        response = client.post("/admin/login", data={"key": ADMIN_KEY})
        assert response.status_code == 303 and response.headers["location"] == "/admin"
        cookie = response.headers["set-cookie"]
        attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
        assert {"httponly", "samesite", "path", "max-age"} <= attributes
        assert "samesite=strict" in cookie.lower() and "path=/admin" in cookie.lower()
        token = client.cookies.get("tiergate_admin")
        assert token and ADMIN_KEY not in cookie
        page = client.get("/admin")
        assert page.status_code == 200 and "chart-spend" in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert client.get("/admin/api/overview").status_code == 200
        # A forged or stale cookie is refused.
        forged = httpx.get(
            f"{seeded.base_url}/admin/api/overview", cookies={"tiergate_admin": "x" * 43}
        )
        assert forged.status_code == 401
        assert client.post("/admin/logout").status_code == 303
        stale = httpx.get(
            f"{seeded.base_url}/admin/api/overview", cookies={"tiergate_admin": token}
        )
        assert stale.status_code == 401


def test_api_numbers_match_the_seeded_ledger(seeded: RunningGateway) -> None:
    events = seeded_events()
    today = datetime.now(UTC).date()
    start = today - timedelta(days=6)
    want = expected(events, start, today)
    with httpx.Client(base_url=seeded.base_url, headers=bearer(ADMIN_KEY)) as client:
        params = {"start": start.isoformat(), "end": today.isoformat()}
        overview = client.get("/admin/api/overview", params=params).json()
        assert overview["days"] == want.days
        assert_series(overview["spend"], want.spend)
        assert_series(overview["requests_by_tier"], want.requests_by_tier)
        assert overview["tier_mix"] == pytest.approx(want.tier_mix)
        totals = overview["totals"]
        assert totals["cost_usd"] == pytest.approx(want.cost)
        assert totals["saved_routing_usd"] == pytest.approx(want.saved_routing)
        assert totals["saved_cache_usd"] == pytest.approx(want.saved_cache)
        assert totals["baseline_usd"] == pytest.approx(
            want.cost + want.saved_routing + want.saved_cache
        )
        assert (totals["denied_budget"], totals["denied_rate_limit"]) == (1, 1)
        cache = overview["cache"]
        assert {k: cache[k] for k in want.cache} == pytest.approx(want.cache)
        hits = want.cache["exact"] + want.cache["semantic"]
        assert cache["hit_rate"] == pytest.approx(hits / sum(want.cache.values()))
        assert {r["tenant"]: r["cost_usd"] for r in overview["top_tenants"]} == pytest.approx(
            want.tenant_spend
        )
        assert {r["model"]: r["requests"] for r in overview["top_models"]} == pytest.approx(
            want.model_requests
        )
        budgets = {r["tenant"]: r for r in overview["budgets"]}
        assert {t: r["used_usd"] for t, r in budgets.items()} == pytest.approx(want.month_used)
        assert budgets["globex"]["limit_usd"] is None
        assert budgets["acme"]["limit_usd"] == (50.0 if BUDGETS_IN_CONFIG else None)

        latency = overview["latency"]
        for tier, values in want.latency.items():
            assert {k: latency[tier][k] for k in values} == pytest.approx(values), tier
        sample = client.get("/admin/api/denials", params=params).json()
        assert sample["sampled_events"] == sum(want.tier_mix.values()) + len(want.denials)
        denials = sample["denials"]
        assert [d["request_id"] for d in denials] == want.denials
        assert {d["reason"] for d in denials} == {"budget", "rate_limit"}

        # A wider range takes in the older event; a narrower one leaves it out.
        wide = {"start": (today - timedelta(days=29)).isoformat(), "end": today.isoformat()}
        wide_want = expected(events, today - timedelta(days=29), today)
        wide_totals = client.get("/admin/api/overview", params=wide).json()["totals"]
        assert wide_totals["cost_usd"] == pytest.approx(wide_want.cost) != pytest.approx(want.cost)


def test_bad_ranges_are_openai_shaped_errors(seeded: RunningGateway) -> None:
    with httpx.Client(base_url=seeded.base_url, headers=bearer(ADMIN_KEY)) as client:
        for params in (
            {"start": "yesterday"},
            {"start": "2026-02-10", "end": "2026-02-01"},
            {"start": "2020-01-01", "end": "2026-01-01"},
        ):
            response = client.get("/admin/api/overview", params=params)
            assert response.status_code == 400
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error" and error["param"] in ("start", "end")


def test_static_files_and_chart_library_are_served(seeded: RunningGateway) -> None:
    with httpx.Client(base_url=seeded.base_url) as client:
        script = client.get("/admin/static/dashboard.js")
        assert script.status_code == 200 and "new Chart(" in script.text
        chart = client.get("/admin/static/chart.umd.min.js")
        assert chart.status_code == 200, "run deploy/install-dashboard-assets.sh"
        assert "Chart" in chart.text and len(chart.content) > 100_000
        assert client.get("/admin/static/..%2Fpages.py").status_code == 404


def test_budget_limits_are_read_tolerantly() -> None:
    assert [
        (b.window, b.limit_usd) for b in limits_of("t", {"daily_usd": 5, "monthly_usd": 100})
    ] == [
        ("day", 5.0),
        ("month", 100.0),
    ]
    assert [
        (b.window, b.limit_usd) for b in limits_of("t", [{"window": "month", "limit_usd": 9}])
    ] == [("month", 9.0)]
    assert limits_of("t", {"limit_usd": 5, "window": "daily"}) == [BudgetLimit("t", "day", 5.0)]
    assert limits_of("t", {"limit_usd": 5, "window": "total"}) == []
    assert (
        limits_of("t", None) == [] and limits_of("t", 5) == [] and limits_of("t", {"rpm": 3}) == []
    )


def test_budget_rows_compare_used_with_limits() -> None:
    limits = [
        BudgetLimit("acme", "day", 2.0),
        BudgetLimit("acme", "month", 30.0),
        BudgetLimit("*", "day", 9.0),
    ]
    today = [
        DayAggregate("acme", "2026-01-31", {"cost_usd": 1.5}),
        DayAggregate("globex", "2026-01-31", {"cost_usd": 4.0}),
    ]
    month = [*today, DayAggregate("acme", "2026-01-02", {"cost_usd": 10.0})]
    rows = budget_rows(["acme", "globex"], limits, today, month)
    assert [(r["tenant"], r["window"], r["used_usd"], r["limit_usd"]) for r in rows] == [
        ("acme", "day", 1.5, 2.0),
        ("acme", "month", 11.5, 30.0),
        ("*", "day", 5.5, 9.0),
        ("globex", "month", 4.0, None),
    ]
