"""Claude Code (pinned in tests/clients/claude-code), unchanged, as ``claude -p`` with an
MCP config that points at tiergate's ``/mcp`` (its model calls go to the same gateway,
on the fake engines): a turn that uses a tool of an upstream MCP server, one run by the
gateway over stdio (``calc``) and one reached over streamable HTTP (``search``), both
started here with the official ``mcp`` SDK.

The fake engine is scripted to call the MCP tool Claude Code offers it (Claude Code names
``calc.add`` of its ``tiergate`` server ``mcp__tiergate__calc_add``); Claude Code calls
``/mcp``, the gateway calls the upstream, and the engine quotes the result it is sent
back. The ledger keeps the tool call under the key Claude Code used.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.gateway.budget_support import ADMIN_KEY
from tests.gateway.mcp_support import http_upstream, stdio_server
from tests.gateway.messages.test_claude_code_cli import (
    CLAUDE,
    QUIET,
    RUN_TIMEOUT_S,
    blocks_of,
    messages_calls,
)
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import GatewayProcess, subprocess_env
from tiergate_testing.recorder import running_recorder

pytestmark = pytest.mark.slow

MARKER = "tiergate-echo-marker-91"
SCRIPT = [
    {"when": "add the numbers", "call": "mcp__tiergate__calc_add", "arguments": {"a": 20, "b": 22}},
    {
        "when": "echo the marker",
        "call": "mcp__tiergate__search_echo",
        "arguments": {"text": MARKER},
    },
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    assert CLAUDE.exists(), f"{CLAUDE} is missing: run scripts/install.sh dev"
    config = fake_config(tools=True, tool_script=SCRIPT)
    config["admin"] = {"key_from_env": "TIERGATE_ADMIN_KEY"}
    config["tenants"]["acme"]["mcp_tools"] = ["calc.add", "search.echo"]
    env = subprocess_env(TIERGATE_TEST_KEY=TEST_KEY, TIERGATE_ADMIN_KEY=ADMIN_KEY)
    with http_upstream("search") as search_url:
        config["mcp"] = {"servers": {"calc": stdio_server("calc"), "search": {"url": search_url}}}
        workdir = tmp_path_factory.mktemp("claude-mcp")
        with GatewayProcess(config, workdir, env=env) as process:
            yield process


def claude_with_mcp(
    home: Path, base_url: str, mcp_url: str, prompt: str, tool: str
) -> subprocess.CompletedProcess[str]:
    """``claude -p PROMPT`` with only tiergate's MCP server, ``tool`` allowed."""
    home.mkdir(parents=True, exist_ok=True)
    servers = {
        "mcpServers": {
            "tiergate": {
                "type": "http",
                "url": f"{mcp_url}/mcp",
                "headers": {"Authorization": f"Bearer {TEST_KEY}"},
            }
        }
    }
    mcp_config = home / "mcp.json"
    mcp_config.write_text(json.dumps(servers))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}
    env.update(
        QUIET,
        HOME=str(home),
        ANTHROPIC_BASE_URL=base_url,
        ANTHROPIC_API_KEY=TEST_KEY,
        ANTHROPIC_SMALL_FAST_MODEL="small",
        # Claude Code defers MCP tools behind its ToolSearch tool by default; offered
        # directly, the scripted engine can call one in the first turn.
        ENABLE_TOOL_SEARCH="false",
    )
    argv = [str(CLAUDE), "-p", prompt, "--model", "small"]
    argv += ["--mcp-config", str(mcp_config), "--strict-mcp-config", "--allowedTools", tool]
    return subprocess.run(
        argv,
        env=env,
        cwd=home,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


@pytest.mark.parametrize(
    ("prompt", "tool", "quoted", "server"),
    [
        ("Please add the numbers", "mcp__tiergate__calc_add", "42", "calc"),
        ("Please echo the marker", "mcp__tiergate__search_echo", MARKER, "search"),
    ],
    ids=["stdio-upstream", "http-upstream"],
)
def test_claude_code_completes_a_turn_with_an_upstream_mcp_tool(
    gateway: GatewayProcess, tmp_path: Path, prompt: str, tool: str, quoted: str, server: str
) -> None:
    with running_recorder(gateway.base_url) as recorder:
        result = claude_with_mcp(
            tmp_path / "home", recorder.base_url, gateway.base_url, prompt, tool
        )
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    calls = [c for c in messages_calls(recorder.requests) if c.body.get("tools")]
    offered = {t["name"] for t in calls[0].body["tools"]}
    # What Claude Code made of tiergate's tools/list: the key's two tools, nothing else.
    assert {n for n in offered if n.startswith("mcp__")} == {
        "mcp__tiergate__calc_add",
        "mcp__tiergate__search_echo",
    }
    [made] = blocks_of(calls[-1], "tool_use")
    [output] = blocks_of(calls[-1], "tool_result")
    assert made["name"] == tool and output["tool_use_id"] == made["id"]
    assert quoted in str(output["content"])  # the upstream's answer, through the gateway
    assert "The tool returned:" in result.stdout and quoted in result.stdout
    ledger = httpx.get(
        f"{gateway.base_url}/admin/api/tool_calls", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    ).json()["tool_calls"]
    assert any(
        r["server"] == server and r["tenant"] == "acme" and r["status"] == "ok" for r in ledger
    )
