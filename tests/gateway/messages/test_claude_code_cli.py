"""Claude Code (``@anthropic-ai/claude-code``, pinned in tests/clients/claude-code,
installed by ``scripts/install.sh dev``), unchanged, as ``claude -p`` against
``tiergate serve`` on the fake engines.

``ANTHROPIC_BASE_URL`` points it at a recording proxy in front of the gateway, which
keeps what it really sends: ``POST /v1/messages?beta=true``, a ~50 kB body (``system``
as blocks, a dozen tools, ``metadata``, ``thinking``, ``context_management``,
``output_config``), ``x-api-key``, ``anthropic-version`` and seven ``anthropic-beta``
flags. The gateway takes it under the compatibility policy and names what it ignored.
The fake engine is scripted to call Claude Code's ``Read`` on a file in the temp dir;
Claude Code runs it and sends the ``tool_result`` back. Its telemetry, auto-update and
other traffic are off, and its HOME is a temp dir.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import REPO, GatewayProcess, subprocess_env
from tiergate_testing.recorder import Recorded, running_recorder

pytestmark = pytest.mark.slow

CLAUDE = REPO / "tests" / "clients" / "claude-code" / "node_modules" / ".bin" / "claude"
MARKER = "tiergate-marker-43"
NOTE = "note.txt"
RUN_TIMEOUT_S = 120
QUIET = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
    "NO_COLOR": "1",
}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("claude-work")
    (work / NOTE).write_text(f"{MARKER}\n")
    return work


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, workdir: Path) -> Iterator[GatewayProcess]:
    assert CLAUDE.exists(), f"{CLAUDE} is missing: run scripts/install.sh dev"
    script = [
        {
            "when": "read the note",
            "call": "Read",
            "arguments": {"file_path": str(workdir / NOTE)},
        }
    ]
    config = fake_config(tools=True, tool_script=script)
    env = subprocess_env(TIERGATE_TEST_KEY=TEST_KEY)
    with GatewayProcess(config, tmp_path_factory.mktemp("claude-gateway"), env=env) as process:
        yield process


def claude_p(
    home: Path, work: Path, base_url: str, prompt: str
) -> subprocess.CompletedProcess[str]:
    """``claude -p PROMPT`` against ``base_url``, bounded by a timeout."""
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}
    env.update(
        QUIET,
        HOME=str(home),
        ANTHROPIC_BASE_URL=base_url,
        ANTHROPIC_API_KEY=TEST_KEY,
        ANTHROPIC_SMALL_FAST_MODEL="small",
    )
    return subprocess.run(
        [str(CLAUDE), "-p", prompt, "--model", "small", "--allowedTools", "Read"],
        env=env,
        cwd=work,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def messages_calls(recorded: list[Recorded]) -> list[Recorded]:
    return [r for r in recorded if r.method == "POST" and r.path.split("?")[0] == "/v1/messages"]


def blocks_of(call: Recorded, kind: str) -> list[dict[str, Any]]:
    return [
        block
        for message in call.body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == kind
    ]


def test_a_text_turn(gateway: GatewayProcess, workdir: Path, tmp_path: Path) -> None:
    with running_recorder(gateway.base_url) as recorder:
        result = claude_p(tmp_path / "home", workdir, recorder.base_url, "Say hello")
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    calls = messages_calls(recorder.requests)
    assert calls and all(c.status == 200 for c in calls)
    main = max(calls, key=lambda c: len(str(c.body)))
    body, headers = main.body, {k.lower(): v for k, v in main.headers.items()}
    # What Claude Code 2.1 sends, and what the gateway made of it.
    assert main.path == "/v1/messages?beta=true"
    assert body["stream"] is True and len(str(body)) > 30_000
    assert isinstance(body["system"], list) and len(body["tools"]) >= 10
    assert headers["x-api-key"] == TEST_KEY and headers["anthropic-version"]
    assert "claude-code-20250219" in headers["anthropic-beta"]
    assert main.answer_headers["content-type"].startswith("text/event-stream")
    ignored = set(main.answer_headers["x-tiergate-ignored"].split(", "))
    assert {"metadata", "cache_control", "anthropic-beta:claude-code-20250219"} <= ignored
    assert {"thinking", "context_management"} & ignored
    # The fake engine's answer is what Claude Code prints.
    assert result.stdout.strip()
    assert "The tool returned" not in result.stdout


def test_a_tool_call_claude_code_runs_and_answers(
    gateway: GatewayProcess, workdir: Path, tmp_path: Path
) -> None:
    with running_recorder(gateway.base_url) as recorder:
        result = claude_p(tmp_path / "home", workdir, recorder.base_url, "Please read the note")
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    calls = [c for c in messages_calls(recorder.requests) if c.body.get("tools")]
    assert len(calls) >= 2, [c.body["messages"][-1] for c in calls]
    assert all(c.status == 200 for c in calls)
    first, second = calls[0], calls[-1]
    assert not blocks_of(first, "tool_result")
    # The later request carries the call the gateway streamed and the tool's result.
    [made] = blocks_of(second, "tool_use")
    [output] = blocks_of(second, "tool_result")
    assert made["name"] == "Read" and made["input"]["file_path"].endswith(NOTE)
    assert output["tool_use_id"] == made["id"]
    assert MARKER in str(output["content"])
    # The fake engine quotes the tool result it was given; Claude Code prints that answer.
    assert "The tool returned:" in result.stdout and MARKER in result.stdout
