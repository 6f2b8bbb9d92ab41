"""Which semantic candidate, if any, may answer the asked question: rules, then the model.

The candidates above the tenant's cosine threshold go through the rules first
(``routers.verifier.rules``): one the rules accept is served at once; a vetoed one is
refused with its reason. What the rules leave undecided is refused under ``strict``,
and under a ``max_wrong_rate`` target the closest of them (by cosine) is scored by the
learned verifier (in the embedder worker, ``routers.verifier.scorer``) and served when
at or above the calibrated threshold. A verifier that fails or is missing refuses, never fails
the request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from policies.schema import CachePolicy, VerifyTarget
from policies.stores.cache.storage import Candidate
from routers.batching import EmbeddingFailed
from routers.verifier.alignment import verified
from routers.verifier.model import Calibration
from routers.verifier.rules import rule_verdict
from routers.verifier.scorer import PairScorer

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Decision:
    chosen: tuple[float, Candidate] | None = None
    refused: dict[str, int] = field(default_factory=dict)  # reason -> candidates
    verify_ms: float | None = None  # the learned verifier's call, when one was made
    probability: float | None = None  # of the chosen candidate, when the model chose it

    def refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1


class CandidateVerifier:
    """The per-lookup decision; ``scorer`` and ``calibration`` None: rules only."""

    def __init__(self, scorer: PairScorer | None, calibration: Calibration | None) -> None:
        self.scorer = scorer
        self.calibration = calibration
        self._warned: set[float] = set()

    def threshold(self, target: VerifyTarget) -> float | None:
        if self.scorer is None or self.calibration is None:
            return None
        threshold = self.calibration.threshold(target.max_wrong_rate)
        if threshold is None and target.max_wrong_rate not in self._warned:
            self._warned.add(target.max_wrong_rate)
            log.warning(
                "max_wrong_rate %s is tighter than the verifier's calibration resolves: "
                "rules only (strict) for it",
                target.max_wrong_rate,
            )
        return threshold

    async def decide(
        self, policy: CachePolicy, asked: str, scored: Sequence[tuple[float, Candidate]]
    ) -> Decision:
        """``scored``: ``(cosine, candidate)`` best first, all above the threshold."""
        decision = Decision()
        mode = policy.semantic_verify
        if mode == "guard":
            for similarity, candidate in scored:
                if verified("guard", candidate.text, asked):
                    decision.chosen = (similarity, candidate)
                    return decision
                decision.refuse("guard")
            return decision
        undecided: list[tuple[float, Candidate]] = []
        for similarity, candidate in scored:
            verdict, reason = rule_verdict(candidate.text, asked)
            if verdict == "same":
                decision.chosen = (similarity, candidate)
                return decision
            if verdict == "different":
                decision.refuse(reason or "rules")
            else:
                undecided.append((similarity, candidate))
        if not undecided:
            return decision
        threshold = None if mode == "strict" else self.threshold(mode)
        if threshold is None or self.scorer is None:
            for _ in undecided:
                decision.refuse("strict")
            return decision
        # Only the closest undecided candidate is scored: one pair per lookup keeps the
        # call at one short run (the others are refused as "verifier" unscored).
        for _ in undecided[1:]:
            decision.refuse("verifier")
        undecided = undecided[:1]
        started = time.perf_counter()
        try:
            probabilities = await self.scorer.score([(c.text, asked) for _, c in undecided])
        except EmbeddingFailed as exc:
            log.warning("semantic verifier failed (%s): candidates refused", exc)
            for _ in undecided:
                decision.refuse("verifier_unavailable")
            return decision
        finally:
            decision.verify_ms = (time.perf_counter() - started) * 1000
        for (similarity, candidate), probability in zip(undecided, probabilities, strict=True):
            if decision.chosen is None and probability >= threshold:
                decision.chosen = (similarity, candidate)
                decision.probability = probability
            elif decision.chosen is None:
                decision.refuse("verifier")
        return decision
