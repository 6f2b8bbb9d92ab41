"""End to end in a real browser: Debian's headless Chromium driven by Playwright logs in to
``/admin`` on a gateway with a seeded ledger and reads every chart back from Chart.js.

Needs ``/usr/bin/chromium`` (apt package ``chromium``) and the npm-installed chart
library (``deploy/install-dashboard-assets.sh``). The screenshot is kept in artifacts/.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gateway.admin.pages import CHART_JS
from policies.schema import TenantSpec
from policies.stores.ledger import SpendEvent
from tests.gateway.ledger_seed import ADMIN_KEY, Expected, admin_config, expected, seeded_events
from tests.support import REPO
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
BUDGETS_IN_CONFIG = "budget" in TenantSpec.model_fields
ARTIFACT = REPO / "artifacts" / "dashboard.png"


def _require(path: Path, why: str) -> None:
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{path} is missing: {why}")
        pytest.skip(f"{path} is missing: {why}")


@pytest.fixture
def browser() -> Iterator[Any]:
    _require(CHROMIUM, "apt-get install -y chromium")
    _require(CHART_JS, "run deploy/install-dashboard-assets.sh")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=FLAGS
        )
        yield launched
        launched.close()


@pytest.fixture
def gateway() -> Iterator[RunningGateway]:
    config = admin_config(fake_config())
    if BUDGETS_IN_CONFIG:
        config["tenants"]["acme"]["budget"] = {"limit_usd": 50.0, "window": "monthly"}
    with running_gateway(config) as running:
        for event in seeded_events():
            running.call(running.state.parts.money.ledger.record(event))
        yield running


def chart(page: Any, canvas_id: str) -> dict[str, Any]:
    data: dict[str, Any] = page.evaluate(
        """id => {
            const c = Chart.getChart(id);
            const sets = Object.fromEntries(c.data.datasets.map(d => [d.label, d.data]));
            return { labels: c.data.labels, sets };
        }""",
        canvas_id,
    )
    return data


def check_charts(page: Any, want: Expected) -> None:
    spend = chart(page, "chart-spend")
    assert spend["labels"] == want.days
    assert set(spend["sets"]) == set(want.spend)
    for tenant, values in want.spend.items():
        assert spend["sets"][tenant] == pytest.approx(values), tenant
    tiers = chart(page, "chart-tiers")
    assert tiers["labels"] == want.days
    for tier, values in want.requests_by_tier.items():
        assert tiers["sets"][tier] == pytest.approx(values), tier
    mix = chart(page, "chart-mix")
    assert mix["labels"] == list(want.tier_mix)
    assert mix["sets"]["requests"] == pytest.approx(list(want.tier_mix.values()))
    savings = chart(page, "chart-savings")["sets"]
    baseline = want.cost + want.saved_routing + want.saved_cache
    assert savings["Spent"] == pytest.approx([baseline, want.cost])
    assert savings["Saved by routing"] == pytest.approx([0, want.saved_routing])
    assert savings["Saved by caching"] == pytest.approx([0, want.saved_cache])
    assert savings["Saved by batch prices"] == [0, 0]  # the seeded ledger has no batch line
    assert page.locator("#batches tbody").inner_text() == "No batches."
    cache = chart(page, "chart-cache")
    assert cache["sets"]["requests"] == pytest.approx(list(want.cache.values()))
    budget = chart(page, "chart-budget")
    assert budget["labels"] == ["acme (month)", "globex (month)"]
    assert budget["sets"]["Used (USD)"] == pytest.approx(
        [want.month_used["acme"], want.month_used["globex"]]
    )
    if BUDGETS_IN_CONFIG:
        assert budget["sets"]["Limit (USD)"] == [50.0, None]
    else:
        assert "Limit (USD)" not in budget["sets"]
    latency = chart(page, "chart-latency")
    assert latency["labels"] == ["small", "medium", "large"]
    for label, key in (
        ("latency p50", "latency_p50_ms"),
        ("latency p99", "latency_p99_ms"),
        ("TTFT p50", "ttft_p50_ms"),
        ("TTFT p99", "ttft_p99_ms"),
    ):
        assert latency["sets"][label] == pytest.approx(
            [want.latency[t][key] for t in latency["labels"]]
        ), label
    tenants = chart(page, "chart-tenants")
    assert dict(
        zip(tenants["labels"], tenants["sets"]["Spend (USD)"], strict=True)
    ) == pytest.approx(want.tenant_spend)
    models = chart(page, "chart-models")
    assert dict(zip(models["labels"], models["sets"]["Requests"], strict=True)) == pytest.approx(
        want.model_requests
    )
    rows = page.locator("#denials tbody tr")
    ids = [rows.nth(i).locator("td").nth(5).inner_text() for i in range(rows.count())]
    assert ids == want.denials or (not want.denials and ids == ["No denials in this range."])
    assert page.locator("#kpi-cost").inner_text() == f"${want.cost:.2f}"
    share = page.locator("#tier-share tbody tr")  # no target_share here: targets blank
    cells = [share.nth(i).locator("td").all_inner_texts() for i in range(share.count())]
    blank = "\u2013"  # the dashboard's dash for "no value"
    assert [(c[0], c[1]) for c in cells] == [(t, blank) for t in ("small", "medium", "large")]
    assert "thresholds 0.300 / 0.700 from thresholds" in page.locator("#share-caption").inner_text()


def wait_loaded(page: Any, start: str, end: str) -> None:
    page.wait_for_selector(f'body[data-loaded="{start}/{end}"]', timeout=15_000)


def test_dashboard_in_headless_chromium(browser: Any, gateway: RunningGateway) -> None:
    events: list[SpendEvent] = seeded_events()
    today = datetime.now(UTC).date()
    week_start = today - timedelta(days=6)

    # Keys that are not the admin key get nowhere.
    tenant = browser.new_context(extra_http_headers={"authorization": f"Bearer {TEST_KEY}"})
    assert tenant.new_page().goto(f"{gateway.base_url}/admin").status == 403
    assert tenant.request.get(f"{gateway.base_url}/admin/api/overview").status == 403
    tenant.close()
    stranger = browser.new_context()
    page = stranger.new_page()
    page.goto(f"{gateway.base_url}/admin")
    page.fill("#key", "tg-not-the-admin-key")
    page.click("button[type=submit]")
    assert page.locator(".error").inner_text() == "That is not the admin key."
    assert not stranger.cookies()
    stranger.close()

    context = browser.new_context(viewport={"width": 1366, "height": 768})
    page = context.new_page()
    problems: list[str] = []
    page.on(
        "console",
        lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
    )
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    page.clock.install(time=datetime.now(UTC))

    page.goto(f"{gateway.base_url}/admin")
    assert "key" not in page.url
    page.fill("#key", ADMIN_KEY)
    page.click("button[type=submit]")
    wait_loaded(page, week_start.isoformat(), today.isoformat())
    assert page.url == f"{gateway.base_url}/admin"
    (cookie,) = context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["value"] != ADMIN_KEY
    check_charts(page, expected(events, week_start, today))

    # Presets and the date inputs change the range; the 30-day view takes in the old event.
    month_start = today - timedelta(days=29)
    page.click("button[data-days='30']")
    wait_loaded(page, month_start.isoformat(), today.isoformat())
    check_charts(page, expected(events, month_start, today))
    yesterday = today - timedelta(days=1)
    page.fill("#start", yesterday.isoformat())
    page.fill("#end", yesterday.isoformat())
    page.dispatch_event("#end", "change")
    wait_loaded(page, yesterday.isoformat(), yesterday.isoformat())
    check_charts(page, expected(events, yesterday, yesterday))

    # Auto-refresh: a new event shows up after a minute without touching the page.
    page.click("button[data-days='7']")
    wait_loaded(page, week_start.isoformat(), today.isoformat())
    assert page.locator("#kpi-escalation").inner_text() == "\u2013"  # none judged yet
    assert page.locator("#kpi-guardrails").inner_text() == "\u2013"  # no guardrails: block
    late = SpendEvent(
        ts=datetime.now(UTC).timestamp() - 1,
        request_id="req-late",
        tenant="globex",
        key_id="globex-1",
        tier="large",
        model="fake-large",
        cost_usd=3.0,
        prompt_tokens=10,
        completion_tokens=10,
        latency_ms=1500,
        ttft_ms=300,
        # a small answer judged weak and re-asked on large: its attempt cost $0.25
        judged=True,
        escalated=True,
        attempts=2,
        escalation_added_usd=0.25,
    )
    gateway.call(gateway.state.parts.money.ledger.record(late))
    events.append(late)
    page.evaluate("delete document.body.dataset.loaded")
    page.clock.run_for(61_000)
    wait_loaded(page, week_start.isoformat(), today.isoformat())
    check_charts(page, expected(events, week_start, today))
    assert (
        page.locator("#kpi-escalation").inner_text() == "100.0 % re-asked (1 of 1), 0 kept, +$0.25"
    )

    ARTIFACT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACT), full_page=True)
    assert ARTIFACT.stat().st_size > 20_000
    assert problems == []

    # Logging out ends the session.
    page.click("text=Log out")
    page.wait_for_selector("#key")
    assert context.request.get(f"{gateway.base_url}/admin/api/overview").status == 401
    context.close()
