"""``tiergate train-classifier --from-traffic``: the online refit, run by hand.

Reads the labels the gateway replicas gathered in the shared store (``redis_url``),
fits the correction over the configured per-tier quality model (the base the gateway's
refit layers over), checks it on the newest labels
(``routing.feedback.refit``), prints the hold-out numbers and writes the refit to
``--out``. With ``--publish`` the outcome is recorded like an online refit's, and an
accepted refit becomes what every replica serves within ``refit.check_s``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from gateway.learning.refitter import refit_once
from gateway.settings import load_effective_config
from policies.loader import ConfigError
from policies.routing_spec import ClassifierConfig
from policies.schema import GatewayConfig
from policies.stores.factories import open_feedback_store, open_store
from policies.stores.store import StoreUnavailable
from routers.quality import QualityFormatError
from routers.refit import Correction
from routers.setup import tier_view

DEFAULT_OUT = Path("refit.npz")


def train_from_traffic(args: argparse.Namespace) -> int:
    try:
        config = load_effective_config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    if config.routing.feedback is None:
        print("routing.feedback is not configured: there are no labels", file=sys.stderr)
        return 2
    if config.redis_url is None:
        print("--from-traffic reads the shared store: set redis_url", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_refit(config, args.out or DEFAULT_OUT, args.publish))
    except StoreUnavailable as exc:
        print(f"the store is unreachable: {exc}", file=sys.stderr)
        return 2
    except QualityFormatError as exc:
        print(exc, file=sys.stderr)
        return 2


async def _refit(config: GatewayConfig, out: Path, publish: bool) -> int:
    spec = config.routing.feedback
    assert spec is not None
    objective = config.routing.objective
    reference = objective.reference if objective is not None else None
    # the base the gateway's refit layers over (gateway/learning/build.py)
    base = tier_view(config.routing.classifier or ClassifierConfig(), list(config.tiers), reference)
    store = open_store(config)
    try:
        feedback = open_feedback_store(store)
        _, serving_bytes = await feedback.serving()
        serving = Correction.from_bytes(serving_bytes) if serving_bytes else None
        run = await refit_once(feedback, base, serving, spec.refit, "cli", publish=publish)
    finally:
        await store.aclose()
    if run is None:
        print("too few labels to split into training and hold-out", file=sys.stderr)
        return 1
    result = run.result
    print(f"{result.decision}: {result.reason}")
    print(f"fitted on {result.trained} labels, checked on the newest {result.held_out}")
    for name, value in sorted(result.metrics.items()):
        print(f"  {name:<24} {value:.4f}")
    if result.correction is not None:
        await asyncio.to_thread(out.write_bytes, result.correction.to_bytes())
        print(f"wrote {out}")
    if run.entry is not None:
        print(f"published: serving version {run.entry.version}")
    return 0
