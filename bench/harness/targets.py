"""The processes under test: upstream, tiergate, LiteLLM proxy (Envoy: ``envoy.py``);
pinned, measured, stopped.

Each gateway runs pinned to one core with ``taskset``; CPU time and peak RSS are read
from ``/proc`` over the whole process tree, so a proxy that forks workers is charged
for all of them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.harness.venvs import ensure_venv
from tiergate_testing.gateways import REPO, GatewayProcess
from tiergate_testing.net import free_port

BENCH = REPO / "bench"
HARNESS = BENCH / "harness"  # the load generator and the config overlays
LITELLM_VENV = BENCH / ".venv-litellm"
LITELLM_SPEC = "litellm[proxy]==1.108.7"  # never 1.107.0 (a compromised release)
# Both gateways check this key (tiergate: the tenant's key; LiteLLM: the master key).
TENANT_KEY = "sk-bench-5f1c0e9a7d3b42e68c0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b"
MODELS = ("bench-0ms", "bench-20ms", "bench-stream")
TICKS = os.sysconf("SC_CLK_TCK")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    found = [pid]
    by_parent: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        by_parent.setdefault(ppid, []).append(int(entry))
    queue = [pid]
    while queue:
        for child in by_parent.get(queue.pop(), ()):
            found.append(child)
            queue.append(child)
    return found


def core_busy_seconds(core: int) -> float:
    """CPU seconds core ``core`` spent on anything but idle and iowait, since boot."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{core} "):
            fields = [int(v) for v in line.split()[1:]]
            return (sum(fields[:8]) - fields[3] - fields[4]) / TICKS
    return 0.0


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    base_url: str
    log: Path
    pids: list[int] = field(default_factory=list)

    def tree(self) -> list[int]:
        self.pids = _children(self.popen.pid)
        return self.pids

    def cpu_seconds(self, only: str | None = None) -> float:
        """CPU time of the process tree; ``only``: of the processes whose command line
        contains it (``routers.embed_worker``: the embedder workers)."""
        total = 0
        for pid in self.tree():
            if only is not None and only not in _cmdline(pid):
                continue
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / TICKS

    def peak_rss_mb(self) -> float:
        total = 0
        for pid in self.tree():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        return total / 1024

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)


