"""Word order (issue 28): the same words rearranged are another question, a fronted
phrase moved whole is not; checked on the held-out word-order pairs."""

from __future__ import annotations

from collections import Counter

import pytest

from policies.schema import DEFAULT_SEMANTIC_THRESHOLD
from routers.training.verifier_pairs import verifier_pairs
from routers.verifier.order import moved_words
from routers.verifier.rules import Verdict, rule_verdict


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # fillers swapped: the alignment alone drops "just" and "really" and sees one text
        ("Is the code just slow or really broken?", "Is the code really slow or just broken?"),
        ("Is rust harder to learn than go?", "Is go harder to learn than rust?"),
        (
            "How do I pair a sweet wine with a dry cheese?",
            "How do I pair a dry wine with a sweet cheese?",
        ),
        ("Is milk chocolate bad for dogs?", "Is chocolate milk bad for dogs?"),
        # nearly the same words: one added, or one replaced, beside the swap
        ("Is rust harder to learn than go?", "Is go much harder to learn than rust?"),
        (
            "How do I migrate a project from java to python?",
            "How do I move a project from python to java?",
        ),
    ],
)
def test_words_moved_are_another_question(a: str, b: str) -> None:
    assert moved_words(a, b) and moved_words(b, a)
    assert rule_verdict(a, b) == ("different", "reordered")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("At sea level, what is the boiling point?", "What is the boiling point at sea level?"),
        ("How do I reverse a list in python?", "In python, how do I reverse a list?"),
        ("What is recursion?", "Can you tell me what recursion is?"),
        ("Please, what is a mutex?", "What is a mutex, please?"),
        ("What is the capital of France?", "what is the capital of france"),
    ],
)
def test_a_whole_phrase_moved_is_the_same_question(a: str, b: str) -> None:
    assert not moved_words(a, b) and not moved_words(b, a)
    assert rule_verdict(a, b) == ("same", None)


def test_rewordings_are_left_to_the_verifier() -> None:
    """More than two words added or dropped: a rewording, which may reorder freely."""
    a, b = "Is it safe to eat raw eggs?", "Are raw eggs safe to eat when they are fresh?"
    assert not moved_words(a, b)


def test_the_heldout_word_order_pairs_are_held_out() -> None:
    """Built from held-out templates only; the tune pairs come from other templates."""
    held = verifier_pairs("wordorder")
    tuned = verifier_pairs("train") + verifier_pairs("calib")
    kinds = Counter(p.kind for p in held)
    assert {"wo_swap", "wo_swap_adjacent", "wo_sides", "wo_modifiers", "wo_near"} <= set(kinds)
    assert kinds["wo_front"] >= 100 and sum(kinds.values()) - kinds["wo_front"] >= 500
    assert not {(p.a, p.b) for p in held} & {(p.a, p.b) for p in tuned}


def test_no_heldout_word_order_near_miss_is_the_same_question_to_the_rules() -> None:
    held = verifier_pairs("wordorder")
    same = [p for p in held if not p.match and rule_verdict(p.a, p.b)[0] == "same"]
    assert same == []
    fronted = [p for p in held if p.match]
    accepted = sum(rule_verdict(p.a, p.b)[0] == "same" for p in fronted)
    assert accepted / len(fronted) >= 0.9, (accepted, len(fronted))


@pytest.mark.slow
async def test_learned_verifier_on_the_heldout_word_order_pairs() -> None:
    """As the cache decides (cosine, rules, the cross-encoder at the threshold for the
    demo tenant's bound, each pair alone): the share of held-out word-order near-misses
    served stays within what the calibration proves for the bound (its 95 % upper
    bound), and the fronted-phrase paraphrases are still served. (Measured: 1 of 962, a
    swap whose moved word was also replaced by a synonym; docs/cache.md.)"""
    import json

    from routers.onnx_embedder import OnnxEmbedder
    from routers.training.verifier_eval import score_verifier_pairs
    from routers.verifier.model import MODEL_DIR, CrossEncoderVerifier, load_calibration

    threshold = load_calibration().threshold(0.001)
    assert threshold is not None
    meta = json.loads((MODEL_DIR / "meta.json").read_text())
    proven = next(p["upper_95"] for p in meta["calibration"] if p["max_wrong_rate"] == 0.001)
    embedder = OnnxEmbedder()
    scored = await score_verifier_pairs(
        embedder, CrossEncoderVerifier().score, verifier_pairs("wordorder")
    )
    await embedder.aclose()
    served = [s for s in scored if s.hit(DEFAULT_SEMANTIC_THRESHOLD, threshold)]
    wrong = [s.pair for s in served if not s.pair.match]
    near = sum(1 for s in scored if not s.pair.match)
    print(f"held-out word-order near-misses served: {len(wrong)} / {near}: {wrong}")
    assert all(s.verdict == "undecided" for s in served if not s.pair.match)  # none by rules
    assert len(wrong) / near <= proven, (wrong, near, proven)
    fronted = [s for s in scored if s.pair.match]
    assert sum(s.pair.match for s in served) / len(fronted) >= 0.9


def test_the_calibration_says_what_it_bounds_per_source() -> None:
    """meta.json names what max_wrong_rate is a share of, and per source the near-misses
    it was measured on (the word-order tune pairs among them) and what each bound let in."""
    from routers.training.verifier_calibrate import by_source
    from routers.training.verifier_eval import VerifiedPair
    from routers.training.verifier_pairs import LabelledPair
    from routers.verifier.model import MODEL_DIR, CalibrationPoint, load_calibration

    def near(
        source: str, kind: str, p: float | None, verdict: Verdict = "undecided"
    ) -> VerifiedPair:
        pair = LabelledPair("x", "a", "b", False, kind, source)
        return VerifiedPair(pair, 0.9, verdict, None, p)

    scored = [
        near("sick", "sick_near", 0.99),
        near("sick", "sick_near", 0.2),
        near("project", "wo_swap", 0.5),
        near("project", "wo_near", None, "same"),
    ]
    table = by_source(scored, [CalibrationPoint(0.001, 0.98, 3, 0.0)])
    assert table == {
        "project word order": {"negatives": 1, "wrong": {"0.001": 0}, "rules_same": 1},
        "sick": {"negatives": 2, "wrong": {"0.001": 1}, "rules_same": 0},
    }
    import json

    meta = json.loads((MODEL_DIR / "meta.json").read_text())
    assert "calibration near-misses" in meta["bounds"]
    assert meta["by_source"]["project word order"]["negatives"] > 0
    negatives = sum(int(s["negatives"]) for s in meta["by_source"].values())
    assert all(p.negatives == negatives for p in load_calibration().points)
