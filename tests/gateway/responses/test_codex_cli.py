"""Codex CLI (``@openai/codex``, pinned in tests/clients/codex, installed by
``scripts/install.sh dev``), unchanged, against ``tiergate serve`` on the fake engines.

Codex talks to a ``[model_providers.tiergate]`` with ``wire_api = "responses"``; a
recording proxy between it and the gateway keeps what it really sends. Its first request
carries 40 kB of instructions, a hosted ``web_search`` tool, a ``namespace`` tool,
``reasoning``, ``include``, ``prompt_cache_key`` and ``client_metadata``: the gateway
takes it under the compatibility policy and names what it ignored. The fake engine is
scripted to call Codex's ``exec_command``; Codex runs it and sends the result back.
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

CODEX = REPO / "tests" / "clients" / "codex" / "node_modules" / ".bin" / "codex"
MARKER = "tiergate-marker-42"
SCRIPT = [
    {"when": "run the marker", "call": "exec_command", "arguments": {"cmd": f"echo {MARKER}"}}
]
RUN_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    assert CODEX.exists(), f"{CODEX} is missing: run scripts/install.sh dev"
    config = fake_config(tools=True, tool_script=SCRIPT)
    env = subprocess_env(TIERGATE_TEST_KEY=TEST_KEY)
    with GatewayProcess(config, tmp_path_factory.mktemp("codex-gateway"), env=env) as process:
        yield process


def codex_exec(home: Path, base_url: str, prompt: str) -> subprocess.CompletedProcess[str]:
    """``codex exec PROMPT`` with a provider at ``base_url``, bounded by a timeout."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        'model = "small"\n'
        'model_provider = "tiergate"\n'
        "[model_providers.tiergate]\n"
        'name = "tiergate"\n'
        f'base_url = "{base_url}"\n'
        'env_key = "TIERGATE_KEY"\n'
        'wire_api = "responses"\n'
    )
    work = home / "work"
    work.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    env.update(CODEX_HOME=str(home), TIERGATE_KEY=TEST_KEY, NO_COLOR="1")
    return subprocess.run(
        [str(CODEX), "exec", "--skip-git-repo-check", prompt],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def responses_calls(recorded: list[Recorded]) -> list[Recorded]:
    return [r for r in recorded if r.method == "POST" and r.path == "/v1/responses"]


def items_of(call: Recorded, kind: str) -> list[dict[str, Any]]:
    return [item for item in call.body["input"] if item.get("type") == kind]


def test_a_text_turn(gateway: GatewayProcess, tmp_path: Path) -> None:
    with running_recorder(gateway.base_url) as recorder:
        result = codex_exec(tmp_path / "home", recorder.base_url + "/v1", "Say hello")
    assert result.returncode == 0, result.stderr[-2000:]
    [call] = responses_calls(recorder.requests)
    body = call.body
    # What Codex 0.171 sends, and what the gateway made of it.
    assert body["stream"] is True and body["store"] is False
    assert len(str(body)) > 20_000  # its instructions and tool schemas
    kinds = {t["type"] for t in body["tools"]}
    assert {"function", "namespace", "web_search"} <= kinds
    assert call.status == 200 and call.answer_headers["content-type"].startswith(
        "text/event-stream"
    )
    ignored = call.answer_headers["x-tiergate-ignored"].split(", ")
    assert {"client_metadata", "include", "prompt_cache_key", "reasoning"} <= set(ignored)
    assert "tools:web_search" in ignored
    # The fake engine's answer is Codex's last message.
    assert result.stdout.strip()
    assert "The tool returned" not in result.stdout


def test_a_tool_call_codex_runs_and_answers(gateway: GatewayProcess, tmp_path: Path) -> None:
    with running_recorder(gateway.base_url) as recorder:
        result = codex_exec(tmp_path / "home", recorder.base_url + "/v1", "Please run the marker")
    assert result.returncode == 0, result.stderr[-2000:]
    calls = responses_calls(recorder.requests)
    assert len(calls) == 2, [c.body["input"][-1] for c in calls]
    first, second = calls
    assert not items_of(first, "function_call_output")
    # The second request carries the call the gateway streamed and the tool's result.
    [made] = items_of(second, "function_call")
    [output] = items_of(second, "function_call_output")
    assert made["name"] == "exec_command" and MARKER in made["arguments"]
    assert output["call_id"] == made["call_id"]
    assert MARKER in str(output["output"])
    assert all(c.status == 200 for c in calls)
    # The fake engine quotes the tool result it was given; Codex prints that answer.
    assert "The tool returned:" in result.stdout