def spawn(
    name: str,
    argv: list[str],
    core: int | None,
    port: int,
    env: dict[str, str],
    logs: Path,
    ready_path: str = "/v1/models",
    headers: dict[str, str] | None = None,
    ready_timeout_s: float = 180.0,
) -> Process:
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    pinned = ["taskset", "-c", str(core), *argv] if core is not None else argv
    with log.open("wb") as sink:
        popen = subprocess.Popen(
            pinned,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
            start_new_session=True,
        )
    process = Process(name, popen, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise RuntimeError(f"{name} exited ({popen.returncode}); see {log}")
        try:
            response = httpx.get(process.base_url + ready_path, headers=headers, timeout=2.0)
            if response.status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    process.stop()
    raise RuntimeError(f"{name} did not become ready in {ready_timeout_s:.0f}s; see {log}")


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIERGATE_", "LITELLM_"))}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def start_upstream(core: int | None, logs: Path) -> Process:
    port = free_port()
    return spawn(
        "upstream",
        [sys.executable, "-m", "tiergate_testing.upstream", "--port", str(port)],
        core,
        port,
        base_env(),
        logs,
        ready_path="/",
        ready_timeout_s=30,
    )


def tiergate_config(upstream: str, overlay: dict[str, Any] | None = None) -> dict[str, Any]:
    """Passthrough: one tier per upstream model, pinned by name; no cache, no classifier."""
    config: dict[str, Any] = {
        "server": {"max_body_bytes": 1 << 20},
        "engines": {
            model: {
                "backend": "openai",
                "model": model,
                "options": {"api_base": upstream + "/v1", "api_key": "sk-bench"},
            }
            for model in MODELS
        },
        "tiers": {"small": {"engines": list(MODELS)}},
        "prices": {model: {"input": 0.1, "output": 0.2} for model in MODELS},
        "tenants": {"bench": {"keys": [{"id": "bench-1", "from_env": "TIERGATE_BENCH_KEY"}]}},
    }
    return _merge(config, overlay or {})


def pipeline_config(upstream: str, redis_url: str, overlay: dict[str, Any]) -> dict[str, Any]:
    """``auto`` routing over three tiers (all passing through to the 0 ms upstream), real
    Redis, per-stage Server-Timing; ``overlay`` switches on cache, classifier, budgets."""
    tiers = ("small", "medium", "large")
    config = tiergate_config(upstream)
    config["engines"] = {
        f"tier-{tier}": {
            "backend": "openai",
            "model": f"tier-{tier}",
            "options": {
                "api_base": upstream + "/v1",
                "api_key": "sk-bench",
                "upstream_model": "bench-0ms",
            },
        }
        for tier in tiers
    }
    config["tiers"] = {
        tier: {"engines": [f"tier-{tier}"], **({"fallback": tiers[i - 1]} if i else {})}
        for i, tier in enumerate(tiers)
    }
    config["prices"] = {
        f"tier-{t}": {"input": 0.1 * 10**i, "output": 0.2 * 10**i} for i, t in enumerate(tiers)
    }
    config["redis_url"] = redis_url
    config["redis_prefix"] = pipeline_prefix()
    config["server"]["timing_header"] = True
    return _merge(config, overlay)


_PREFIX = f"tgbench{os.getpid()}x{int(time.time())}"


def pipeline_prefix() -> str:
    """This run's Redis key prefix (the Redis may be shared: never touch other keys)."""
    return _PREFIX


def drop_pipeline_keys(redis_url: str) -> int:
    """Delete this run's keys (only those under its own prefix)."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=_PREFIX + "*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
        return len(keys)
    finally:
        client.close()


def start_private_redis(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A redis-server of this run's own (no persistence), so its CPU is this run's alone."""
    import redis

    port = free_port()
    argv = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"]
    popen = subprocess.Popen(argv, cwd=folder, stdout=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    try:
        for _ in range(200):
            try:
                client.ping()
                return popen, f"redis://127.0.0.1:{port}/0"
            except redis.ConnectionError:
                time.sleep(0.05)
    finally:
        client.close()
    popen.kill()
    raise RuntimeError("the private redis-server did not start")


def redis_cpu_seconds(redis_url: str) -> float:
    """The server's own CPU counters (``INFO cpu``): on a shared server, everyone's."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        info = client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    finally:
        client.close()


def _merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def start_tiergate(
    name: str, config: dict[str, Any], core: int | None, logs: Path, **env: str
) -> Process:
    gateway = GatewayProcess(
        config,
        logs,
        name=name,
        env=base_env(TIERGATE_BENCH_KEY=TENANT_KEY, TIERGATE_LOG_LEVEL="warning", **env),
        prefix=["taskset", "-c", str(core)] if core is not None else [],
        ready_path="/v1/models",
        ready_headers={"authorization": f"Bearer {TENANT_KEY}"},
    ).start(timeout_s=180.0)
    assert gateway.popen is not None
    return Process(name, gateway.popen, gateway.base_url, gateway.log_path)


def ensure_litellm_venv(log: Path) -> Path:
    """``bench/.venv-litellm`` with litellm[proxy] 1.108.7."""
    return ensure_venv(LITELLM_VENV, "litellm", "1.108.7", [LITELLM_SPEC], log)


def start_litellm(upstream: str, core: int | None, logs: Path) -> Process:
    python = ensure_litellm_venv(logs / "litellm-venv.log")
    port = free_port()
    config = {
        "model_list": [
            {
                "model_name": model,
                "litellm_params": {
                    "model": f"openai/{model}",
                    "api_base": upstream + "/v1",
                    "api_key": "sk-bench",
                },
            }
            for model in MODELS
        ],
        "litellm_settings": {"telemetry": False, "drop_params": True, "num_retries": 0},
        "general_settings": {"master_key": TENANT_KEY},
    }
    path = logs / "litellm.yaml"
    path.write_text(yaml.safe_dump(config))
    argv = [
        str(python),
        "-m",
        "litellm.proxy.proxy_cli",
        "--config",
        str(path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]
    env = base_env(
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        LITELLM_LOG="ERROR",
        LITELLM_TELEMETRY="False",
        DISABLE_ADMIN_UI="True",
    )
    env.pop("PYTHONPATH")
    return spawn("litellm", argv, core, port, env, logs, ready_path="/health/liveliness")


def pin_children(process: Process, only: str, core: int) -> list[int]:
    """Move the processes of ``process``'s tree whose command line contains ``only`` (and
    all their threads) to ``core``."""
    moved = [pid for pid in process.tree() if only in _cmdline(pid)]
    for pid in moved:
        subprocess.run(["taskset", "-a", "-p", "-c", str(core), str(pid)], check=True,
                       capture_output=True)  # fmt: skip
    return moved
