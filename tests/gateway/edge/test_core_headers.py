"""The request headers the core honours are read in one function
(``gateway.edge.respond.core_headers``), whichever endpoint hands the core a request."""

from __future__ import annotations

import ast

from gateway.core.entrance import Options
from gateway.edge.respond import core_headers
from routers.session import SessionHint
from tests.support import REPO

HONOURED = {"cache-control", "x-tiergate-tier", "x-session-id"}


def test_the_honoured_headers_are_read_in_one_function() -> None:
    reads = []
    for path in sorted((REPO / "gateway").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value).lower() in HONOURED
            ):
                reads.append(f"{path.relative_to(REPO)}:{node.lineno} {node.args[0].value}")
    assert len(reads) == 3 and all(r.startswith("gateway/edge/respond.py:") for r in reads), reads


def test_core_headers_reads_each_once() -> None:
    headers = {"cache-control": "no-store", "x-tiergate-tier": "large", "x-session-id": "s-1"}
    session = SessionHint("header", "s-1")
    assert core_headers(headers) == Options("no-store", "large", session)
    assert core_headers({"x-session-id": ""}) == Options()
