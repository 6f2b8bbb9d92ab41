"""The shape of the product code: lines per package, the largest functions, big modules.

    python -m bench.code.code_shape [ROOT]     # ROOT: a checkout (default: this one)

Counts what issue 23 asks to see before and after the serving core: lines per product
package (and per sub-package of ``gateway/``, ``routers/`` and ``policies/``, their roots
as ``(root)``), the modules loose at the top of
``gateway/``, every module over 400 lines and the five largest functions (lines from
``def`` to the function's last line, decorators excluded).
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

PACKAGES = ("gateway", "routers", "backends", "policies")


def modules(root: Path) -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (root / pkg).rglob("*.py"))


def functions(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    return [
        (node.end_lineno - node.lineno + 1, node.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno
    ]


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path.cwd()
    lines: Counter[str] = Counter()
    modules_in: Counter[str] = Counter()
    largest: list[tuple[int, str]] = []
    big: list[tuple[int, str]] = []
    for path in modules(root):
        rel = path.relative_to(root)
        n = len(path.read_text().splitlines())
        lines[rel.parts[0]] += n
        if rel.parts[0] in ("gateway", "routers", "policies"):
            room = rel.parts[1] if len(rel.parts) > 2 else "(root)"
            lines[f"{rel.parts[0]}/{room}"] += n
            modules_in[f"{rel.parts[0]}/{room}"] += 1
        if n > 400:
            big.append((n, str(rel)))
        largest += [(size, f"{rel}:{name}") for size, name in functions(path)]
    loose = [p.name for p in (root / "gateway").glob("*.py")]
    print("| package | modules | lines |\n|---|---|---|")
    for name, n in sorted(lines.items()):
        print(f"| {name} | {modules_in[name] or ''} | {n:,} |")
    print(f"\nloose modules at the top of gateway/: {len(loose)}")
    print("modules over 400 lines:", ", ".join(f"{p} ({n})" for n, p in sorted(big)) or "none")
    print("largest functions:")
    for size, name in sorted(largest, reverse=True)[:5]:
        print(f"  {size:4d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
