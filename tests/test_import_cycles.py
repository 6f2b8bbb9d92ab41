"""No import cycle among the modules of gateway/, routers/, backends/ and policies/ (and
the test support, tiergate_testing/), and the product never imports test support.

Imports are read from the source, not executed, so ``TYPE_CHECKING`` and function-local
imports count as edges too; a package's own ``__init__`` is no edge for its modules."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import REPO

PACKAGES = ("gateway", "routers", "backends", "policies")
TEST_SUPPORT = ("tiergate_testing", "tests", "bench")


def modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_names(name: str, path: Path) -> list[str]:
    """Every dotted name the module imports, relative imports resolved."""
    names: list[str] = []
    own_package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = own_package[: len(own_package) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names)
    return names


def graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    known = modules(root, packages)

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    edges: dict[str, set[str]] = {}
    for name, path in known.items():
        targets = {resolve(n) for n in imported_names(name, path)}
        edges[name] = {
            t for t in targets if t is not None and t != name and not name.startswith(t + ".")
        }
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_in_the_packages() -> None:
    edges = graph(REPO, (*PACKAGES, "tiergate_testing"))
    assert len(edges) > 100  # the walk found the code, not an empty tree
    assert "backends.registry" in edges["policies.engine_spec"]
    assert "gateway.app" in edges["tiergate_testing.gateways"]
    assert cycles(edges) == []


def test_the_product_never_imports_test_support() -> None:
    """``tiergate serve`` loads none of tiergate_testing, tests or bench: no module of the
    four packages imports them, not even inside a function."""
    leaks = {
        name: found
        for name, path in modules(REPO, PACKAGES).items()
        if (found := [n for n in imported_names(name, path) if n.split(".")[0] in TEST_SUPPORT])
    }
    assert leaks == {}
    # The check sees such an import where it would be.
    assert imported_names("gateway.x", REPO / "tiergate_testing" / "nodes.py")[-1].startswith(
        "tiergate_testing."
    )


def test_the_walk_finds_type_checking_local_and_relative_cycles(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n"
    )
    (package / "b.py").write_text("def f():\n    from . import a\n")
    (package / "sub" / "c.py").write_text("from ..d import x\n")
    (package / "d.py").write_text("import pkg.sub.c\n")
    (package / "e.py").write_text("import pkg\nfrom pkg import a\n")  # no cycle: a ↛ e
    assert cycles(graph(tmp_path, ("pkg",))) == [["pkg.a", "pkg.b"], ["pkg.d", "pkg.sub.c"]]
