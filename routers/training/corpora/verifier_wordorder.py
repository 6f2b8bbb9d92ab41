"""Build data/verifier/wordorder_pairs.jsonl: word-order near-misses from the project's questions.

    python -m routers.training.corpora.verifier_wordorder

The same words in another order can ask another question: "Is the code just slow or
really broken?" is not "Is the code really slow or just broken?", "Is Rust harder to
learn than Go?" is not "Is Go harder to learn than Rust?" (issue 28). These pairs are
made from the project's own questions only (the filled frames of
``cache_pairs_generated.jsonl``, the hand-written ``cache_pairs.jsonl``) and from the
two-slot frames below, written for this project. Near-miss kinds (``match: false``):

- ``wo_swap``: two content words of one question swapped, apart ("sort the list in
  python" / "sort the python in list");
- ``wo_swap_adjacent``: two adjacent content words swapped ("milk chocolate");
- ``wo_sides``: the two sides of an asymmetric relation (``RELATIONS``);
- ``wo_modifiers``: two modifiers swapped between their heads (``MODIFIERS``);
- ``wo_near``: one of the above plus one small edit (a word added, dropped, or a synonym
  swapped in elsewhere), so the two texts do not use exactly the same words.

Paraphrase kind (``match: true``), the reorder that keeps the meaning: ``wo_front``, a
fronted phrase moved whole ("In python, how do I…" / "How do I… in python?").

The split follows the question a pair starts from: a question from a ``tune`` template
(or the hand-written tune pairs) gives ``tune`` pairs, one from a held-out template gives
``heldout`` pairs, and the frames below put their first half in ``tune``, the second
half in ``heldout``. ``routers.training.verifier_pairs`` may train and calibrate on the ``tune``
pairs; the ``heldout`` ones are the check (``bench/experiments/verifier_wordorder.py``). No text of
an evaluation pair is used. Deterministic (fixed seed).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path

from routers.training.corpora.cache_pair_rewrites import PARAPHRASES, SYNONYMS
from routers.training.corpora.verifier_pairs import norm

HERE = Path(__file__).resolve().parents[3] / "data"  # the checkout's data/ folder
OUT = HERE / "verifier" / "wordorder_pairs.jsonl"
PER_TEMPLATE = 4  # questions drawn from one template (one swap of each kind from each)

# Words that carry no slot of their own: swapping them is no content swap.
FUNCTION_WORDS = frozenset(
    "a an the is are was were be been do does did i you he she it we they my your his her "
    "its our their me him us them what which who whom whose why how when where there this "
    "that these those to of in on at for from by with without into onto about as than then "
    "and or but if so not no can could will would should shall may might must have has had "
    "am any some all each every very too also just really only".split()
)
FRONTING = [r for _, kind, r in PARAPHRASES if kind == "para_reorder" and callable(r)]
EXTRA_WORDS = ("also", "still", "usually", "now", "best", "new", "good", "actually", "ever")

RELATIONS = (  # two-slot frames: the answer depends on which side is which
    ("Is {x} harder to learn than {y}?", ("python", "rust", "go", "java", "french", "german")),
    ("How do I migrate a project from {x} to {y}?", ("python", "rust", "go", "java")),
    ("Why is {x} more expensive than {y}?", ("iron", "copper", "gold", "silver", "zinc")),
    ("Should I learn the {x} before the {y}?", ("piano", "violin", "guitar", "drums", "flute")),
    ("Does {x} come before {y} in the year?", ("january", "march", "june", "october")),
    ("Can I replace {x} with {y} in a cake?", ("butter", "oil", "sugar", "honey", "milk")),
    ("Is {x} heavier than {y}?", ("iron", "copper", "aluminium", "gold", "zinc")),
    ("How do I switch my team from {x} to {y}?", ("python", "rust", "go", "java", "spanish")),
    ("Does {x} usually follow {y} on a dinner menu?", ("lunch", "dessert", "soup", "salad")),
    ("Is {x} a good substitute for {y} when baking?", ("butter", "oil", "yogurt", "honey")),
    ("Why does {x} sound louder than {y}?", ("piano", "violin", "guitar", "drums", "cello")),
    ("Is {x} colder than {y} in the north?", ("spring", "summer", "autumn", "winter")),
)
MODIFIERS = (  # two modifiers, each with its head; swapping them swaps what is said
    ("Is the code {x} slow or {y} broken?", ("just", "really", "only", "always", "mostly")),
    ("Was the meeting {x} late or {y} cancelled?", ("just", "really", "only", "partly")),
    ("How do I pair a {x} wine with a {y} cheese?", ("sweet", "dry", "light", "strong", "soft")),
    ("Should I {x} rest or {y} stretch after a run?", ("just", "really", "always", "only")),
    ("Can a {x} dog share a home with a {y} cat?", ("young", "old", "small", "big", "calm")),
    ("Is my laptop {x} old or {y} misconfigured?", ("just", "really", "only", "slightly")),
    ("Is the team {x} busy or {y} understaffed?", ("just", "really", "only", "always")),
    ("Why would a {x} plant grow next to a {y} tree?", ("tall", "short", "young", "old")),
    ("Was the exam {x} hard or {y} long?", ("just", "really", "only", "very")),
    ("Is the battery {x} old or {y} faulty?", ("just", "really", "mostly", "slightly")),
)


def _tokens(text: str) -> list[str]:
    return re.findall(r"\w+(?:[.'-]\w+)*|[^\w\s]", text)


def _join(tokens: list[str]) -> str:
    return re.sub(r" ([?.,!:;])", r"\1", " ".join(tokens))


def _content(tokens: list[str]) -> list[int]:
    return [
        i
        for i, t in enumerate(tokens)
        if t.isalpha() and len(t) >= 3 and t.lower() not in FUNCTION_WORDS
    ]


def swaps(text: str, rng: random.Random, adjacent: bool) -> Iterator[str]:
    """``text`` with two content words swapped: apart, or next to each other."""
    tokens = _tokens(text)
    content = _content(tokens)
    pairs = [
        (i, j)
        for n, i in enumerate(content)
        for j in content[n + 1 :]
        if (j == i + 1) == adjacent and tokens[i].lower() != tokens[j].lower()
    ]
    for i, j in rng.sample(pairs, min(1, len(pairs))):
        out = tokens[:]
        out[i], out[j] = tokens[j], tokens[i]
        if i == 0:  # keep the sentence case where it was
            out[i], out[j] = out[i].capitalize(), out[j].lower()
        yield _join(out)


def near(text: str, rng: random.Random) -> str | None:
    """One small edit: a word added, a function word dropped, or a synonym swapped in."""
    tokens = _tokens(text)
    words = [t.lower() for t in tokens]
    synonyms = [(a, b) for a, b in SYNONYMS if a in words or b in words]
    choice = rng.choice(("add", "drop", "synonym") if synonyms else ("add", "drop"))
    if choice == "synonym":
        a, b = rng.choice(synonyms)
        return _join(
            [b if w == a else a if w == b else t for t, w in zip(tokens, words, strict=True)]
        )
    if choice == "drop":
        droppable = [i for i, w in enumerate(words) if w in ("the", "a", "do", "i", "my", "to")]
        if not droppable:
            return None
        i = rng.choice(droppable)
        return _join(tokens[:i] + tokens[i + 1 :])
    i = rng.randrange(1, max(len(tokens) - 1, 2))
    return _join([*tokens[:i], rng.choice(EXTRA_WORDS), *tokens[i:]])


def framed(frames: tuple[tuple[str, tuple[str, ...]], ...], kind: str) -> Iterator[dict[str, str]]:
    """Every frame filled both ways with each pair of its fillers; first half tune."""
    for index, (text, fillers) in enumerate(frames):
        split = "tune" if index < (len(frames) + 1) // 2 else "heldout"
        for n, x in enumerate(fillers):
            for y in fillers[n + 1 :]:
                a, b = text.format(x=x, y=y), text.format(x=y, y=x)
                yield {
                    "a": a,
                    "b": b,
                    "kind": kind,
                    "template": f"{kind}-t{index:02d}",
                    "split": split,
                }


def questions() -> list[tuple[str, str, str]]:
    """``(text, template, split)`` of the project's questions, from both pair files."""
    out: dict[str, tuple[str, str]] = {}
    for line in (HERE / "cache_pairs_generated.jsonl").read_text().splitlines():
        pair = json.loads(line)
        if not pair["match"]:
            for side in ("a", "b"):
                out.setdefault(pair[side], (pair["template"], pair["split"]))
    for line in (HERE / "cache_pairs.jsonl").read_text().splitlines():
        pair = json.loads(line)
        for side in ("a", "b"):
            out.setdefault(pair[side], (pair["id"], "tune"))
    return [(text, template, split) for text, (template, split) in sorted(out.items())]


