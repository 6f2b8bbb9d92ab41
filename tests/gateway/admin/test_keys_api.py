"""API-managed keys and tenants over real HTTP (real uvicorn; in-process store and real Redis):
issue, use with the official client, scope, expire, revoke, runtime tenants, the audit log."""

from __future__ import annotations

import csv
import io
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.gateway.ledger_seed import ADMIN_KEY, admin_config
from tests.redis_servers import REDIS7_URL, delete_prefix
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

HI = [{"role": "user", "content": "hi"}]
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture(params=["memory", "redis"])
def gateway(request: pytest.FixtureRequest) -> Iterator[RunningGateway]:
    config = admin_config(fake_config())
    prefix = f"tgtest-keys-{uuid.uuid4().hex[:12]}"
    if request.param == "redis":
        config["redis_url"] = REDIS7_URL
        config["redis_prefix"] = prefix
    try:
        with running_gateway(config) as running:
            yield running
    finally:
        if request.param == "redis":
            delete_prefix(REDIS7_URL, prefix + ":")


@pytest.fixture
def admin(gateway: RunningGateway) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.base_url, headers=ADMIN, timeout=30) as client:
        yield client


def chat(gateway: RunningGateway, key: str, model: str = "small") -> tuple[int, str, str | None]:
    """Status, error code (or tier) and the tier header of one chat completion."""
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=key, max_retries=0)
    try:
        raw = client.chat.completions.with_raw_response.create(
            model=model,
            messages=HI,  # type: ignore[arg-type]
            max_tokens=4,
        )
    except openai.APIStatusError as exc:
        return exc.status_code, str(exc.code), None
    finally:
        client.close()
    raw.parse()
    return 200, "ok", raw.headers.get("x-tiergate-tier")


def create(admin: httpx.Client, **body: Any) -> dict[str, Any]:
    response = admin.post("/admin/api/keys", json={"tenant": "acme", **body})
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def test_issue_list_use_and_revoke(gateway: RunningGateway, admin: httpx.Client) -> None:
    created = create(admin, name="ci bot", metadata={"team": "infra"})
    raw = created["key"]
    assert raw.startswith("tg-") and len(raw) == 3 + 43  # 32 bytes, URL-safe base64
    assert created["last4"] == raw[-4:] and created["status"] == "active"
    assert chat(gateway, raw) == (200, "ok", "small")

    listed = admin.get("/admin/api/keys", params={"tenant": "acme"}).json()["data"]
    (row,) = [r for r in listed if r["id"] == created["id"]]
    assert raw not in str(listed) and "digest" not in row
    assert row["name"] == "ci bot" and row["metadata"] == {"team": "infra"}
    assert row["spend_usd"] > 0  # the request above settled on the key's own scope
    assert admin.get("/admin/api/keys", params={"tenant": "globex"}).json()["data"] == []

    revoked = admin.delete(f"/admin/api/keys/{created['id']}")
    assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"
    assert chat(gateway, raw) == (401, "invalid_api_key", None)
    assert chat(gateway, TEST_KEY) == (200, "ok", "small")  # YAML keys are untouched
    again = admin.patch(f"/admin/api/keys/{created['id']}", json={"name": "x"})
    assert again.status_code == 400


def test_last_used_is_recorded(gateway: RunningGateway, admin: httpx.Client) -> None:
    created = create(admin)
    assert created["last_used_at"] is None
    assert chat(gateway, created["key"])[0] == 200
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        rows = admin.get("/admin/api/keys").json()["data"]
        used = next(r for r in rows if r["id"] == created["id"])["last_used_at"]
        if used is not None:
            break
        time.sleep(0.1)
    assert used is not None


