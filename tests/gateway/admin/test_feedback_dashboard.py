"""The dashboard's "Learning from traffic" panel in headless Chromium: the labels gathered
(by tier and verdict) and the refit history with its before / after numbers, read back
from the page. Needs what ``test_dashboard_browser.py`` needs."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from policies.stores.feedback import Label, RefitEntry
from tests.gateway.admin.test_dashboard_browser import CHROMIUM, FLAGS, _require, chart, wait_loaded
from tests.gateway.ledger_seed import ADMIN_KEY, admin_config
from tiergate_testing.configs import fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

pytestmark = pytest.mark.slow


@pytest.fixture
def gateway() -> Iterator[RunningGateway]:
    config = admin_config(fake_config())
    config["routing"] = {"feedback": {"judge": {"tier": "large"}, "max_labels": 500}}
    with running_gateway(config) as running:
        store = running.state.parts.feedback.store  # type: ignore[union-attr]
        for i, (tier, good) in enumerate(
            [("small", True)] * 3 + [("small", False), ("medium", False)]
        ):
            label = Label(f"r{i}", tier, good, "judge" if i else "client", None, None, i, "acme")
            running.call(store.add_label(label, 500, 1e10))
        before_after = {"loss_base": 0.6716, "loss_refit": 0.5762, "accuracy_base": 0.52}
        before_after |= {"accuracy_refit": 0.71, "pairs_accuracy_base": 0.6}
        before_after |= {
            "pairs_accuracy_refit": 0.8,
            "pairs_cost_base": 0.1,
            "pairs_cost_refit": 0.2,
        }
        why = "hold-out log-loss 0.5762 < 0.6716 (base)"
        accepted = RefitEntry(1.7e9, "accepted", why, 300, 100, before_after)
        worse = {"loss_base": 0.69, "loss_serving": 0.5607, "loss_refit": 0.7215}
        rolled = RefitEntry(1.7e9 + 60, "rolled_back", "not better", 300, 100, worse)
        running.call(store.add_refit(accepted, b"model", 10))
        running.call(store.add_refit(rolled, b"worse", 10))
        yield running


def test_the_feedback_panel(gateway: RunningGateway) -> None:
    _require(CHROMIUM, "apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=FLAGS
        )
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        problems: list[str] = []
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        page.goto(f"{gateway.base_url}/admin")
        page.fill("#key", ADMIN_KEY)
        page.click("button[type=submit]")
        today = datetime.now(UTC).date()
        wait_loaded(page, (today - timedelta(days=6)).isoformat(), today.isoformat())
        assert page.locator("#feedback").is_visible()
        labels = chart(page, "chart-labels")
        assert labels["labels"] == ["small", "medium"]
        assert labels["sets"] == {"acceptable": [3, 0], "not acceptable": [1, 1]}
        summary = page.locator("#feedback-summary").inner_text()
        assert (
            "5 labels kept (at most 500)" in summary
            and "4 from the judge, 1 from clients" in summary
        )
        rows = page.locator("#refits tbody tr")
        cells: list[list[str]] = [
            rows.nth(i).locator("td").all_inner_texts() for i in range(rows.count())
        ]
        browser.close()
    assert [c[1] for c in cells] == ["rolled back", "accepted"]
    assert cells[0][3] == "0.561 \u2192 0.722"  # before: what served (the accepted refit)
    assert cells[1][2:8] == ["300 / 100", "0.672 \u2192 0.576", "52.0 % \u2192 71.0 %",
                             "60.0 % \u2192 80.0 %", "10.0 % \u2192 20.0 %", "1"]  # fmt: skip
    assert cells[0][7] == "1"  # a rolled-back refit leaves the version as it was
    assert problems == []
