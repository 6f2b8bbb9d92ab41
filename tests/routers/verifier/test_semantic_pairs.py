"""The labelled pairs: zero false hits on the held-out part, with real MiniLM, the rules
and the learned verifier, and through a real gateway (uvicorn + the official client)."""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Any

import openai
import pytest

from policies.schema import DEFAULT_SEMANTIC_THRESHOLD, CachePolicy, VerifyTarget
from routers.embedding import Embedder, SentenceTransformerEmbedder
from routers.training.semantic_eval import evaluate, load_pairs, score_pairs
from routers.verifier.alignment import same_question, verified
from routers.verifier.guard import comparable, guard, reordered
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import running_gateway

# The held-out kinds (routers/training/corpora/cache_pairs.py HELDOUT_KINDS) never appear in the
# tune part.
HELDOUT_ONLY = set(
    "antonym negation_affix number_words category_member inverse_action time_relative "
    "role_reversal para_typo para_embedded para_synonym".split()
)


def test_the_set_is_big_varied_and_split_by_kind_and_template() -> None:
    pairs = load_pairs()
    assert len(pairs) >= 2000
    assert len({p["id"] for p in pairs}) == len(pairs)
    assert len({p["kind"] for p in pairs}) >= 15
    tune, held = load_pairs("tune"), load_pairs("heldout")
    assert len(tune) + len(held) == len(pairs)
    assert HELDOUT_ONLY <= {p["kind"] for p in held}
    assert not HELDOUT_ONLY & {p["kind"] for p in tune}
    templates = {
        s: {p.get("template") for p in ps} - {None} for s, ps in (("t", tune), ("h", held))
    }
    assert not templates["t"] & templates["h"]
    assert sum(1 for p in held if p["match"]) >= 200


def test_guard_catches_what_embeddings_miss() -> None:
    assert not comparable("Convert 5 miles to km.", "Convert 50 miles to km.")
    assert not comparable("Is coffee good for you?", "Is coffee not good for you?")
    assert not comparable("Why do cats like water?", "Why don't cats like water?")
    assert not comparable("How many grams in a pound?", "How many grams in an ounce?")
    assert not comparable("Who is older, Alice or Bob?", "Who is older, Bob or Alice?")
    assert not comparable("What is the capital of France?", "What is the capital of Spain?")
    assert reordered("Is tea healthier than coffee?", "Is coffee healthier than tea?")
    assert comparable("How many days are in a leap year?", "A leap year has how many days?")
    assert guard("Convert 3 Kilometres") == guard("convert 3 km")
    # Case-free: the lower-cased question shares the semantic prefix.
    assert guard("What is the capital of France?") == guard("what is the capital of france")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Sort a list in ascending order.", "Sort a list in descending order."),
        ("Is it possible to divide by zero?", "Is it impossible to divide by zero?"),
        ("How many days are in five weeks?", "How many days are in six weeks?"),
        ("What is the weather like in spring?", "What is the weather like in autumn?"),
        ("How do I encrypt a file?", "How do I decrypt a file?"),
        ("What should I eat before a run?", "What should I eat after a run?"),
        ("Can a landlord sue a tenant?", "Can a tenant sue a landlord?"),
        ("How do I redirect HTTP to HTTPS?", "How do I redirect HTTPS to HTTP?"),
        ("How do I convert stone to kg?", "How do I convert store to kg?"),  # both words
    ],
)
def test_verifier_refuses_a_changed_meaning(a: str, b: str) -> None:
    assert not same_question(a, b) and not same_question(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("What is the capital of France?", "what is the capital of france"),
        ("What is the capital of France?", "Can you tell me what the capital of France is?"),
        ("At sea level, what is the boiling point?", "What is the boiling point at sea level?"),
        ("How do I reverse a list in Python?", "How do I reverse a lsit in Python?"),
        ("What's the time complexity of quicksort?", "What is the time complexity of quicksort?"),
        ("How many legs do five spiders have?", "How many legs do 5 spiders have?"),
        ("Why don't cats like water?", "Hey, quick question: why do not cats like water?"),
    ],
)
def test_verifier_accepts_meaning_preserving_edits(a: str, b: str) -> None:
    assert same_question(a, b) and same_question(b, a)


def test_guard_mode_is_the_recall_knob() -> None:
    a, b = "What is the capital of France?", "Which city is the capital of France?"
    assert not verified("strict", a, b) and verified("guard", a, b)
    assert not verified("guard", "Is tea better than coffee?", "Is coffee better than tea?")
    assert CachePolicy().semantic_verify == VerifyTarget(max_wrong_rate=0.001)


def onnx_int8() -> Embedder:
    from routers.onnx_embedder import OnnxEmbedder

    return OnnxEmbedder()


