"""The autoscaling signal: how many replicas each tier should have, from recent latency and load.

The rule (thresholds from ``metrics.autoscale`` in the YAML): p99 latency over the
window above ``up_p99_s`` or utilisation above ``up_utilisation`` → one more replica;
p99 below ``down_p99_s`` and utilisation below ``down_utilisation`` → one fewer;
otherwise hold. An HPA or KEDA reads the result as a gauge.

Utilisation of a tier is the busier of two readings over its replicas: requests in
flight against their ``max_inflight`` room, and the engines' KV-cache usage. A tier
with requests queued in the gateway counts as fully used. Batch lines are left out of
the in-flight count (they only fill slots interactive traffic leaves idle, and give them
back to it); the KV-cache reading still holds theirs.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from backends.pool import EnginePool
from policies.service_spec import AutoscaleConfig

MAX_SAMPLES = 4096


@dataclass(frozen=True, slots=True)
class ScaleAdvice:
    tier: str
    current: int
    recommended: int
    direction: int  # -1 down, 0 hold, +1 up
    p99_s: float
    utilisation: float


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of ``values`` (0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(math.ceil(q / 100.0 * len(ordered)), 1)
    return ordered[rank - 1]


def tier_utilisation(pool: EnginePool) -> float:
    if pool.waiting > 0:
        return 1.0
    replicas = pool.replicas
    if not replicas:
        return 0.0
    room = sum(r.max_inflight for r in replicas)
    inflight = sum(r.inflight - r.batch_inflight for r in replicas) / room if room else 0.0
    kv = sum(r.engine.load().kv_usage for r in replicas) / len(replicas)
    return min(max(inflight, kv), 1.0)


class Autoscaler:
    """Keeps a bounded window of latency samples per tier; advises at scrape time."""

    def __init__(self, config: AutoscaleConfig) -> None:
        self.config = config
        self._samples: dict[str, deque[tuple[float, float]]] = {}

    def observe(self, tier: str, seconds: float, now: float) -> None:
        samples = self._samples.get(tier)
        if samples is None:
            samples = self._samples[tier] = deque(maxlen=MAX_SAMPLES)
        samples.append((now, seconds))

    def p99(self, tier: str, now: float) -> float:
        samples = self._samples.get(tier)
        if not samples:
            return 0.0
        horizon = now - self.config.window_s
        while samples and samples[0][0] < horizon:
            samples.popleft()
        return percentile([seconds for _, seconds in samples], 99)

    def advise(self, tier: str, current: int, utilisation: float, now: float) -> ScaleAdvice:
        cfg = self.config
        p99 = self.p99(tier, now)
        if p99 > cfg.up_p99_s or utilisation > cfg.up_utilisation:
            direction = 1
        elif p99 < cfg.down_p99_s and utilisation < cfg.down_utilisation:
            direction = -1
        else:
            direction = 0
        recommended = min(max(current + direction, cfg.min_replicas), cfg.max_replicas)
        return ScaleAdvice(tier, current, recommended, direction, p99, utilisation)