def kept_apart() -> set[str]:
    """Texts of every evaluation pair (normalised), never generated here."""
    texts: set[str] = set()
    for line in (HERE / "verifier" / "eval_external.jsonl").read_text().splitlines():
        pair = json.loads(line)
        texts |= {norm(pair["a"]), norm(pair["b"])}
    return texts


def pairs(rng: random.Random) -> Iterator[dict[str, object]]:
    rows: list[dict[str, str]] = []
    by_template: dict[str, list[tuple[str, str, str]]] = {}
    for question in questions():
        by_template.setdefault(question[1], []).append(question)
    drawn = [q for qs in by_template.values() for q in rng.sample(qs, min(PER_TEMPLATE, len(qs)))]
    for text, template, split in drawn:
        base = {"a": text, "template": f"wo-{template}", "split": split}
        for adjacent, kind in ((False, "wo_swap"), (True, "wo_swap_adjacent")):
            rows += [{**base, "b": b, "kind": kind} for b in swaps(text, rng, adjacent)]
        for rewrite in FRONTING:
            fronted = rewrite(text)
            if fronted is not None:
                rows.append({**base, "b": fronted, "kind": "wo_front"})
    rows += framed(RELATIONS, "wo_sides")
    rows += framed(MODIFIERS, "wo_modifiers")
    for row in rows[:]:
        if row["kind"] != "wo_front" and rng.random() < 0.5:
            edited = near(row["b"], rng)
            if edited is not None:
                rows.append({**row, "b": edited, "kind": "wo_near", "from": row["kind"]})
    for n, row in enumerate(rows):
        yield {"id": f"wo-{n:05d}", **row, "match": row["kind"] == "wo_front"}


def main() -> None:
    apart, seen, out = kept_apart(), set(), []
    for pair in pairs(random.Random(28)):
        key = (pair["a"], pair["b"])
        if pair["a"] == pair["b"] or key in seen or {norm(str(t)) for t in key} & apart:
            continue
        seen.add(key)
        out.append(json.dumps({**pair, "source": "project"}) + "\n")
    OUT.write_text("".join(out))
    print(f"{len(out)} pairs -> {OUT}")


if __name__ == "__main__":
    main()
