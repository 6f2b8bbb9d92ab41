"""A batch line enters the serving core as every caller does, through its one entrance
(``gateway.core.entrance.ask_for``), and never through the HTTP edge: the runner and
every module of ``gateway/batches/`` it reaches import nothing of ``gateway/edge/``
(only the Files and Batches routes do, as every family's routes do)."""

from __future__ import annotations

from gateway.batches import runner
from tests.gateway.test_layers import imported
from tests.support import REPO


def reached_from_the_runner() -> dict[str, list[str]]:
    """Module name → what it imports, for the runner and the batch modules it reaches."""
    seen: dict[str, list[str]] = {}
    todo = [runner.__name__]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        path = REPO / (module.replace(".", "/") + ".py")
        seen[module] = [name for _, name in imported(path)]
        todo += [n for n in seen[module] if (REPO / (n.replace(".", "/") + ".py")).is_file()]
        todo = [n for n in todo if n.startswith("gateway.batches.")]
    return seen


def test_the_line_runner_imports_nothing_of_the_http_edge() -> None:
    reached = reached_from_the_runner()
    assert {"gateway.batches.runner", "gateway.batches.lines"} <= set(reached)
    through_edge = {
        m: [n for n in names if n.startswith("gateway.edge")] for m, names in reached.items()
    }
    assert not any(through_edge.values()), through_edge


def test_a_line_is_asked_through_the_entrance() -> None:
    assert "gateway.core.entrance.ask_for" in reached_from_the_runner()["gateway.batches.lines"]
