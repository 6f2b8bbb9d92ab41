"""Only app startup and the admin routes take the whole ``GatewayState``.

Every other function receives the config snapshot and the collaborator it uses (the
serving core, a store, the pools). The walk reads each function's parameters (and each
class's annotated fields, its constructor's) in the product packages: an annotation that
names ``GatewayState``, or a FastAPI dependency alias of it (``AdminDep = Annotated[
GatewayState, ...]``), is allowed only in the modules listed here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tests.support import REPO

PACKAGES = ("gateway", "routers", "backends", "policies")
STATE = "GatewayState"
# App startup: the lifespan builds the state, joins the cluster, closes it.
STARTUP = {"gateway/app.py", "gateway/cluster/deployment.py", "gateway/state.py"}
# The admin routes and what only they call (admin auth, policy reloads and their bus).
ADMIN = {"gateway/cluster/reload.py", "gateway/cluster/reload_bus.py"}
ADMIN_FOLDERS = ("gateway/admin/",)


def allowed(path: str) -> bool:
    return path in STARTUP or path in ADMIN or path.startswith(ADMIN_FOLDERS)


def sources() -> dict[str, ast.Module]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            found[path.relative_to(REPO).as_posix()] = ast.parse(path.read_text())
    return found


def state_aliases(trees: dict[str, ast.Module]) -> set[str]:
    """``GatewayState`` and every module-level ``X = Annotated[GatewayState, ...]``."""
    aliases = {STATE}
    for tree in trees.values():
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name) and STATE in names_in(node.value):
                    aliases.add(target.id)
    return aliases


def names_in(annotation: ast.expr | None) -> set[str]:
    """The identifiers an annotation mentions (a quoted one is parsed first)."""
    if annotation is None:
        return set()
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:  # a string that is not a type (a default written as one)
            return set()
    found = set()
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
    return found


def takers(tree: ast.Module, aliases: set[str]) -> Iterator[str]:
    """``name:line`` of each function with a parameter (each class with a field) that is
    the whole state."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            params = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            if any(p is not None and names_in(p.annotation) & aliases for p in params):
                yield f"{node.name}:{node.lineno}"
        elif isinstance(node, ast.ClassDef):
            for field in node.body:
                if isinstance(field, ast.AnnAssign) and names_in(field.annotation) & aliases:
                    yield f"{node.name}.{ast.unparse(field.target)}:{field.lineno}"


def test_the_walk_sees_parameters_fields_and_aliases() -> None:
    sample = ast.parse(
        "Dep = Annotated[GatewayState, Depends(x)]\n"
        "def a(state: GatewayState) -> None: ...\n"
        "async def b(*, s: 'Dep | None') -> None: ...\n"
        "def c(config: GatewayConfig) -> GatewayState: ...\n"
        "class D:\n    state: gateway.state.GatewayState\n"
    )
    aliases = state_aliases({"sample.py": sample})
    assert aliases == {STATE, "Dep"}
    assert [t.split(":")[0] for t in takers(sample, aliases)] == ["a", "b", "D.state"]


def test_only_startup_and_admin_take_the_whole_state() -> None:
    trees = sources()
    aliases = state_aliases(trees)
    assert {"AdminDep", "AdminKeyDep"} <= aliases  # the admin routes' dependencies
    taken = {path: list(takers(tree, aliases)) for path, tree in trees.items()}
    outside = {path: found for path, found in taken.items() if found and not allowed(path)}
    assert not outside, f"functions that take the whole GatewayState: {outside}"
    # The walk finds what it must: the admin routes and startup do take it.
    assert taken["gateway/admin/keys.py"] and taken["gateway/app.py"]


def test_the_request_path_never_reads_the_live_config() -> None:
    """Past its key lookup a request reads only its own snapshot: no module on the
    request path names ``state.config`` (the live one a reload swaps)."""
    trees = sources()
    readers = sorted(
        path
        for path, tree in trees.items()
        if not allowed(path)
        and any(
            isinstance(node, ast.Attribute)
            and node.attr == "config"
            and isinstance(node.value, ast.Name)
            and node.value.id == "state"
            for node in ast.walk(tree)
        )
    )
    assert not readers, f"modules that read the live state.config: {readers}"
    # The check can fail: the admin routes and startup do read it.
    assert any("state.config" in ast.unparse(tree) for tree in (trees["gateway/app.py"],))
