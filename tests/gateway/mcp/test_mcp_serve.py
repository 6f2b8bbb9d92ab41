"""``/mcp`` of ``tiergate serve`` (a real process, Redis for the shared state) against the
official ``mcp`` SDK's client, in front of upstreams built with the SDK: ``calc`` and
``paid`` run by the gateway over stdio, ``search`` over streamable HTTP.

What a caller can list, call and read; that one tenant never sees or reaches another's
tools or credentials; a revoked key; the tool-call rate limit; 50 concurrent priced calls
on a budget that pays for 20; upstreams that hang, die mid-call or answer 50 MB; and every
call in the ledger, the dashboard's API and the metrics.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from gateway.mcp.errors import (
    INSUFFICIENT_QUOTA,
    RATE_LIMITED,
    RESULT_TOO_LARGE,
    UPSTREAM_UNAVAILABLE,
)
from policies.stores.budget import Scope, tenant_scope
from tests.gateway.budget_support import (
    ADMIN_KEY,
    BudgetProbe,
    budget_config,
    redis_prefix,
)
from tests.gateway.mcp_support import (
    call,
    http_upstream,
    mcp_client,
    stdio_server,
    text_of,
)
from tiergate_testing.configs import OTHER_KEY, TEST_KEY
from tiergate_testing.gateways import GatewayProcess, subprocess_env

pytestmark = pytest.mark.slow

THRIFT_KEY = "tg-thrift-key-0123456789"
LIMITED_KEY = "tg-limited-key-0123456789"
WILD_KEY = "tg-wild-key-0123456789"
SECRETS = {
    "SEARCH_TOKEN": "server-secret-1",
    "ACME_SEARCH_TOKEN": "acme-secret-2",
    "CALC_ACME_TOKEN": "calc-acme-secret-3",
}
TIMEOUT_S = 8.0  # an upstream writing 50 MB on a busy 2-core machine needs a few
PRICE = 0.01
BUDGET = 0.2  # pays for 20 calls
UPSTREAM_TOOLS = {"add", "echo", "whoami", "hang", "die", "big"}
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def config(prefix: str, search_url: str) -> dict[str, Any]:
    built = budget_config(prefix)
    tenants = built["tenants"]
    tenants["acme"].update(mcp_tools=["calc.*", "search.*"], mcp_log_arguments=True)
    tenants["globex"]["mcp_tools"] = ["calc.add", "search.whoami", "search.echo"]
    tenants["thrift"] = {
        "keys": [{"id": "thrift-1", "from_env": "THRIFT_KEY"}],
        "budget": {"limit_usd": BUDGET, "window": "total"},
        "mcp_tools": ["paid.add"],
    }
    tenants["wild"] = {  # every tool of calc and of the priced server
        "keys": [{"id": "wild-1", "from_env": "WILD_KEY"}],
        "budget": {"limit_usd": BUDGET, "window": "total"},
        "mcp_tools": ["calc.*", "paid.*"],
    }
    tenants["limited"] = {
        "keys": [{"id": "limited-1", "from_env": "LIMITED_KEY"}],
        "mcp_tools": ["calc.add"],
        "mcp_rate_limit": {"calls_per_minute": 3},
    }
    built["mcp"] = {
        "timeout_s": TIMEOUT_S,
        "servers": {
            "calc": stdio_server(
                "calc",
                tenant_credentials={
                    "acme": {"from_env": "CALC_ACME_TOKEN", "env": "UPSTREAM_TOKEN"}
                },
            ),
            "paid": stdio_server("paid", price_usd=PRICE),
            "search": {
                "url": search_url,
                "credential": {"from_env": "SEARCH_TOKEN"},
                "tenant_credentials": {"acme": {"from_env": "ACME_SEARCH_TOKEN"}},
            },
        },
    }
    return built


@pytest.fixture(scope="module")
def prefix() -> Iterator[str]:
    with redis_prefix() as name:
        yield name


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, prefix: str) -> Iterator[GatewayProcess]:
    env = subprocess_env(
        TIERGATE_TEST_KEY=TEST_KEY,
        TIERGATE_OTHER_KEY=OTHER_KEY,
        TIERGATE_ADMIN_KEY=ADMIN_KEY,
        THRIFT_KEY=THRIFT_KEY,
        LIMITED_KEY=LIMITED_KEY,
        WILD_KEY=WILD_KEY,
        **SECRETS,
    )
    with (
        http_upstream("search") as search_url,
        GatewayProcess(config(prefix, search_url), tmp_path_factory.mktemp("mcp"), env=env) as gw,
    ):
        yield gw


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_sdk_client_lists_calls_and_reads(gateway: GatewayProcess, mode: str) -> None:
    async def scenario() -> None:
        async with mcp_client(gateway.base_url, TEST_KEY, mode) as client:
            # legacy: the initialize handshake (2025-11-25); auto: the 2026-07-28 protocol
            assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
            assert client.server_info is None or client.server_info.name == "tiergate"
            names = {t.name for t in (await client.list_tools()).tools}
            expected = {f"{s}.{t}" for s in ("calc", "search") for t in UPSTREAM_TOOLS}
            assert names == expected  # never paid.*: acme may not use it
            added = await call(client, "calc.add", {"a": 2, "b": 3})
            assert text_of(added) == "5" and added.structured_content == {"result": 5}
            assert text_of(await call(client, "search.echo", {"text": "hello"})) == "hello"
            uris = {r.uri for r in (await client.list_resources()).resources}
            assert uris == {"calc+note://readme", "search+note://readme"}
            read = await client.read_resource("calc+note://readme")
            assert "tiergate-mcp-77" in read.contents[0].text  # type: ignore[union-attr]
            assert read.contents[0].uri == "calc+note://readme"
            templates = (await client.list_resource_templates()).resource_templates
            assert {t.uri_template for t in templates} >= {"calc+greeting://{who}"}
            hello = await client.read_resource("calc+greeting://bob")
            assert hello.contents[0].text == "Hello, bob!"  # type: ignore[union-attr]
            prompts = {p.name for p in (await client.list_prompts()).prompts}
            assert prompts == {"calc.review", "search.review"}
            got = await client.get_prompt("search.review", {"code": "x = 1"})
            assert "Please review: x = 1" in str(got.messages[0].content)

    run(scenario())


def test_a_tenant_never_lists_calls_or_borrows_anothers(gateway: GatewayProcess) -> None:
    async def scenario() -> None:
        async with mcp_client(gateway.base_url, OTHER_KEY) as globex:
            names = {t.name for t in (await globex.list_tools()).tools}
            assert names == {"calc.add", "search.whoami", "search.echo"}
            assert not (await globex.list_resources()).resources  # no whole server
            for name in ("calc.whoami", "calc.echo", "search.add", "paid.add", "nope.add", "add"):
                refused = await call(globex, name, {"a": 1, "b": 1, "text": "x"})
                assert isinstance(refused, MCPError) and refused.error.code == -32602
                assert refused.error.message == f"Unknown tool: {name}"
            with pytest.raises(MCPError, match="Unknown resource"):
                await globex.read_resource("calc+note://readme")
            # The server's credential for globex; acme's own never reaches its calls.
            theirs = text_of(await call(globex, "search.whoami"))
        async with mcp_client(gateway.base_url, TEST_KEY) as acme:
            ours = text_of(await call(acme, "search.whoami"))
            ours_stdio = text_of(await call(acme, "calc.whoami"))
        assert "header=Bearer server-secret-1" in theirs and "acme-secret" not in theirs
        assert "header=Bearer acme-secret-2" in ours
        # Over stdio, acme's calls run in a process of their own with acme's variable.
        assert "env=calc-acme-secret-3" in ours_stdio

    run(scenario())


# Names an allowlist of ``calc.*`` and ``paid.*`` lets through, none of them a listed tool.
UNLISTED = [
    "calc.*",
    "calc.add ",
    "calc.\u0430dd",  # a Cyrillic a
    "calc..add",
    "calc.add\x00",
    "calc.add\n",
    "calc.ADD",
    "paid.nonexistent",
    "paid.add ",
    "paid.*",
]


def test_a_name_the_server_does_not_list_never_leaves_the_gateway_nor_costs(
    gateway: GatewayProcess, prefix: str
) -> None:
    """Each answered ``-32602 Unknown tool: NAME`` (the gateway's words: the upstream would
    name its own tool), nothing held or charged, no call in the ledger; the listed
    ``paid.add`` is then charged its price (the same calls can cost)."""

    async def scenario() -> tuple[list[Any], Any]:
        async with mcp_client(gateway.base_url, WILD_KEY, "legacy") as client:
            refused = [await call(client, name, {"a": 1, "b": 2}) for name in UNLISTED]
            return refused, await call(client, "paid.add", {"a": 1, "b": 2})

    refused, paid = run(scenario())
    for name, answer in zip(UNLISTED, refused, strict=True):
        assert isinstance(answer, MCPError), (name, answer)
        assert (answer.error.code, answer.error.message) == (-32602, f"Unknown tool: {name}")
    assert text_of(paid) == "3"
    probe = BudgetProbe(prefix)
    assert probe.wait_no_holds() == 0
    status = probe.status([Scope(tenant_scope("wild"), None)])[tenant_scope("wild")]
    assert status.spent_usd == pytest.approx(PRICE) and status.held_usd == 0
    events = [e for e in probe.events() if e.tenant == "wild"]
    assert [(e.kind, e.status) for e in events] == [("tool_call", "ok")]


def test_a_key_narrows_its_tenant_and_is_refused_within_a_second_of_revocation(
    gateway: GatewayProcess,
) -> None:
    created = httpx.post(
        f"{gateway.base_url}/admin/api/keys",
        headers=ADMIN,
        json={"tenant": "acme", "name": "agent", "mcp_tools": ["calc.add"]},
    )
    assert created.status_code == 201, created.text
    key, key_id = created.json()["key"], created.json()["id"]

    async def scenario() -> float:
        async with mcp_client(gateway.base_url, key) as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["calc.add"]
            assert text_of(await call(client, "calc.add", {"a": 1, "b": 1})) == "2"
            revoked = await asyncio.to_thread(
                httpx.delete, f"{gateway.base_url}/admin/api/keys/{key_id}", headers=ADMIN
            )
            assert revoked.status_code == 200, revoked.text
            since = time.monotonic()
            while True:
                answer = await call(client, "calc.add", {"a": 1, "b": 1})
                if isinstance(answer, MCPError):
                    assert "Incorrect API key" in answer.error.message
                    return time.monotonic() - since
                assert time.monotonic() - since < 5, "still served 5 s after revocation"

    assert run(scenario()) <= 1.0


def test_tool_calls_have_their_own_rate_limit(gateway: GatewayProcess) -> None:
    async def scenario() -> list[Any]:
        async with mcp_client(gateway.base_url, LIMITED_KEY) as client:
            return [await call(client, "calc.add", {"a": i, "b": 0}) for i in range(4)]

    answers = run(scenario())
    assert [text_of(a) for a in answers[:3]] == ["0", "1", "2"]
    refused = answers[3]
    assert isinstance(refused, MCPError) and refused.error.code == RATE_LIMITED
    assert refused.error.data["code"] == "rate_limit_exceeded"
    assert refused.error.data["retry_after_s"] > 0


def test_fifty_concurrent_priced_calls_on_a_budget_for_twenty(
    gateway: GatewayProcess, prefix: str
) -> None:
    async def scenario() -> list[Any]:
        async with mcp_client(gateway.base_url, THRIFT_KEY) as client:
            await client.list_tools()  # the SDK client validates results against it
            return list(
                await asyncio.gather(
                    *(call(client, "paid.add", {"a": i, "b": 1}) for i in range(50))
                )
            )

    answers = run(scenario())
    served = [a for a in answers if isinstance(a, CallToolResult)]
    refused = [a for a in answers if isinstance(a, MCPError)]
    assert len(served) + len(refused) == 50
    assert len(served) == 20  # no more than the budget pays for, and no fewer
    assert {a.error.code for a in refused} == {INSUFFICIENT_QUOTA}
    probe = BudgetProbe(prefix)
    assert probe.wait_no_holds() == 0  # nothing held afterwards
    status = probe.status([Scope(tenant_scope("thrift"), None)])[tenant_scope("thrift")]
    assert status.spent_usd <= BUDGET + 1e-9 and status.held_usd == 0
    assert status.spent_usd == pytest.approx(PRICE * len(served))
    events = [e for e in probe.events() if e.tenant == "thrift"]
    assert sum(e.kind == "tool_call" and e.status == "ok" for e in events) == len(served)
    assert sum(e.kind == "denied" and e.status == "budget" for e in events) == len(refused)


def test_faulty_upstreams_answer_with_clear_errors_in_time(gateway: GatewayProcess) -> None:
    async def timed(client: Any, name: str, args: dict[str, Any]) -> tuple[Any, float]:
        started = time.monotonic()
        answer = await call(client, name, args)
        return answer, time.monotonic() - started

    async def scenario() -> None:
        async with mcp_client(gateway.base_url, TEST_KEY) as client:
            for server in ("calc", "search"):
                hung, took = await timed(client, f"{server}.hang", {})
                assert isinstance(hung, MCPError) and hung.error.code == -32001
                assert f"did not answer within {TIMEOUT_S:g}s" in hung.error.message
                assert TIMEOUT_S - 0.5 <= took <= TIMEOUT_S + 2
                huge, took = await timed(client, f"{server}.big", {"mb": 50})
                assert isinstance(huge, MCPError) and huge.error.code == RESULT_TOO_LARGE
                assert "larger than 8388608 bytes" in huge.error.message
                assert took <= TIMEOUT_S + 2
                # the other tools keep working
                assert text_of(await call(client, f"{server}.add", {"a": 1, "b": 2})) == "3"
            before = text_of(await call(client, "calc.whoami"))
            died, took = await timed(client, "calc.die", {})
            assert isinstance(died, MCPError) and died.error.code == UPSTREAM_UNAVAILABLE
            assert "closed the connection mid-call" in died.error.message and took <= TIMEOUT_S
            # The gateway started the process again; the other servers never noticed.
            after = text_of(await call(client, "calc.whoami"))
            assert after.split()[1] != before.split()[1]  # another pid
            assert text_of(await call(client, "search.add", {"a": 2, "b": 2})) == "4"

    run(scenario())
    assert httpx.get(f"{gateway.base_url}/healthz").status_code == 200


def test_every_call_is_in_the_ledger_the_dashboard_and_the_metrics(
    gateway: GatewayProcess,
) -> None:
    async def scenario() -> None:
        async with mcp_client(gateway.base_url, TEST_KEY) as acme:
            await call(acme, "calc.add", {"a": 40, "b": 2})
        async with mcp_client(gateway.base_url, OTHER_KEY) as globex:
            await call(globex, "search.echo", {"text": "private words"})

    run(scenario())
    recent = httpx.get(f"{gateway.base_url}/admin/api/tool_calls", headers=ADMIN).json()
    rows = recent["tool_calls"]
    mine = next(r for r in rows if r["tenant"] == "acme" and r["tool"] == "add")
    assert mine["server"] == "calc" and mine["key_id"] == "acme-1" and mine["status"] == "ok"
    assert mine["duration_ms"] > 0 and mine["result_bytes"] > 0
    assert mine["arguments"] == '{"a":40,"b":2}'  # acme logs arguments
    theirs = next(r for r in rows if r["tenant"] == "globex" and r["tool"] == "echo")
    assert theirs["arguments"] is None  # globex does not
    overview = httpx.get(f"{gateway.base_url}/admin/api/overview", headers=ADMIN).json()
    tools = {r["tool"]: r for r in overview["tool_calls"]["tools"]}
    assert tools["calc.add"]["calls"] >= 1 and tools["paid.add"]["cost_usd"] > 0
    assert overview["tool_calls"]["errors"] >= 1  # the faults
    metrics = httpx.get(f"{gateway.base_url}/metrics").text
    assert 'tiergate_mcp_tool_calls_total{server="calc",status="ok"}' in metrics
    assert 'status="denied_budget"' in metrics


def test_refusals_before_json_rpc_are_json_rpc_errors_with_their_status(
    gateway: GatewayProcess,
) -> None:
    """Arguments of 5 and 10 MB (past ``mcp.max_request_bytes``, 4 MiB) are a 413, a body
    sent as ``text/plain`` or with no ``Content-Type`` a 400, a wrong ``Accept`` a 406:
    each a JSON-RPC error (``id`` null, -32600) in a JSON body, as raw HTTP sees it."""
    url = f"{gateway.base_url}/mcp"
    accept = "application/json, text/event-stream"

    def tool_call(text: str) -> bytes:
        message = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "calc.echo", "arguments": {"text": text}},
        }
        return orjson.dumps(message)

    sent = [
        (tool_call("x" * (5 << 20)), "application/json", accept, 413),
        (tool_call("x" * (10 << 20)), "application/json", accept, 413),
        (tool_call("hi"), "text/plain", accept, 400),
        (tool_call("hi"), None, accept, 400),
        (tool_call("hi"), "application/json", "text/html", 406),
    ]
    with httpx.Client(timeout=60) as client:
        for content, kind, wanted, status in sent:
            headers = {"Authorization": f"Bearer {TEST_KEY}", "Accept": wanted}
            if kind is not None:
                headers["Content-Type"] = kind
            answer = client.post(url, content=content, headers=headers)
            assert answer.status_code == status, (kind, len(content), answer.text[:200])
            assert answer.headers["content-type"].startswith("application/json")
            body = answer.json()
            assert body["jsonrpc"] == "2.0" and body["id"] is None
            assert body["error"]["code"] == -32600 and body["error"]["message"]
