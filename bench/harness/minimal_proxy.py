"""The least a Python gateway can be: uvicorn (httptools, uvloop) and one aiohttp session,
forwarding each request's method, path and body to ``TIERGATE_BENCH_UPSTREAM`` and its
answer back, with no auth, routing, pricing or checks. ``bench/perf/tail_floor.py`` runs
it beside tiergate to show what of a tail belongs to the server and the host, not to
tiergate.

    TIERGATE_BENCH_UPSTREAM=http://127.0.0.1:9000 python -m uvicorn \\
        bench.harness.minimal_proxy:app --port 9100 --loop uvloop --http httptools
"""

from __future__ import annotations

import os
from typing import Any

import aiohttp

UPSTREAM = os.environ.get("TIERGATE_BENCH_UPSTREAM", "http://127.0.0.1:9000")
_session: aiohttp.ClientSession | None = None


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    global _session
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                _session = aiohttp.ClientSession(UPSTREAM)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if _session is not None:
                    await _session.close()
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    assert _session is not None
    headers = {"content-type": "application/json"}
    async with _session.request(scope["method"], scope["path"], data=body, headers=headers) as r:
        answer = await r.read()
        status = r.status
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": answer})
