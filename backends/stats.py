"""What an engine reports about itself, kept in-process for the pool to read.

vLLM's Prometheus registry is process-global and breaks with several engines in one
process, so each engine owns an ``EngineStats`` fed by its own stat logger (vLLM) or
by load snapshots (SGLang). Latencies are exponentially weighted so a reading is
cheap and recent.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    running: int
    waiting: int
    kv_usage: float
    ttft_s: float
    itl_s: float
    queue_s: float
    prefix_hit_rate: float
    prefix_queries: int
    prefix_hits: int


@dataclass(slots=True)
class EngineStats:
    """Mutable on the event loop only; ``snapshot`` is what other code reads."""

    alpha: float = 0.2
    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    ttft_s: float = 0.0
    itl_s: float = 0.0
    queue_s: float = 0.0
    prefix_queries: int = 0
    prefix_hits: int = 0

    def _ewma(self, current: float, samples: list[float]) -> float:
        for sample in samples:
            current = sample if current == 0.0 else current + self.alpha * (sample - current)
        return current

    def observe_scheduler(self, running: int, waiting: int, kv_usage: float) -> None:
        self.running, self.waiting, self.kv_usage = running, waiting, kv_usage

    def observe_prefix(self, queries: int, hits: int) -> None:
        self.prefix_queries += queries
        self.prefix_hits += hits

    def observe_latency(
        self, ttft: list[float], itl: list[float], queue: list[float] | None = None
    ) -> None:
        self.ttft_s = self._ewma(self.ttft_s, ttft)
        self.itl_s = self._ewma(self.itl_s, itl)
        self.queue_s = self._ewma(self.queue_s, queue or [])

    def snapshot(self) -> StatsSnapshot:
        rate = self.prefix_hits / self.prefix_queries if self.prefix_queries else 0.0
        return StatsSnapshot(
            running=self.running,
            waiting=self.waiting,
            kv_usage=self.kv_usage,
            ttft_s=self.ttft_s,
            itl_s=self.itl_s,
            queue_s=self.queue_s,
            prefix_hit_rate=rate,
            prefix_queries=self.prefix_queries,
            prefix_hits=self.prefix_hits,
        )
