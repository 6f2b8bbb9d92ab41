"""The request lifecycle's modules import in one direction: no cycle through any of them,
``TYPE_CHECKING`` imports included (they are read from the source, not executed)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import REPO

PACKAGES = ("gateway", "routers", "backends", "policies")
LIFECYCLE = {
    "gateway.money.hold",
    "gateway.core.serving",
    "gateway.core.serving_core",
    "gateway.core.route",
    "gateway.money.outcome",
    "gateway.telemetry.observe",
    "gateway.edge.respond",
    "gateway.core.answer",
    "gateway.money.spend",
    "gateway.telemetry.metrics",
    "gateway.telemetry.timing",
    "gateway.telemetry.tracing",
    "gateway.cluster.reload",
    "gateway.state",
    "routers.decision",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports anywhere in its source."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        found.update(name for name in names if name in known)
    return found


def graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")}
    known = set(paths)
    return {name: imports(path, known) - {name} for name, path in paths.items()}


def reaches(edges: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), list(edges[start])
    while todo:
        current = todo.pop()
        if current == goal:
            return True
        if current not in seen:
            seen.add(current)
            todo.extend(edges.get(current, ()))
    return False


def test_no_import_cycle_runs_through_the_lifecycle() -> None:
    edges = graph()
    assert LIFECYCLE <= set(edges), LIFECYCLE - set(edges)
    assert edges["gateway.core.serving"] >= {
        "gateway.money.hold",
        "gateway.telemetry.observe",
    }  # it walks
    cyclic = sorted(m for m in LIFECYCLE if reaches(edges, m, m))
    assert not cyclic, f"modules on an import cycle: {cyclic}"


def test_the_batch_runner_reaches_no_http() -> None:
    """A batch line enters the core as an HTTP request does, but not through the HTTP
    edge: the runner imports no ``gateway.edge`` module, directly or through another."""
    edges = graph()
    assert edges["gateway.batches.lines"] >= {"gateway.core.answer"}  # it walks
    http = sorted(m for m in edges if m.startswith("gateway.edge"))
    assert [m for m in http if reaches(edges, "gateway.batches.runner", m)] == []
