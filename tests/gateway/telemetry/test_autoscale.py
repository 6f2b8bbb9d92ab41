"""The replica recommendation rule, on its own: thresholds, window, clamping, utilisation."""

from __future__ import annotations

from backends.fake import FakeEngine
from backends.pool import EnginePool, Replica
from gateway.telemetry.autoscale import Autoscaler, percentile, tier_utilisation
from policies.service_spec import AutoscaleConfig


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50 and percentile(values, 99) == 99
    assert percentile([3.0], 99) == 3.0 and percentile([], 99) == 0.0


def test_up_down_hold_and_bounds() -> None:
    scaler = Autoscaler(AutoscaleConfig(window_s=10, min_replicas=1, max_replicas=3))
    for i in range(100):
        scaler.observe("small", 0.1, now=100.0 + i * 0.01)
    # Fast and idle: one fewer, never under min_replicas.
    assert scaler.advise("small", 2, 0.1, now=101.0).recommended == 1
    assert scaler.advise("small", 1, 0.1, now=101.0).recommended == 1
    # Busy (utilisation above 0.8) wins over fast: one more, never over max_replicas.
    advice = scaler.advise("small", 2, 0.9, now=101.0)
    assert (advice.direction, advice.recommended) == (1, 3)
    assert scaler.advise("small", 3, 0.9, now=101.0).recommended == 3
    # In between: hold.
    assert scaler.advise("small", 2, 0.5, now=101.0).direction == 0
    # One slow request in a hundred sets p99 above 2 s: up.
    scaler.observe("small", 2.5, now=101.5)
    scaler.observe("small", 2.5, now=101.5)
    advice = scaler.advise("small", 2, 0.1, now=102.0)
    assert advice.p99_s == 2.5 and advice.direction == 1
    # Once the window has passed, the slow samples no longer count.
    assert scaler.advise("small", 2, 0.1, now=200.0).direction == -1


def test_thresholds_come_from_config() -> None:
    scaler = Autoscaler(
        AutoscaleConfig(up_p99_s=0.2, down_p99_s=0.05, up_utilisation=0.5, down_utilisation=0.1)
    )
    scaler.observe("large", 0.3, now=1.0)
    assert scaler.advise("large", 1, 0.0, now=1.0).direction == 1
    assert scaler.advise("idle", 1, 0.6, now=1.0).direction == 1
    assert scaler.advise("idle", 2, 0.2, now=1.0).direction == 0


def test_utilisation_reads_inflight_and_queue() -> None:
    replicas = [Replica(FakeEngine(name=f"e{i}", model="m"), max_inflight=4) for i in range(2)]
    pool = EnginePool("small", replicas)
    assert tier_utilisation(pool) == 0.0
    replicas[0].inflight = 4
    replicas[1].inflight = 2
    assert tier_utilisation(pool) == 0.75
    pool.waiting = 1
    assert tier_utilisation(pool) == 1.0
