"""``kubectl kustomize`` builds every deploy/k8s tree offline, and what it builds validates.

Core kinds against the Kubernetes schemas (``kubernetes-validate``, strict: an unknown
field fails); KEDA, KServe and Prometheus Operator kinds against their CRDs' published
schemas, vendored in deploy/k8s/schemas (SOURCES.md), made strict the same way. Then
the pieces must fit: every tiergate config in a ConfigMap loads, every discovered DNS
name is a headless Service with that port, every Secret key and ConfigMap file that a
pod names exists, and every ScaledObject targets a Deployment.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from policies.loader import load_config

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
SCHEMAS = K8S / "schemas"
TREES = ["base", *sorted(f"overlays/{p.name}" for p in (K8S / "overlays").iterdir())]
KUBERNETES = "1.32.0"  # the oldest minor we support: sidecar-free preStop sleep is GA there
CRDS = {
    ("keda.sh/v1alpha1", "ScaledObject"): "keda.sh_ScaledObject_v1alpha1.json",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "monitoring.coreos.com_ServiceMonitor_v1.json",
    ("serving.kserve.io/v1beta1", "InferenceService"): (
        "serving.kserve.io_InferenceService_v1beta1.json"
    ),
}

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")


def strict(schema: Any) -> Any:
    """Unknown fields fail, as ``kubectl apply --validate=strict`` does, except where the
    CRD keeps unknown fields on purpose."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
        out["properties"] = {**out["properties"], "apiVersion": {}, "kind": {}, "metadata": {}}
    return out


@cache
def crd_validator(filename: str) -> jsonschema.Draft7Validator:
    schema = strict(json.loads((SCHEMAS / filename).read_text()))
    return jsonschema.Draft7Validator(schema)


@cache
def build(tree: str) -> tuple[dict[str, Any], ...]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(K8S / tree)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return tuple(doc for doc in yaml.safe_load_all(out.stdout) if doc)


def problems_of(doc: dict[str, Any]) -> list[str]:
    name = f"{doc['kind']}/{doc['metadata']['name']}"
    crd = CRDS.get((doc["apiVersion"], doc["kind"]))
    if crd is not None:
        errors = crd_validator(crd).iter_errors(doc)
        return [f"{name}: {'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]
    try:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{name}: {'.'.join(map(str, exc.path))}: {exc.message}"]
    return []


def by_kind(docs: tuple[dict[str, Any], ...], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def pod_specs(docs: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    kinds = ("Deployment", "StatefulSet")
    return [d["spec"]["template"]["spec"] for d in docs if d["kind"] in kinds]


@pytest.mark.parametrize("tree", TREES)
def test_every_tree_builds_and_validates(tree: str) -> None:
    docs = build(tree)
    assert docs
    problems = [p for doc in docs for p in problems_of(doc)]
    assert problems == []


@pytest.mark.parametrize("tree", TREES)
def test_the_pieces_fit(tree: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = build(tree)
    monkeypatch.setenv("TIERGATE_REDIS_URL", "redis://tiergate-redis:6379/0")
    headless = {
        d["metadata"]["name"]: {p["port"] for p in d["spec"]["ports"]}
        for d in by_kind(docs, "Service")
        if d["spec"].get("clusterIP") == "None"
    }
    files: dict[str, set[str]] = {}
    for config_map in by_kind(docs, "ConfigMap"):
        files[config_map["metadata"]["name"]] = set(config_map["data"])
        for key, text in config_map["data"].items():
            if not key.endswith(".yaml"):
                continue
            path = tmp_path / key
            path.write_text(text)
            config = load_config(path)  # raises with file, line and field on a bad one
            for spec in config.engines.values():
                if spec.discover is not None and spec.discover.dns is not None:
                    assert spec.discover.port in headless.get(spec.discover.dns, set()), key
    secrets = {s["metadata"]["name"]: set(s.get("stringData", {})) for s in by_kind(docs, "Secret")}
    for pod in pod_specs(docs):
        mounted = {v["configMap"]["name"] for v in pod.get("volumes", []) if "configMap" in v}
        for container in pod["containers"]:
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref is not None:
                    assert ref["key"] in secrets[ref["name"]], env
            config_file = next((a for a in container.get("command", []) if a.endswith(".yaml")), "")
            if config_file:
                assert any(Path(config_file).name in files[m] for m in mounted), config_file
    deployments = {d["metadata"]["name"] for d in by_kind(docs, "Deployment")}
    for scaled in by_kind(docs, "ScaledObject"):
        assert scaled["spec"]["scaleTargetRef"]["name"] in deployments
    for monitor in by_kind(docs, "ServiceMonitor"):
        wanted = monitor["spec"]["selector"]["matchLabels"].items()
        ports = {
            p.get("name")
            for s in by_kind(docs, "Service")
            if wanted <= s["metadata"].get("labels", {}).items()
            for p in s["spec"]["ports"]
        }
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports


def test_validation_catches_a_misspelt_field() -> None:
    """The checks above can fail: one wrong field name in each kind of schema is caught."""
    docs = build("base")
    scaled = copy.deepcopy(by_kind(docs, "ScaledObject")[0])
    scaled["spec"]["maxReplicaCounts"] = scaled["spec"].pop("maxReplicaCount")
    assert problems_of(scaled)
    deployment = copy.deepcopy(by_kind(docs, "Deployment")[0])
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    assert problems_of(deployment)
    isvc = copy.deepcopy(by_kind(build("overlays/kserve"), "InferenceService")[0])
    isvc["spec"]["predictor"]["model"]["modelFormats"] = {"name": "huggingface"}
    assert problems_of(isvc)
