"""The semantic lookup's decision and the feedback path, on the in-process store.

The learned verifier is stood in by ``OverlapScorer``, which implements the same
``PairScorer`` protocol (a deterministic word-overlap probability), so these tests need
no model: the rules, the calibration threshold, the refusal reasons, the per-tenant
figures, ``entry_id`` and ``forget`` are what is under test. The real cross-encoder is
exercised in tests/routers/verifier/test_semantic_pairs.py and through the gateway.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from backends.base import GenerationRequest, SamplingParams, Usage
from gateway.cache.record import CachedResponse
from gateway.cache.service import PromptCache
from gateway.cache.stats import summary
from gateway.cache.verify import CandidateVerifier
from policies.schema import ApiKey, CacheConfig, CachePolicy, TenantSpec, VerifyTarget
from policies.stores.cache.memory import MemoryStorage
from policies.tenants import Principal
from routers.batching import EmbeddingFailed
from routers.verifier.model import Calibration, CalibrationPoint

CALIBRATION = Calibration(
    (
        CalibrationPoint(0.001, 0.9, 2000, 0.3),
        CalibrationPoint(0.01, 0.6, 2000, 0.5),
    )
)


class OverlapScorer:
    """P(same) = the share of the asked question's words found in the cached one."""

    where = "thread"

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[tuple[str, str]]] = []
        self.fail = fail

    async def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        self.calls.append(list(pairs))
        if self.fail:
            raise EmbeddingFailed("the embedder worker died (restarted)")
        out = []
        for cached, asked in pairs:
            a, b = set(cached.lower().split()), set(asked.lower().split())
            out.append(len(a & b) / len(b))
        return out


