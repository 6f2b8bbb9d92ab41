"""The uvicorn server a gateway runs on, hardened from ``server:`` in the config.

- ``limit_concurrency``: past that many open connections or running requests, new
  requests get 503 instead of piling up.
- ``keep_alive_s``: an idle keep-alive connection is closed after that long.
- ``header_timeout_s``: uvicorn has no timeout for a request that is still arriving, so
  a connection whose request headers are not complete that long after it opened (or
  after its previous response) is closed; hundreds of half-sent requests (slowloris)
  then cost a few kB each for a few seconds and never hold a request slot. The body
  has the same limit once the headers are in (``gateway.edge.http.read_body``).
- ``write_timeout_s`` (streams that the client stopped reading) lives in ``gateway.wire.sse``.

The deadline, and the JSON answers to requests the HTTP parser rejects (uvicorn's own are
text/plain), are in ``gateway.edge.server_protocol``.
"""

from __future__ import annotations

from typing import Any

import uvicorn

from gateway.edge.server_protocol import gateway_protocol
from policies.schema import GatewayConfig


def server_config(app: Any, config: GatewayConfig, **overrides: Any) -> uvicorn.Config:
    """The uvicorn config for ``app``: host and port from ``config`` unless overridden."""
    server = config.server
    options: dict[str, Any] = {
        "host": server.host,
        "port": server.port,
        "http": gateway_protocol(server.header_timeout_s),
        "limit_concurrency": server.limit_concurrency,
        "timeout_keep_alive": server.keep_alive_s,
        "timeout_graceful_shutdown": 10,
        "lifespan": "on",
        **overrides,
    }
    return uvicorn.Config(app, **options)
