"""Agent sessions through two gateway replicas on one Redis, per-turn routing against
``routing.sessions``, in one run: tier switches, input billed at full or cached price,
and the prefill the engines recomputed, as the engines report it.

Topology (docs/architecture.md, "Beyond one machine"): one engine node, ``tiergate
serve`` with three tiers, each one in-process vLLM engine (CPU, prefix caching on) over
a tiny random Llama built here (tiergate_testing/tiny_llama.py; nothing is downloaded);
two front replicas (``tiergate serve``, the shipped routing: the classifier and
``objective: {quality: 0.95}``) share one Redis and reach the node's tiers through the
``openai`` backend. Each turn of each session goes to the front replica the turn's
parity picks, so every session alternates replicas (the replicas share the session only
through Redis). The cached tokens are vLLM's own count per request
(``num_cached_tokens``, passed back as ``prompt_tokens_details.cached_tokens``); prefill
recomputed = prompt tokens - cached tokens.

Sessions: the synthetic ones (``bench/harness/agent_sessions.py``: a system prompt, a
held-out task, five tool rounds; each turn sends the whole conversation) and the Codex
CLI and Claude Code runs recorded by ``bench/experiments/record_agents.py``, replayed
as recorded (their own endpoints: ``/v1/responses``, ``/v1/messages``) with ``auto``.
Phase ``before`` runs with ``routing.sessions: null`` (every turn routed alone, the
shipped routing before sessions), phase ``after`` with it on; each phase has its own
Redis prefix, and its own text opening the tools and the system prompt (a mark of the
same shape), so neither finds the other's prefix in the engines' caches.

    python -m bench.experiments.sessions [--sessions 40] [--out results.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx

from bench.experiments.record_agents import OUT
from bench.harness.agent_sessions import SHORT_SYSTEM, SYSTEM, TOOLS, sessions
from tiergate_testing.configs import TEST_KEY
from tiergate_testing.gateways import GatewayProcess, subprocess_env

TIERS = ("small", "medium", "large")
# The shipped prices (config/gateway.yaml), per tier.
PRICES = {
    "small": {"input": 0.02, "cached_input": 0.01, "output": 0.04},
    "medium": {"input": 0.18, "cached_input": 0.09, "output": 0.18},
    "large": {"input": 0.88, "cached_input": 0.44, "output": 0.88},
}
NODE_KEY = "tg-node-key-sessions-0123456789"
RECORDED = OUT  # bench/experiments/record_agents.py writes it (not in the repository)
MARKS = {"before": "Workspace: alpha-run.", "after": "Workspace: omega-run."}  # same shape
REDIS = os.environ.get("TIERGATE_BENCH_REDIS", "redis://127.0.0.1:6379/0")
ANSWER_TOKENS = 8


def node_config(model_path: Path, max_len: int) -> dict[str, Any]:
    options = {
        "model_path": str(model_path),
        "dtype": "bfloat16",
        "max_model_len": max_len,
        "max_num_seqs": 4,
        "enable_prefix_caching": True,
        "enforce_eager": True,
        "seed": 0,
        "tool_parser": "hermes",
    }
    return {
        "engines": {
            f"vllm-{t}": {"backend": "vllm", "model": f"tiny-{t}", "options": options}
            for t in TIERS
        },
        "tiers": {t: {"engines": [f"vllm-{t}"]} for t in TIERS},
        "prices": {f"tiny-{t}": PRICES[t] for t in TIERS},
        "tenants": {
            "fronts": {
                "keys": [{"id": "front", "from_env": "TIERGATE_NODE_KEY"}],
                "cache": {"enabled": False},
            }
        },
    }


def front_config(node_url: str, prefix: str, sessions_on: bool) -> dict[str, Any]:
    fallback = {"small": None, "medium": "small", "large": "medium"}
    routing: dict[str, Any] = {"objective": {"quality": 0.95}, "classifier": {"embedder": "onnx"}}
    if not sessions_on:
        routing["sessions"] = None
    return {
        "redis_url": REDIS,
        "redis_prefix": prefix,
        "engines": {
            f"node-{t}": {
                "backend": "openai",
                "model": f"tiny-{t}",
                "default_max_tokens": ANSWER_TOKENS,
                "options": {
                    "api_base": node_url + "/v1",
                    "api_key_env": "TIERGATE_NODE_KEY",
                    "timeout_s": 600,
                },
            }
            for t in TIERS
        },
        "tiers": {
            t: {"engines": [f"node-{t}"], **({"fallback": fallback[t]} if fallback[t] else {})}
            for t in TIERS
        },
        "prices": {f"tiny-{t}": PRICES[t] for t in TIERS},
        "cache": {"key_prefix": f"{prefix}:cache", "semantic": False},
        "tenants": {
            "acme": {
                "keys": [{"id": "acme-1", "from_env": "TIERGATE_TEST_KEY"}],
                "cache": {"enabled": False},
            }
        },
        "routing": routing,
    }


@dataclass
class Turn:
    """One request of a session, and what the gateway and the engine reported."""

    session: str  # the bench's name for the session
    turn: int
    tier: str = ""
    gateway_session: str | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0
    status: int = 0


@dataclass
class Phase:
    name: str
    turns: list[Turn] = field(default_factory=list)
    seconds: float = 0.0


def marked(tools: list[dict[str, Any]], mark: str) -> list[dict[str, Any]]:
    """The tools with the phase's mark opening the first one's description: chat
    templates render the tools ahead of the system prompt, so the mark must be there too
    for the two phases to share no prefix in the engines' caches."""
    if not tools:
        return tools
    first = dict(tools[0])
    if isinstance(first.get("function"), dict):  # chat: {"type", "function": {...}}
        function = dict(first["function"])
        function["description"] = f"{mark} {function.get('description') or ''}"
        first["function"] = function
    else:  # Responses and Messages: the fields at the top
        first["description"] = f"{mark} {first.get('description') or ''}"
    return [first, *tools[1:]]


