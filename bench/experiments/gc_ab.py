"""tiergate next to tiergate in one run of bench/perf/overhead.py: the comparison column
(LiteLLM's there) is a second tiergate passthrough, pinned to the same core and measured
in the same interleaved rounds, so a shared machine's noise hits both alike.

    # the young-generation GC threshold: CPython's 700 next to the 50,000 served with
    python -m bench.experiments.gc_ab --young 700 --label young700 --quick --rounds 3
    # cycles before the fix: a checkout of main (git worktree add /tmp/main main)
    python -m bench.experiments.gc_ab --tree /tmp/main --label main --quick --rounds 3

Every other argument is overhead.py's (``--no-litellm`` would drop the comparison).
The table names the second gateway ``--label``; its ratio column is tiergate / it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from bench.harness import report, targets
from bench.harness.targets import Process
from bench.perf import overhead
from tiergate_testing.net import free_port


def second_tiergate(
    tree: Path | None, young: int | None
) -> Callable[[str, int | None, Path], Process]:
    """``targets.start_litellm``'s stand-in: tiergate from ``tree`` (default: this one),
    with ``gateway.app.GC_YOUNG_THRESHOLD`` set to ``young`` (default: the tree's own)."""

    def start(upstream: str, core: int | None, logs: Path) -> Process:
        port = free_port()
        config = targets.tiergate_config(upstream)
        path = logs / "tiergate-b.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        code = "import sys\n"
        if tree is not None:
            code += f"sys.path.insert(0, {str(tree.resolve())!r})\n"
        code += "import gateway.app\n"
        if young is not None:
            code += f"gateway.app.GC_YOUNG_THRESHOLD = {young}\n"
        code += "from gateway.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
        argv = [sys.executable, "-c", code, "serve", "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--config", str(path)]
        env = targets.base_env(TIERGATE_BENCH_KEY=targets.TENANT_KEY, TIERGATE_LOG_LEVEL="warning")
        if tree is not None:
            env["PYTHONPATH"] = str(tree.resolve())
        headers = {"authorization": f"Bearer {targets.TENANT_KEY}"}
        # Named tiergate-*: overhead.py scrapes its GC pauses as it does tiergate's.
        return targets.spawn("tiergate-b", argv, core, port, env, logs, "/v1/models", headers)

    return start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", type=Path, default=None, help="the second gateway's checkout")
    parser.add_argument("--young", type=int, default=None, help="its young-generation threshold")
    parser.add_argument("--label", default="tiergate-b", help="its name in the table")
    args, rest = parser.parse_known_args(argv)
    targets.start_litellm = second_tiergate(args.tree, args.young)  # type: ignore[assignment]
    render = report.render
    report.render = lambda *a, **k: render(*a, **k).replace("litellm", args.label)
    return overhead.main(["--no-pipeline", *rest])


if __name__ == "__main__":
    raise SystemExit(main())