@pytest.mark.slow
@pytest.mark.parametrize(
    "make_embedder",
    # the ONNX int8 MiniLM the gateway shares with the classifier; torch MiniLM (what the
    # gateway embeds with when the classifier is off) only with TIERGATE_ALL_PAIRS=1
    [
        onnx_int8,
        pytest.param(
            SentenceTransformerEmbedder,
            marks=pytest.mark.skipif(
                os.environ.get("TIERGATE_ALL_PAIRS") != "1", reason="CI time: 130 s"
            ),
        ),
    ],
    ids=["onnx-int8", "torch"],
)
async def test_zero_false_hits_on_the_heldout_part(make_embedder: Any) -> None:
    assert CachePolicy().semantic_threshold == DEFAULT_SEMANTIC_THRESHOLD
    embedder = make_embedder()
    scored = await score_pairs(embedder, load_pairs("heldout"))
    await embedder.aclose()
    scores = evaluate(scored, DEFAULT_SEMANTIC_THRESHOLD, "strict")
    assert scores.false_hits == 0, scores.false_by_kind
    assert scores.recall >= 0.5, scores


# The learned verifier's bound in the pair tests: the demo tenant's (config/gateway.yaml).
TARGET = VerifyTarget(max_wrong_rate=0.001)


@pytest.mark.slow
async def test_learned_verifier_on_the_heldout_part() -> None:
    """Rules + the cross-encoder at the calibrated threshold for the bound, on pairs it
    was neither trained nor calibrated on: no near-miss of any kind served, recall >= 0.6."""
    from routers.onnx_embedder import OnnxEmbedder
    from routers.training.verifier_eval import score_verifier_pairs
    from routers.training.verifier_pairs import verifier_pairs
    from routers.verifier.model import CrossEncoderVerifier, load_calibration

    threshold = load_calibration().threshold(TARGET.max_wrong_rate)
    assert threshold is not None
    embedder = OnnxEmbedder()
    scored = await score_verifier_pairs(
        embedder, CrossEncoderVerifier().score, verifier_pairs("heldout")
    )
    await embedder.aclose()
    hits = Counter(
        (s.pair.kind, s.pair.match) for s in scored if s.hit(DEFAULT_SEMANTIC_THRESHOLD, threshold)
    )
    false_hits = {kind: n for (kind, match), n in hits.items() if not match}
    assert false_hits == {}
    positives = sum(1 for s in scored if s.pair.match)
    recall = sum(n for (_, match), n in hits.items() if match) / positives
    assert recall >= 0.6, (recall, hits)


def gateway_sample(per_kind: int = 6) -> list[dict[str, object]]:
    """The held-out part, or (CI) ``per_kind`` pairs of every kind, taken round-robin over
    its templates. TIERGATE_ALL_PAIRS=1 runs all of it."""
    held = load_pairs("heldout")
    if os.environ.get("TIERGATE_ALL_PAIRS") == "1":
        return held
    by_template: dict[tuple[str, str], list[dict[str, object]]] = {}
    for pair in held:
        by_template.setdefault((str(pair["kind"]), str(pair["template"])), []).append(pair)
    taken: Counter[str] = Counter()
    sample = []
    for round_ in range(per_kind):
        for (kind, _), pairs in sorted(by_template.items(), key=str):
            if round_ < len(pairs) and taken[kind] < per_kind:
                taken[kind] += 1
                sample.append(pairs[round_])
    return sample


@pytest.mark.slow
@pytest.mark.timeout(900)  # ~15 s on a quiet machine; one embedding per request
def test_heldout_pairs_through_a_real_gateway() -> None:
    """Two requests per pair, each pair under its own system prompt: ``a`` fills the
    cache, ``b`` must hit it semantically exactly when the pair is labelled a match."""
    config = fake_config()
    config["cache"] = {"semantic": True, "key_prefix": "tg:pairs"}
    # As served: the ONNX MiniLM in an embedder worker (shared with the classifier), and
    # the learned verifier in that worker at the demo tenant's bound.
    config["routing"] = {"classifier": {}}
    config["tenants"]["acme"]["cache"] = {"semantic_verify": TARGET.model_dump()}
    pairs = gateway_sample()
    outcomes: Counter[str] = Counter()
    false_hits: list[object] = []
    started = time.perf_counter()
    with running_gateway(config) as gateway:
        client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)
        for pair in pairs:
            system: Any = {"role": "system", "content": f"You answer question set {pair['id']}."}
            statuses = []
            for text in (pair["a"], pair["b"]):
                raw = client.chat.completions.with_raw_response.create(
                    model="small",
                    temperature=0,
                    messages=[system, {"role": "user", "content": str(text)}],
                )
                statuses.append(raw.headers["x-tiergate-cache"])
            assert statuses[0] == "miss", (pair, statuses)
            hit = statuses[1] in ("semantic", "exact")
            outcomes[f"{'match' if pair['match'] else 'near-miss'}:{'hit' if hit else 'miss'}"] += 1
            if hit and not pair["match"]:
                false_hits.append(pair["id"])
        counters = gateway.state.parts.cache.counters  # type: ignore[union-attr]
        assert counters.semantic_by_tenant.get("acme", 0) == outcomes["match:hit"]
    print(f"{len(pairs)} held-out pairs in {time.perf_counter() - started:.1f}s: {outcomes}")
    assert false_hits == [], false_hits
    positives = outcomes["match:hit"] + outcomes["match:miss"]
    assert positives >= 40 and outcomes["match:hit"] / positives >= 0.5, outcomes