def synthetic_requests(
    n: int, mark: str, prompt: str = SYSTEM
) -> list[tuple[str, int, str, dict[str, Any]]]:
    """(session, turn, path, body) of the synthetic sessions, turn by turn across them."""
    system = f"{mark}\n{prompt}"
    out = []
    every = sessions(n, system=system)
    for turn in range(max(len(s) for s in every)):
        for i, session in enumerate(every):
            if turn < len(session):
                body = {
                    "model": "auto",
                    "messages": session[turn],
                    "tools": marked(TOOLS, mark),
                    "max_tokens": ANSWER_TOKENS,
                    "temperature": 0,
                }
                out.append((f"synthetic-{i:02d}", turn, "/v1/chat/completions", body))
    return out


def recorded_requests(mark: str) -> list[tuple[str, int, str, dict[str, Any]]]:
    """The recorded Codex and Claude Code requests, as sent, with ``auto`` and a short
    answer (the phase's mark opens their instructions / system prompt)."""
    if not RECORDED.exists():
        return []
    rows = [json.loads(line) for line in gzip.open(RECORDED, "rt", encoding="utf-8")]
    turns: Counter[str] = Counter()
    out = []
    for row in rows:
        name = f"{row['client']}-{row['run']}"
        body = dict(row["body"], model="auto", stream=False)
        body["tools"] = marked(body.get("tools") or [], mark)
        if row["path"] == "/v1/responses":
            body["max_output_tokens"] = ANSWER_TOKENS
            body["instructions"] = f"{mark}\n{body.get('instructions') or ''}"
        else:
            body["max_tokens"] = ANSWER_TOKENS
            body.pop("thinking", None)  # its budget must stay under max_tokens
            system = body.get("system") or []
            if isinstance(system, str):
                system = [{"type": "text", "text": system}]
            body["system"] = [{"type": "text", "text": mark}, *system]
        out.append((name, turns[name], row["path"], body))
        turns[name] += 1
    return out


