"""Vendor the openAPIV3Schema of published CRDs, for validating deploy/k8s offline.

    python scripts/vendor_crd_schemas.py CRD.yaml [CRD.yaml ...]

Each CRD file (as its project publishes it) gives one JSON file per served version in
deploy/k8s/schemas/, named <group>_<kind>_<version>.json. ``description`` texts are
dropped (they do not validate anything and are most of the bytes); every other keyword
is kept as published. Where each file came from is in deploy/k8s/schemas/SOURCES.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).resolve().parent.parent / "deploy" / "k8s" / "schemas"


def without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        # "description" as a keyword, not a property that happens to be named so.
        return {
            k: (without_descriptions(v) if k != "properties" else _props(v))
            for k, v in node.items()
            if k != "description"
        }
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


def _props(properties: dict[str, Any]) -> dict[str, Any]:
    return {name: without_descriptions(schema) for name, schema in properties.items()}


def vendor(path: Path) -> list[Path]:
    written = []
    for crd in yaml.safe_load_all(path.read_text()):
        if not crd or crd.get("kind") != "CustomResourceDefinition":
            continue
        spec = crd["spec"]
        kind = spec["names"]["kind"]
        for version in spec["versions"]:
            if not version.get("served", False):
                continue
            schema = without_descriptions(version["schema"]["openAPIV3Schema"])
            target = OUT / f"{spec['group']}_{kind}_{version['name']}.json"
            target.write_text(json.dumps(schema, sort_keys=True, separators=(",", ":")) + "\n")
            written.append(target)
    return written


def main(argv: list[str]) -> int:
    for name in argv:
        for target in vendor(Path(name)):
            print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