def test_expiry_and_patching_it(gateway: RunningGateway, admin: httpx.Client) -> None:
    created = create(admin, expires_at=time.time() + 1.0)
    assert chat(gateway, created["key"])[0] == 200
    time.sleep(1.1)
    assert chat(gateway, created["key"]) == (401, "invalid_api_key", None)
    rows = admin.get("/admin/api/keys").json()["data"]
    assert next(r for r in rows if r["id"] == created["id"])["status"] == "expired"
    # Lifting the expiry brings the key back; a past expiry is refused.
    patched = admin.patch(f"/admin/api/keys/{created['id']}", json={"expires_at": None})
    assert patched.status_code == 200 and patched.json()["expires_at"] is None
    assert chat(gateway, created["key"])[0] == 200
    past = admin.patch(f"/admin/api/keys/{created['id']}", json={"expires_at": "2001-01-01"})
    assert past.status_code == 400 and past.json()["error"]["param"] == "expires_at"


def test_allowed_tiers_and_models_narrow_auto_and_explicit(
    gateway: RunningGateway, admin: httpx.Client
) -> None:
    small_only = create(admin, allowed_tiers=["small"])["key"]
    status, code, _ = chat(gateway, small_only, "large")
    assert (status, code) == (403, "permission_denied")
    assert chat(gateway, small_only, "fake-large")[:2] == (403, "permission_denied")
    assert chat(gateway, small_only, "auto") == (200, "ok", "small")

    medium_model = create(admin, allowed_models=["fake-medium"])
    key = medium_model["key"]
    assert chat(gateway, key, "fake-medium") == (200, "ok", "medium")
    assert chat(gateway, key, "fake-small")[:2] == (403, "permission_denied")
    assert chat(gateway, key, "auto") == (200, "ok", "medium")

    # PATCH widens the scope at once.
    admin.patch(f"/admin/api/keys/{medium_model['id']}", json={"allowed_models": None})
    assert chat(gateway, key, "fake-small") == (200, "ok", "small")


def test_key_budget_and_rate_limit_use_the_shared_paths(
    gateway: RunningGateway, admin: httpx.Client
) -> None:
    limited = create(admin, rate_limit={"requests_per_minute": 2})["key"]
    results = [chat(gateway, limited)[:2] for _ in range(3)]
    assert results == [(200, "ok"), (200, "ok"), (429, "rate_limit_exceeded")]
    broke = create(admin, budget={"limit_usd": 0.0})["key"]
    assert chat(gateway, broke)[:2] == (429, "insufficient_quota")


def test_bad_input_is_refused_and_changes_nothing(
    gateway: RunningGateway, admin: httpx.Client
) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"tenant": "nobody"}, "tenant"),
        ({"tenant": "acme", "allowed_tiers": ["huge"]}, "allowed_tiers"),
        ({"tenant": "acme", "allowed_models": ["gpt-9"]}, "allowed_tiers"),
        ({"tenant": "acme", "expires_at": "yesterday"}, "expires_at"),
        ({"tenant": "acme", "colour": "blue"}, "colour"),
        ({"tenant": "acme", "budget": {"limit_usd": -1}}, "budget.limit_usd"),
        ({"name": "no tenant"}, "tenant"),
    ]
    for body, param in cases:
        response = admin.post("/admin/api/keys", json=body)
        assert response.status_code in (400, 404), body
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["param"] == param, (body, error)
    assert admin.get("/admin/api/keys").json()["data"] == []
    assert admin.get("/admin/api/audit").json()["data"] == []
    assert admin.patch("/admin/api/keys/key_nope", json={}).status_code == 404
    assert admin.delete("/admin/api/keys/key_nope").status_code == 404
    # Tenant keys never open these routes.
    tenant = httpx.get(
        gateway.base_url + "/admin/api/keys", headers={"authorization": "Bearer " + TEST_KEY}
    )
    assert tenant.status_code == 403