def usage_of(path: str, body: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, cached tokens) of an answer in its own format."""
    usage = body.get("usage") or {}
    if path == "/v1/chat/completions":
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        return int(usage.get("prompt_tokens", 0)), int(cached)
    if path == "/v1/responses":
        cached = (usage.get("input_tokens_details") or {}).get("cached_tokens", 0)
        return int(usage.get("input_tokens", 0)), int(cached)
    read = int(usage.get("cache_read_input_tokens", 0))
    return int(usage.get("input_tokens", 0)) + read, read


def replay(
    name: str, fronts: list[str], requests: list[tuple[str, int, str, dict[str, Any]]]
) -> Phase:
    phase = Phase(name)
    started = time.perf_counter()
    headers = {"authorization": f"Bearer {TEST_KEY}", "x-api-key": TEST_KEY}
    with httpx.Client(timeout=600) as client:
        for session, turn, path, body in requests:
            front = fronts[(turn + zlib.crc32(session.encode())) % 2]  # alternate per turn
            answer = client.post(front + path, json=body, headers=headers)
            record = Turn(session, turn, status=answer.status_code)
            if answer.status_code == 200:
                record.tier = answer.headers.get("x-tiergate-tier", "")
                record.gateway_session = answer.headers.get("x-tiergate-session")
                record.cost_usd = float(answer.headers.get("x-tiergate-cost-usd", "0"))
                record.prompt_tokens, record.cached_tokens = usage_of(path, answer.json())
            else:
                print(f"  {session} turn {turn}: {answer.status_code} {answer.text[:300]}")
            phase.turns.append(record)
    phase.seconds = time.perf_counter() - started
    return phase


def summary(phase: Phase) -> dict[str, Any]:
    by_session: dict[str, list[Turn]] = {}
    for turn in phase.turns:
        by_session.setdefault(turn.session, []).append(turn)
    switches = {
        s: sum(1 for a, b in pairwise(ts) if a.tier != b.tier) for s, ts in by_session.items()
    }
    ok = [t for t in phase.turns if t.status == 200]
    prompt = sum(t.prompt_tokens for t in ok)
    cached = sum(t.cached_tokens for t in ok)
    return {
        "phase": phase.name,
        "sessions": len(by_session),
        "requests": len(phase.turns),
        "failed": len(phase.turns) - len(ok),
        "sessions_that_switch": sum(1 for n in switches.values() if n),
        "switches": sum(switches.values()),
        "switches_per_session": round(statistics.mean(switches.values()), 3),
        "tiers": dict(Counter(t.tier for t in ok)),
        "first_turn_tiers": dict(Counter(ts[0].tier for ts in by_session.values())),
        "prompt_tokens": prompt,
        "input_at_cached_price": cached,
        "input_at_full_price": prompt - cached,
        "prefill_recomputed": prompt - cached,
        "cost_usd": round(sum(t.cost_usd for t in ok), 8),
        "seconds": round(phase.seconds, 1),
    }


@contextmanager
def node(tmp: Path, max_len: int) -> Iterator[GatewayProcess]:
    from tiergate_testing.tiny_llama import build_tiny_llama

    model = build_tiny_llama(tmp / "tiny-llama", max_positions=max_len)
    env = subprocess_env(
        TIERGATE_NODE_KEY=NODE_KEY,
        VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
        VLLM_CPU_OMP_THREADS_BIND="nobind",
        TIERGATE_LOG_LEVEL="warning",
    )
    process = GatewayProcess(node_config(model, max_len), tmp / "node", name="node", env=env)
    process.start(timeout_s=900)
    try:
        yield process
    finally:
        process.stop()


@contextmanager
def fronts(tmp: Path, node_url: str, phase: str) -> Iterator[list[str]]:
    prefix = f"tgbench-sessions-{phase}-{os.getpid()}"
    env = subprocess_env(
        TIERGATE_TEST_KEY=TEST_KEY, TIERGATE_NODE_KEY=NODE_KEY, TIERGATE_LOG_LEVEL="warning"
    )
    config = front_config(node_url, prefix, phase == "after")
    with ExitStack() as stack:
        replicas = [
            GatewayProcess(config, tmp / f"{phase}-{i}", name=f"{phase}-{i}", env=env)
            for i in range(2)
        ]
        for replica in replicas:
            replica.spawn()
        for replica in replicas:
            replica.wait_ready(timeout_s=300)
            stack.callback(replica.stop)
        yield [r.base_url for r in replicas]
    from tests.redis_servers import delete_prefix

    delete_prefix(REDIS, prefix)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--no-recorded", action="store_true", help="synthetic sessions only")
    parser.add_argument("--max-len", type=int, default=32768, help="the engines' max_model_len")
    parser.add_argument("--out", type=Path, default=None, help="write every turn as JSON here")
    parser.add_argument(
        "--system",
        choices=("agent", "short"),
        default="agent",
        help="the synthetic sessions' system prompt (bench/harness/agent_sessions.py)",
    )
    args = parser.parse_args()
    results: dict[str, Any] = {"summary": [], "turns": {}}
    with tempfile.TemporaryDirectory() as tmp_name, node(Path(tmp_name), args.max_len) as engine:
        tmp = Path(tmp_name)
        for phase in ("before", "after"):
            prompt = SYSTEM if args.system == "agent" else SHORT_SYSTEM
            requests = synthetic_requests(args.sessions, MARKS[phase], prompt)
            if not args.no_recorded:
                requests += recorded_requests(MARKS[phase])
            with fronts(tmp, engine.base_url, phase) as urls:
                done = replay(phase, urls, requests)
            for kind in ("synthetic", "recorded", "all"):
                picked = [
                    t
                    for t in done.turns
                    if kind == "all" or (kind == "synthetic") == t.session.startswith("synthetic")
                ]
                if picked:
                    row = summary(Phase(done.name, picked, done.seconds))
                    row["kind"] = kind
                    results["summary"].append(row)
                    print(json.dumps(row))
            results["turns"][phase] = [asdict(t) for t in done.turns]
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
