"""Loopback ports and readiness: what every helper that starts a server needs."""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping

import httpx


def free_port() -> int:
    """A port nothing listens on now (the OS's pick; a race is possible but rare)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_http(
    url: str, timeout_s: float = 60.0, *, headers: Mapping[str, str] | None = None
) -> None:
    """Until ``url`` answers below 500; ``TimeoutError`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, headers=headers, timeout=1.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(url)
