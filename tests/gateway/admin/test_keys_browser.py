"""The keys page in Debian's headless Chromium (Playwright): issue a key (shown once, copied
to the clipboard), use it, narrow its scope, revoke it; the audit log; and money shown with
significant digits (never ``6.000000E-6``, never ``$0.0000`` for real spend).

Needs ``/usr/bin/chromium`` and the npm-installed chart library, like
``test_dashboard_browser.py``. The screenshot is kept in artifacts/.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from policies.stores.ledger import SpendEvent
from tests.gateway.admin.test_dashboard_browser import browser
from tests.gateway.ledger_seed import ADMIN_KEY, admin_config
from tests.support import REPO
from tiergate_testing.configs import fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

pytestmark = pytest.mark.slow
__all__ = ["browser"]  # the fixture, shared with the dashboard test

ARTIFACT = REPO / "artifacts" / "keys.png"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def gateway() -> Iterator[RunningGateway]:
    with running_gateway(admin_config(fake_config())) as running:
        yield running


def status_of(gateway: RunningGateway, key: str, model: str = "small") -> int:
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=key, max_retries=0)
    try:
        client.chat.completions.create(model=model, messages=HI, max_tokens=4)  # type: ignore[arg-type]
    except openai.APIStatusError as exc:
        return exc.status_code
    finally:
        client.close()
    return 200


def log_in(page: Any, base_url: str) -> None:
    page.goto(f"{base_url}/admin/keys")
    page.fill("#key", ADMIN_KEY)
    page.click("button[type=submit]")
    page.wait_for_selector("body[data-loaded]")  # the dashboard, after the login redirect
    page.goto(f"{base_url}/admin/keys")
    page.wait_for_selector("body[data-loaded]")


def row(page: Any, key_id: str) -> Any:
    return page.locator(f'#keys tbody tr[data-id="{key_id}"]')


def test_keys_page_issue_copy_edit_revoke(browser: Any, gateway: RunningGateway) -> None:
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=gateway.base_url)
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on(
        "console",
        lambda m: (
            problems.append(f"console {m.type}: {m.text} {m.location}")
            if m.type == "error"
            else None
        ),
    )
    page.on("dialog", lambda dialog: dialog.accept())
    log_in(page, gateway.base_url)
    assert page.locator("#tenant option").all_inner_texts() == ["acme", "globex"]

    # Issue: the raw key is shown once, and Copy puts exactly it on the clipboard.
    page.select_option("#tenant", "globex")
    page.fill("#name", "browser bot")
    page.click("#create button[type=submit]")
    page.wait_for_selector("#issued:not([hidden])")
    raw = page.locator("#raw-key").inner_text()
    assert raw.startswith("tg-") and len(raw) == 46
    page.click("#copy")
    page.wait_for_selector("#copied:has-text('Copied.')")
    assert page.evaluate("navigator.clipboard.readText()") == raw
    page.wait_for_selector("#keys tbody tr[data-id]")
    key_id = page.locator("#keys tbody tr[data-id]").first.get_attribute("data-id")
    cells = row(page, key_id).locator("td").all_inner_texts()
    assert cells[:5] == ["browser bot", key_id, "globex", "…" + raw[-4:], "active"]
    assert status_of(gateway, raw, "large") == 200

    page.click("#dismiss")
    assert raw not in page.content()
    page.reload()
    page.wait_for_selector(f'#keys tbody tr[data-id="{key_id}"]')
    assert raw not in page.content()  # shown once: never again, not even after a reload

    # Edit scope: small only; "large" is then refused.
    row(page, key_id).locator("text=Edit scope").click()
    page.fill("#edit-tiers", "small")
    page.click("#edit button[type=submit]")
    page.wait_for_selector(f'#keys tbody tr[data-id="{key_id}"] td:has-text("tiers: small")')
    assert status_of(gateway, raw, "large") == 403
    assert status_of(gateway, raw, "auto") == 200

    # Revoke (the confirm dialog is accepted): the row says so and the key is refused.
    row(page, key_id).locator("text=Revoke").click()
    page.wait_for_selector(f'#keys tbody tr[data-id="{key_id}"] td:has-text("revoked")')
    assert status_of(gateway, raw) == 401
    actions = page.locator("#audit tbody tr td:nth-child(3)").all_inner_texts()
    assert actions == ["key.revoke", "key.update", "key.create", "session.login"]

    ARTIFACT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACT), full_page=True)
    assert problems == []
    context.close()


def test_small_spend_is_shown_with_significant_digits(
    browser: Any, gateway: RunningGateway
) -> None:
    tiny = SpendEvent(
        ts=time.time() - 5,
        request_id="req-tiny",
        tenant="acme",
        key_id="acme-1",
        tier="small",
        model="fake-small",
        cost_usd=6e-6,
        prompt_tokens=10,
        completion_tokens=10,
        latency_ms=20,
        ttft_ms=5,
    )
    gateway.call(gateway.state.parts.money.ledger.record(tiny))
    page = browser.new_context().new_page()
    log_in(page, gateway.base_url)
    page.goto(f"{gateway.base_url}/admin")
    page.wait_for_selector("body[data-loaded]")
    assert page.locator("#kpi-cost").inner_text() == "$0.000006"
    for chart_id, axis in (("chart-spend", "y"), ("chart-tenants", "x")):
        labels = page.evaluate(
            "([id, axis]) => Chart.getChart(id).scales[axis].ticks.map(t => t.label)",
            [chart_id, axis],
        )
        assert labels and all("E" not in str(label) for label in labels), labels
        assert all(str(label).startswith("$") for label in labels), labels
    formatted = page.evaluate("[usd(6e-6), usd(0.0123456), usd(1234.5), usd(0), usd(2e-9)]")
    assert formatted == ["$0.000006", "$0.0123", "$1234.50", "$0.00", "$0.000000002"]
