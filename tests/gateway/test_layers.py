"""The floor plan, checked: ``gateway/``'s parts in declared layers, each importing only
its own layer or the ones below; no two parts importing each other; and the two other
roots holding only what their names say.

A module-cycle check (``tests/test_import_cycles.py``) cannot see a sub-package that
imports another which imports it back through different modules; this walk counts every
import between the parts of ``gateway/`` (a sub-package, or a module at its top), in
the source (``TYPE_CHECKING`` and function-local imports included). A new part must be
declared here, in the layer it belongs to.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.support import REPO

# Bottom to top. A part may import its own layer (one way only) and any layer below.
LAYERS: tuple[tuple[str, ...], ...] = (
    # the leaf vocabulary: these import nothing of the gateway (LEAVES)
    ("types", "errors", "settings", "throttle"),
    ("telemetry",),  # timing, tracing, metrics
    ("wire",),  # what every wire format shares: the format contract, SSE, compat, errors
    ("guardrails",),  # PII and secrets: the request's screen, the answer's window
    ("money", "cache"),  # pricing, holds and settlement; the prompt cache's probe
    ("learning",),  # the feedback loop that labels traffic
    ("core",),  # the serving core: one run per request, routed by ``routers/``
    ("state",),  # the app's container: what the lifespan builds
    ("cluster",),  # policy reloads, node discovery
    ("edge",),  # HTTP: bodies, auth, the error boundary, OpenAPI, serving a format
    # the endpoint families, one package each
    (
        "chat",
        "completions",
        "responses",
        "messages",
        "embeddings",
        "batches",
        "feedback",
        "explain",
        "models",
        "ops",
        "admin",
        "mcp",
    ),
    ("app",),
    ("cli", "__main__"),
)
LEAVES = set(LAYERS[0])
FAMILIES = set(next(layer for layer in LAYERS if "chat" in layer))  # the endpoint families
# The only family that may import another: what one format shares with the format it
# extends (completions renders chat's usage) or explains (explain parses both bodies).
# Everything else two families share belongs below them (``wire``, ``core``).
FAMILY_IMPORTS = {("completions", "chat"), ("explain", "chat"), ("explain", "completions")}
# Runtime code never imports the offline training and evaluation (the CLI runs it).
OFFLINE = "routers.training"
OFFLINE_USERS = ("gateway/cli/",)


def part_of(path: Path) -> str:
    parts = path.relative_to(REPO / "gateway").with_suffix("").parts
    return parts[0]


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in the file, with each imported name."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found.extend((node.lineno, f"{node.module}.{a.name}") for a in node.names)
    return found


def gateway_edges() -> dict[tuple[str, str], list[str]]:
    """(importer part, imported part) -> where."""
    parts = {p.stem if p.is_file() else p.name for p in (REPO / "gateway").iterdir()}
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted((REPO / "gateway").rglob("*.py")):
        source = part_of(path)
        for line, name in imported(path):
            pieces = name.split(".")
            if pieces[0] != "gateway" or len(pieces) < 2 or pieces[1] not in parts:
                continue
            if pieces[1] != source and pieces[1] != "__init__":
                edges[(source, pieces[1])].append(f"{path.relative_to(REPO)}:{line}")
    return edges


def layer_of() -> dict[str, int]:
    return {part: i for i, layer in enumerate(LAYERS) for part in layer}


def test_every_part_of_the_gateway_is_declared_in_a_layer() -> None:
    declared = layer_of()
    present = {
        p.stem if p.is_file() else p.name
        for p in (REPO / "gateway").iterdir()
        if (p.suffix == ".py" or (p / "__init__.py").is_file()) and p.name != "__init__.py"
    }
    assert present - set(declared) == set(), "declare the new part in LAYERS"
    assert set(declared) - present == set(), "LAYERS names a part that is gone"


def test_imports_point_down_or_sideways_never_up() -> None:
    layers = layer_of()
    upward = [
        f"{a} (layer {layers[a]}) imports {b} (layer {layers[b]}): {where[0]}"
        for (a, b), where in gateway_edges().items()
        if layers[b] > layers[a]
    ]
    assert upward == []


def test_no_two_parts_import_each_other() -> None:
    edges = gateway_edges()
    both = sorted(
        f"{a} <-> {b}: {edges[(a, b)][0]}, {edges[(b, a)][0]}"
        for (a, b) in edges
        if (b, a) in edges and a < b
    )
    assert both == []


def test_no_family_imports_another_but_the_few_allowed() -> None:
    """A family reaches another only through the layers below (a batch line runs an
    embedding through the core, not through the embeddings family)."""
    across = {
        (a, b): where[0]
        for (a, b), where in gateway_edges().items()
        if a in FAMILIES and b in FAMILIES
    }
    assert {pair: where for pair, where in across.items() if pair not in FAMILY_IMPORTS} == {}
    assert set(across) == FAMILY_IMPORTS, "a pair that is gone leaves the allow-list"


def test_the_leaf_vocabulary_imports_nothing_of_the_gateway() -> None:
    leaking = [f"{a} imports {b}" for (a, b) in gateway_edges() if a in LEAVES]
    assert leaking == []


def test_runtime_code_never_imports_offline_training() -> None:
    offenders = []
    for package in ("gateway", "routers", "backends", "policies"):
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith(("routers/training/", *OFFLINE_USERS)):
                continue
            for line, name in imported(path):
                if name == OFFLINE or name.startswith(OFFLINE + "."):
                    offenders.append(f"{rel}:{line} imports {name}")
    assert offenders == []


def test_nothing_below_the_gateway_imports_it() -> None:
    """``routers/`` holds the whole tier decision, its rules and their stateful shells
    (sessions, λ and shares from traffic) side by side; it, the engines (``backends/``)
    and the config and stores (``policies/``) sit below the gateway and import none of
    it: the core reaches the tier decision through one module (``gateway/core/route.py``)
    and nothing climbs back up."""
    offenders = [
        f"{path.relative_to(REPO)}:{line} imports {name}"
        for root in ("routers", "backends", "policies")
        for path in sorted((REPO / root).rglob("*.py"))
        for line, name in imported(path)
        if name == "gateway" or name.startswith("gateway.")
    ]
    assert offenders == []


MAX_LINES = 400


def test_no_module_is_over_400_lines() -> None:
    """A module a reader takes in whole (STYLE.md): the product, the bench and the test
    support; a test module may run longer, one scenario after another."""
    roots = ("gateway", "routers", "backends", "policies", "bench", "tiergate_testing")
    long = [
        f"{path.relative_to(REPO)}: {n} lines"
        for root in roots
        for path in sorted((REPO / root).rglob("*.py"))
        if not any(part.startswith(".") for part in path.relative_to(REPO).parts)  # venvs
        and (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    ]
    assert long == []


def test_policy_config_never_imports_the_stores() -> None:
    """``policies/`` holds the config; the shared-store adapters are ``policies/stores/``."""
    offenders = [
        f"{path.relative_to(REPO)}:{line} imports {name}"
        for path in sorted((REPO / "policies").glob("*.py"))
        for line, name in imported(path)
        if name.startswith("policies.stores")
    ]
    assert offenders == []
