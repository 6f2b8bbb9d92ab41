"""Record what the Codex CLI and Claude Code send: agent sessions for ``sessions.py``.

The clients pinned in tests/clients (``scripts/install.sh dev``) run unchanged, as the
CI tests run them (tests/gateway/responses/test_codex_cli.py,
tests/gateway/messages/test_claude_code_cli.py): against ``tiergate serve`` on the fake
engines scripted to call the client's own tools, through the recording proxy
(``tiergate_testing/recorder.py``). Every ``POST /v1/responses`` and ``/v1/messages``
body is kept, in order, with the run it belongs to, in
``$TIERGATE_CACHE_DIR/sessions/recorded_agents.jsonl.gz`` (default ``~/.cache/tiergate``;
each line ``{"client", "run", "path", "body"}``). Not in the repository: the bodies
carry the clients' own system prompts and tool descriptions, which are theirs.

    python -m bench.experiments.record_agents [--out FILE]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import REPO, GatewayProcess, subprocess_env
from tiergate_testing.recorder import Recorded, running_recorder

CLIENTS = REPO / "tests" / "clients"
OUT = (
    Path(os.environ.get("TIERGATE_CACHE_DIR") or Path.home() / ".cache" / "tiergate")
    / "sessions"
    / "recorded_agents.jsonl.gz"
)
# What each run asks; the fake engine calls a tool when the prompt names it.
CODEX_PROMPTS = (
    "Please run the marker",
    "List the files here, then run the marker",
    "Say hello",
    "Check the python version and run the marker",
)
CLAUDE_PROMPTS = (
    "Please read the note",
    "Say hello",
    "Read the note and tell me what it says",
)
TIMEOUT_S = 180


def script(work: Path) -> list[dict[str, Any]]:
    return [
        {"when": "run the marker", "call": "exec_command", "arguments": {"cmd": "echo marker-42"}},
        {
            "when": "read the note",
            "call": "Read",
            "arguments": {"file_path": str(work / "note.txt")},
        },
    ]


def codex(binary: Path, home: Path, base_url: str, prompt: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        'model = "small"\nmodel_provider = "tiergate"\n[model_providers.tiergate]\n'
        f'name = "tiergate"\nbase_url = "{base_url}/v1"\nenv_key = "TIERGATE_KEY"\n'
        'wire_api = "responses"\n'
    )
    work = home / "work"
    work.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    env.update(CODEX_HOME=str(home), TIERGATE_KEY=TEST_KEY, NO_COLOR="1")
    subprocess.run(
        [str(binary), "exec", "--skip-git-repo-check", prompt],
        env=env,
        cwd=work,
        capture_output=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def claude(binary: Path, home: Path, work: Path, base_url: str, prompt: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}
    env.update(
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_ERROR_REPORTING="1",
        DISABLE_BUG_COMMAND="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        NO_COLOR="1",
        HOME=str(home),
        ANTHROPIC_BASE_URL=base_url,
        ANTHROPIC_API_KEY=TEST_KEY,
        ANTHROPIC_SMALL_FAST_MODEL="small",
    )
    subprocess.run(
        [str(binary), "-p", prompt, "--model", "small", "--allowedTools", "Read"],
        env=env,
        cwd=work,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def kept(calls: list[Recorded], client: str, run: int) -> list[dict[str, Any]]:
    paths = ("/v1/responses", "/v1/messages")
    return [
        {"client": client, "run": run, "path": c.path.split("?")[0], "body": c.body}
        for c in calls
        if c.method == "POST" and c.path.split("?")[0] in paths and c.status == 200
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--clients", type=Path, default=CLIENTS, help="tests/clients with node_modules"
    )
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        work = tmp / "work"
        work.mkdir()
        (work / "note.txt").write_text("marker-43: the release is on Friday\n")
        config = fake_config(tools=True, tool_script=script(work))
        env = subprocess_env(TIERGATE_TEST_KEY=TEST_KEY)
        with GatewayProcess(config, tmp / "gateway", env=env) as gateway:
            binary = args.clients / "codex" / "node_modules" / ".bin" / "codex"
            for run, prompt in enumerate(CODEX_PROMPTS):
                with running_recorder(gateway.base_url) as recorder:
                    codex(binary, tmp / f"codex-{run}", recorder.base_url, prompt)
                rows += kept(recorder.requests, "codex", run)
            binary = args.clients / "claude-code" / "node_modules" / ".bin" / "claude"
            for run, prompt in enumerate(CLAUDE_PROMPTS):
                with running_recorder(gateway.base_url) as recorder:
                    claude(binary, tmp / f"claude-{run}", work, recorder.base_url, prompt)
                rows += kept(recorder.requests, "claude-code", run)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out, "wt", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    runs = {(r["client"], r["run"]) for r in rows}
    print(f"wrote {args.out}: {len(rows)} requests in {len(runs)} runs")


if __name__ == "__main__":
    main()