class FixedVector:
    """An ``EmbeddingOnce`` with a known vector: every text embeds alike, so the cosine is
    1 and only the verifier decides."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def get(self) -> np.ndarray:
        vector = np.ones(384, dtype=np.float32)
        return vector / np.linalg.norm(vector)


def principal(verify: object) -> Principal:
    policy = CachePolicy(semantic_verify=verify)  # type: ignore[arg-type]
    return Principal("acme", "k", TenantSpec(keys=(ApiKey(id="k", sha256="0" * 64),), cache=policy))


def request(text: str) -> GenerationRequest:
    return GenerationRequest(
        request_id="t",
        model="small",
        sampling=SamplingParams(max_tokens=16, temperature=0.0),
        messages=({"role": "user", "content": text},),
    )


ANSWER = CachedResponse(("forty",), "stop", Usage(5, 1), None, "fake", "small", 1e-6)


async def cache_with(
    stored: str, verify: object, scorer: OverlapScorer | None
) -> tuple[PromptCache, Principal]:
    verifier = CandidateVerifier(scorer, CALIBRATION if scorer else None)
    cache = PromptCache(
        MemoryStorage(), CacheConfig(semantic=True), semantic_enabled=True, verifier=verifier
    )
    who = principal(verify)
    plan = cache.plan(who, "small", request(stored), None)
    assert plan is not None
    assert await cache.store(plan, ANSWER, FixedVector(stored))  # type: ignore[arg-type]
    return cache, who


async def ask(cache: PromptCache, who: Principal, text: str) -> tuple[str, str | None]:
    plan = cache.plan(who, "small", request(text), None)
    assert plan is not None
    found = await cache.lookup(plan, FixedVector(text))  # type: ignore[arg-type]
    return found.status, found.entry_id


STORED = "how do i keep basil fresh in the fridge"
REWORDED = "how do i keep basil fresh"  # all its words are in STORED: overlap 1.0
LOOSE = "how do i keep mint leaves green"  # overlap 4/7 = 0.57


async def test_a_target_serves_what_the_model_accepts_at_the_calibrated_threshold() -> None:
    scorer = OverlapScorer()
    cache, who = await cache_with(STORED, VerifyTarget(max_wrong_rate=0.001), scorer)
    assert (await ask(cache, who, REWORDED))[0] == "semantic"
    assert (await ask(cache, who, LOOSE))[0] == "miss"  # 0.57 < 0.9
    assert scorer.calls == [[(STORED, REWORDED)], [(STORED, LOOSE)]]
    # A looser bound maps to the looser calibrated point (0.6): 0.57 is still refused.
    cache, who = await cache_with(STORED, VerifyTarget(max_wrong_rate=0.05), scorer)
    assert (await ask(cache, who, LOOSE))[0] == "miss"
    stats = summary(await cache.tenant_stats("acme"))
    assert stats["lookups"] == 1 and stats["refused"] == {"verifier": 1}
    assert stats["verifier"]["calls"] == 1 and stats["verifier"]["p50_ms"] is not None


async def test_rules_decide_first_and_the_model_never_overrules_a_veto() -> None:
    scorer = OverlapScorer()
    cache, who = await cache_with(STORED, VerifyTarget(max_wrong_rate=0.01), scorer)
    # Trivial edit: accepted by the rules, no model call.
    assert (await ask(cache, who, STORED.upper() + "?"))[0] == "semantic"
    # Another number or a negation: another prefix (the guard), so never a candidate.
    assert (await ask(cache, who, "how do i keep 2 basil fresh in the fridge"))[0] == "miss"
    assert (await ask(cache, who, "how do i not keep basil fresh in the fridge"))[0] == "miss"
    # Vetoes among the candidates: reordered words, a name, a code identifier.
    assert (await ask(cache, who, "how do i keep the fridge fresh in basil"))[0] == "miss"
    assert (await ask(cache, who, "how do i keep basil fresh in the Bosch fridge"))[0] == "miss"
    assert (await ask(cache, who, "how do i keep basil_leaves fresh in the fridge"))[0] == "miss"
    assert scorer.calls == []
    refused = summary(await cache.tenant_stats("acme"))["refused"]
    assert refused == {"reordered": 1, "entities": 1, "code": 1}


async def test_strict_refuses_what_the_rules_leave_open() -> None:
    scorer = OverlapScorer()
    cache, who = await cache_with(STORED, "strict", scorer)
    assert (await ask(cache, who, REWORDED))[0] == "miss"
    assert scorer.calls == []
    assert summary(await cache.tenant_stats("acme"))["refused"] == {"strict": 1}


async def test_a_bound_tighter_than_the_calibration_is_strict() -> None:
    scorer = OverlapScorer()
    cache, who = await cache_with(STORED, VerifyTarget(max_wrong_rate=0.0001), scorer)
    assert (await ask(cache, who, REWORDED))[0] == "miss"
    assert scorer.calls == []


async def test_a_failing_verifier_refuses_and_never_fails_the_lookup() -> None:
    cache, who = await cache_with(STORED, VerifyTarget(max_wrong_rate=0.01), OverlapScorer(True))
    assert (await ask(cache, who, REWORDED))[0] == "miss"
    assert summary(await cache.tenant_stats("acme"))["refused"] == {"verifier_unavailable": 1}


@pytest.mark.parametrize("hit", ["exact", "semantic"])
async def test_forget_evicts_the_entry_and_keeps_the_pair_as_a_label(hit: str) -> None:
    cache, who = await cache_with(STORED, VerifyTarget(max_wrong_rate=0.01), OverlapScorer())
    asked = STORED if hit == "exact" else REWORDED
    status, entry_id = await ask(cache, who, asked)
    assert status == hit and entry_id is not None
    assert await cache.forget("acme", entry_id, query_text=asked) is True
    assert (await ask(cache, who, asked))[0] == "miss"  # gone from the exact and vector index
    assert (await ask(cache, who, STORED))[0] == "miss"
    labels = await cache.labels("acme")
    assert [(x["a"], x["b"], x["match"]) for x in labels] == [(STORED, asked, False)]
    assert await cache.forget("acme", entry_id, query_text=asked) is False  # already gone
    assert await cache.forget("globex", entry_id, query_text=asked) is False
    assert await cache.forget("acme", "not-an-id", query_text=asked) is False
    assert len(await cache.labels("acme")) == 1  # nothing labelled twice
    assert cache.counters.forgotten == 1


def test_surrounding_whitespace_is_no_difference_to_the_rules() -> None:
    from routers.verifier.rules import rule_verdict

    a, b = "What is the capital of France?", "In France, which city is the capital?"
    assert rule_verdict(a, b) == ("undecided", None)
    assert rule_verdict(f"  {a}\n", f"\t{b} ") == ("undecided", None)
    assert rule_verdict(a, "In Spain, which city is the capital?") == ("different", "entities")


@pytest.mark.parametrize(
    ("a", "b", "verdict"),
    [
        # Capitalisation alone is no other name: the model decides.
        ("Is Python fast enough for games?", "Python: is it fast enough for games?", "undecided"),
        (
            "How do I deploy to AWS from my laptop?",
            "how to deploy to aws from a laptop",
            "undecided",
        ),
        ("Tell me who Nelson Mandela was.", "Nelson Mandela: who was he?", "undecided"),
        # A name replaced, added or dropped, or names in another order: vetoed.
        ("What is the capital of France?", "What is the capital of Spain?", "different"),
        (
            "What is a good capital to visit?",
            "What is a good capital of France to visit?",
            "different",
        ),
        ("Flights from London to New York?", "Any flights from New York to London?", "different"),
        ("How do I deploy to AWS?", "How do I deploy to GCP?", "different"),
    ],
)
def test_the_entities_veto_forgives_capitalisation_only(a: str, b: str, verdict: str) -> None:
    from routers.verifier.rules import rule_verdict

    assert rule_verdict(a, b)[0] == verdict
    assert rule_verdict(b, a)[0] == verdict


async def test_only_the_closest_undecided_candidate_is_scored() -> None:
    scorer = OverlapScorer()
    verifier = CandidateVerifier(scorer, CALIBRATION)
    policy = CachePolicy(semantic_verify=VerifyTarget(max_wrong_rate=0.001))

    class Stored:
        def __init__(self, text: str) -> None:
            self.text = text

    close = [(0.95, Stored(LOOSE)), (0.93, Stored(STORED))]
    decision = await verifier.decide(policy, REWORDED, close)  # type: ignore[arg-type]
    assert scorer.calls == [[(LOOSE, REWORDED)]]  # one pair, the closest
    assert decision.chosen is None and decision.refused == {"verifier": 2}


@pytest.mark.parametrize(
    ("a", "b", "verdict"),
    [
        # One slot filled differently, the rest of the question in place: vetoed.
        (
            "How do I lock a folder in one step?",
            "How do I unlock a folder in one step?",
            "different",
        ),
        (
            "What should I eat the day before a run?",
            "What should I eat the day after a run?",
            "different",
        ),
        (
            "How do I sort a list in ascending order?",
            "How do I sort a list in descending order?",
            "different",
        ),
        # Wider rewordings, or words added or dropped: left to the model.
        ("How many days are in a leap year?", "A leap year has how many days?", "undecided"),
        ("how do i keep basil fresh in the fridge", "how do i keep basil fresh", "undecided"),
        ("How do I make my code faster?", "What can I do to speed up my program?", "undecided"),
    ],
)
def test_one_slot_filled_differently_is_vetoed(a: str, b: str, verdict: str) -> None:
    from routers.verifier.rules import rule_verdict

    assert rule_verdict(a, b)[0] == verdict
    assert rule_verdict(b, a)[0] == verdict
    if verdict == "different":
        assert rule_verdict(a, b)[1] == "substituted"
