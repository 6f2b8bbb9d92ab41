"""Serving a request makes no reference cycles: what a request leaves is freed as soon as
it is done, never by a collection that stops the event loop (docs/performance.md, "GC
pauses and the stall").

Each route runs 50 requests through a real uvicorn on uvloop with the collector off; one
collection then finds what they left unreachable. Before the fixes, the passthrough left
about 28 objects per connection (the server protocol's bound admission check) and 18 to
32 per Responses request (its framing bound to the exchange).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tiergate_testing.configs import TEST_KEY
from tiergate_testing.cycles import (
    Probe,
    gateway_on_uvloop,
    passthrough_config,
    routed_config,
    routes,
    upstream_process,
    varied,
)
from tiergate_testing.gateways import RunningGateway

REQUESTS = 50
# Objects a collection may find after 50 requests: a stray one-off (a first-use cache, a
# lazily built object), never one per request.
BOUND = 10
PASSTHROUGH = routes("bench-0ms")
ROUTED = {name: route for name, route in routes("auto").items() if name in ("chat", "chat stream")}


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with upstream_process() as url:
        yield url


@pytest.fixture(scope="module")
def passthrough(upstream: str) -> Iterator[RunningGateway]:
    os.environ.setdefault("TIERGATE_TEST_KEY", TEST_KEY)
    with gateway_on_uvloop(passthrough_config(upstream)) as gateway:
        yield gateway


@pytest.mark.parametrize("name", list(PASSTHROUGH))
def test_a_passthrough_request_leaves_no_cyclic_garbage(
    passthrough: RunningGateway, name: str
) -> None:
    garbage = Probe(passthrough).garbage(PASSTHROUGH[name], REQUESTS)
    assert garbage.objects <= BOUND, (
        f"{name}: {garbage.per_request:.1f} objects in reference cycles per request: "
        + garbage.top()
    )


@pytest.fixture(scope="module")
def routed(upstream: str) -> Iterator[RunningGateway]:
    os.environ.setdefault("TIERGATE_TEST_KEY", TEST_KEY)
    config = routed_config(upstream)
    with gateway_on_uvloop(config) as gateway:
        yield gateway


@pytest.mark.parametrize("name", list(ROUTED))
def test_a_routed_request_leaves_no_cyclic_garbage(routed: RunningGateway, name: str) -> None:
    probe = Probe(routed)
    route = ROUTED[name]
    assert "x-tiergate-complexity" in probe.send(route, varied(route, -1))  # it was classified
    garbage = probe.garbage(route, REQUESTS)
    assert garbage.objects <= BOUND, (
        f"auto {name}: {garbage.per_request:.1f} objects in reference cycles per request: "
        + garbage.top()
    )
