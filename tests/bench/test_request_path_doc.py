"""docs/architecture.md's request-path table is what ``bench.code.request_path`` counts
now for a streamed chat request: the test counts one again (a gateway in this process,
the shipped classifier: a few seconds) and compares. After a change to the path, the
table is written again by ``python -m bench.code.request_path --update-docs``.

The count is the deterministic part of what the script reports: the lifecycle (calls
between ``gateway`` modules, which waits for every task the request started) and the
routing stretch; the *all* view also catches the gateway's own loops when they wake
during the request, so the table leaves it out."""

from __future__ import annotations

import pytest

from bench.code import request_path
from bench.code.path_recorder import ROUTE_MODULES, route_function, stretch_view

pytestmark = pytest.mark.timeout(120)


def test_the_docs_table_is_the_chat_path_counted_now() -> None:
    counted = request_path.markdown(request_path.count("chat"))
    documented = request_path.docs_table(request_path.DOCS.read_text())
    assert documented == counted, "python -m bench.code.request_path --update-docs"


def test_a_climb_is_a_routers_stop_followed_by_a_gateway_stop() -> None:
    called = [
        "gateway.routing.route",
        "routers.classifier",
        "routers.classifier",  # one stop: consecutive calls into one module collapse
        "gateway.telemetry.timing",  # a climb
        "routers.decision",
        "policies.tenants",  # not gateway: no climb
        "gateway.routing.capabilities",
        "routers.decision",
        "gateway.types",  # a climb
    ]
    view = stretch_view(called)
    assert (view["stops"], view["modules"], view["climbs"]) == (8, 7, 2)
    assert view["climb_list"] == [
        "routers.classifier -> gateway.telemetry.timing",
        "routers.decision -> gateway.types",
    ]


def test_the_routing_call_is_found_in_one_of_its_homes() -> None:
    module, code = route_function()
    assert module in ROUTE_MODULES
    assert code.co_name == "route"