def test_runtime_tenants_beside_yaml_ones(gateway: RunningGateway, admin: httpx.Client) -> None:
    made = admin.post(
        "/admin/api/tenants",
        json={"name": "initech", "default_tier": "medium", "allowed_tiers": ["small", "medium"]},
    )
    assert made.status_code == 201 and made.json()["source"] == "api"
    key = create(admin, tenant="initech")["key"]
    assert chat(gateway, key, "auto") == (200, "ok", "medium")
    assert chat(gateway, key, "large")[:2] == (403, "permission_denied")
    assert (
        admin.patch("/admin/api/tenants/initech", json={"default_tier": "small"}).status_code == 200
    )
    assert chat(gateway, key, "auto") == (200, "ok", "small")

    rows = {r["name"]: r for r in admin.get("/admin/api/tenants").json()["data"]}
    assert rows["acme"]["read_only"] is True and rows["initech"]["read_only"] is False
    for call in (
        admin.patch("/admin/api/tenants/acme", json={"default_tier": "large"}),
        admin.delete("/admin/api/tenants/acme"),
    ):
        assert call.status_code == 403 and "read-only" in call.json()["error"]["message"]
    assert admin.post("/admin/api/tenants", json={"name": "acme"}).status_code == 409
    bad = admin.post("/admin/api/tenants", json={"name": "x", "default_tier": "huge"})
    assert bad.status_code == 400
    for body, param in (
        ({"name": "y", "keys": []}, "keys"),
        ({"name": "a b"}, "name"),
        ({"name": "z", "cache": {"ttl_s": 0}}, "cache.ttl_s"),
    ):
        refused = admin.post("/admin/api/tenants", json=body)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == param, body
    renamed = admin.patch("/admin/api/tenants/initech", json={"name": "other"})
    assert renamed.status_code == 400 and renamed.json()["error"]["param"] == "name"

    gone = admin.delete("/admin/api/tenants/initech")
    assert gone.status_code == 200 and len(gone.json()["revoked_keys"]) == 1
    assert chat(gateway, key) == (401, "invalid_api_key", None)


def test_audit_log_records_every_admin_write(gateway: RunningGateway, admin: httpx.Client) -> None:
    created = create(admin, name="first")
    admin.patch(f"/admin/api/keys/{created['id']}", json={"allowed_tiers": ["small"]})
    admin.delete(f"/admin/api/keys/{created['id']}")
    admin.post("/admin/api/tenants", json={"name": "hooli"})
    budget = {"scope": "tenant", "tenant": "acme", "limit_usd": 2.5}
    assert admin.put("/admin/api/budgets", json=budget).status_code == 200
    entries = admin.get("/admin/api/audit").json()["data"]
    actions = [e["action"] for e in entries]
    assert actions == ["budget.set", "tenant.create", "key.revoke", "key.update", "key.create"]
    assert entries[0]["before"]["limit_usd"] is None
    assert entries[0]["after"]["limit_usd"] == 2.5
    update = entries[3]
    assert update["before"]["allowed_tiers"] is None
    assert update["after"]["allowed_tiers"] == ["small"]
    assert all(e["actor"].startswith("admin-key:") for e in entries)
    assert created["key"] not in str(entries)
    exported = admin.get("/admin/api/audit", params={"format": "csv"})
    assert exported.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert [r["action"] for r in rows] == actions
    for params in ({"format": "xml"}, {"limit": 0}, {"limit": "many"}):
        refused = admin.get("/admin/api/audit", params=params)
        assert refused.status_code == 400, params
        assert refused.json()["error"]["param"] == next(iter(params)), params


def test_runtime_tenant_spend_reaches_the_dashboard(
    gateway: RunningGateway, admin: httpx.Client
) -> None:
    assert admin.post("/admin/api/tenants", json={"name": "umbrella"}).status_code == 201
    key = create(admin, tenant="umbrella")["key"]
    assert chat(gateway, key)[0] == 200
    overview = admin.get("/admin/api/overview").json()
    assert sum(overview["spend"]["umbrella"]) > 0
    days = admin.get("/admin/api/budgets/spend", params={"tenant": "umbrella"}).json()["days"]
    assert [d["tenant"] for d in days] == ["umbrella"]
