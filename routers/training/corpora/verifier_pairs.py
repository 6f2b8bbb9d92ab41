"""Build the learned verifier's vendored pairs from public labelled corpora.

    python -m routers.training.corpora.verifier_pairs RAW_DIR

RAW_DIR holds the files as published (see data/README.md, "Verifier pairs"):

    brmson/data/para/msr/msr-para-{train,val,test}.tsv          MSRP
    brmson/data/sts/sick2014/SICK_{train,trial,test_annotated}.txt SICK
    brmson/data/sts/semeval-sts/{2012..2015}/*.tsv               STS 2012-2015
    brmson/data/sts/semeval-sts/2016/question-question.test.tsv  STS 2016 QQ (evaluation only)
    llmft/dev_and_test.tsv                                       PAWS-QQP (evaluation only)
    curai/mqp.csv                                                medical pairs (evaluation only)

Writes ``data/verifier/train_pairs.jsonl`` (``split``: ``train`` or ``calib``) and
``data/verifier/eval_external.jsonl`` (evaluation only: never trained or tuned on). Every
training pair that shares a text (normalised: lower case, letters and digits only) with
an evaluation pair, or with a held-out project pair, is dropped and counted. The split
of the training sources is by the pair's first text (a hash), so no text is on both
sides. Deterministic.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import json
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parents[3] / "data"  # the checkout's data/ folder
OUT = HERE / "verifier"
CALIB_SHARE = 0.4  # was 0.2: a larger calibration split (issue 22, round 2)
Pair = dict[str, object]


def norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def detok(text: str) -> str:
    """PAWS-QQP's tokenised text back to how people type it ("ca n't" -> "can't")."""
    text = re.sub(r" (n't|'s|'re|'m|'ve|'ll|'d)\b", r"\1", text)
    text = re.sub(r" ([?.,!:;)])", r"\1", text)
    return re.sub(r"\( ", "(", text).replace("ca n't", "can't").replace("wo n't", "won't")


def _tsv(path: Path) -> Iterator[list[str]]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        yield from csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)


def msrp(raw: Path) -> Iterator[Pair]:
    for part in ("train", "val", "test"):
        for i, row in enumerate(_tsv(raw / f"brmson/data/para/msr/msr-para-{part}.tsv")):
            if i == 0 or len(row) < 5:
                continue
            yield {"a": row[3], "b": row[4], "match": row[0] == "1", "source": "msrp"}


def sick(raw: Path) -> Iterator[Pair]:
    """Paraphrase: entailment with relatedness >= 4.5 (near-equivalent); near-miss:
    contradiction, or neutral with relatedness >= 3 (related, another meaning)."""
    for part in ("train", "trial", "test_annotated"):
        for i, row in enumerate(_tsv(raw / f"brmson/data/sts/sick2014/SICK_{part}.txt")):
            if i == 0 or len(row) < 5:
                continue
            score, judgement = float(row[3]), row[4]
            if judgement == "ENTAILMENT" and score >= 4.5:
                yield {"a": row[1], "b": row[2], "match": True, "source": "sick"}
            elif judgement == "CONTRADICTION" or (judgement == "NEUTRAL" and score >= 3.0):
                yield {"a": row[1], "b": row[2], "match": False, "source": "sick"}


def sts(raw: Path) -> Iterator[Pair]:
    """STS 2012-2015: score >= 4.4 is a paraphrase, <= 3.0 a near-miss, between dropped."""
    root = raw / "brmson/data/sts/semeval-sts"
    for year in ("2012", "2013", "2014", "2015"):
        for path in sorted((root / year).glob("*.tsv")):
            for row in _tsv(path):
                if len(row) < 3 or not row[0].strip():
                    continue
                score = float(row[0])
                if score >= 4.4 or score <= 3.0:
                    yield {"a": row[1], "b": row[2], "match": score >= 4.4, "source": "sts"}


def paws_qqp(raw: Path) -> Iterator[Pair]:
    for i, row in enumerate(_tsv(raw / "llmft/dev_and_test.tsv")):
        if i == 0 or len(row) < 4:
            continue
        a, b = (detok(ast.literal_eval(x).decode()) for x in row[1:3])
        match = row[3] == "1"
        kind = "paws_qqp_para" if match else "paws_qqp_near"
        yield {"id": f"pawsqqp-{row[0]}", "a": a, "b": b, "match": match, "kind": kind}


def mqp(raw: Path) -> Iterator[Pair]:
    with (raw / "curai/mqp.csv").open(encoding="utf-8", newline="") as handle:
        for i, row in enumerate(csv.reader(handle)):
            match = row[3] == "1"
            kind = "mqp_para" if match else "mqp_near"
            yield {"id": f"mqp-{i:04d}", "a": row[1], "b": row[2], "match": match, "kind": kind}


def sts16_qq(raw: Path) -> Iterator[Pair]:
    """Scored pairs only: >= 4 the same question, <= 2 another one (the issue's cut)."""
    path = raw / "brmson/data/sts/semeval-sts/2016/question-question.test.tsv"
    for i, row in enumerate(_tsv(path)):
        if len(row) < 3 or not row[0].strip() or 2 < float(row[0]) < 4:
            continue
        match = float(row[0]) >= 4
        kind = "sts16qq_para" if match else "sts16qq_near"
        yield {"id": f"sts16qq-{i:04d}", "a": row[1], "b": row[2], "match": match, "kind": kind}


def project_heldout() -> set[str]:
    texts: set[str] = set()
    for line in (HERE / "cache_pairs_generated.jsonl").read_text().splitlines():
        pair = json.loads(line)
        if pair["split"] == "heldout":
            texts |= {norm(pair["a"]), norm(pair["b"])}
    return texts


def _split(text: str) -> str:
    digest = int(hashlib.sha256(norm(text).encode()).hexdigest()[:8], 16)
    return "calib" if digest / 0xFFFFFFFF < CALIB_SHARE else "train"


def main(raw: Path) -> None:
    evaluation = [*paws_qqp(raw), *mqp(raw), *sts16_qq(raw)]
    kept_out = {norm(str(p[k])) for p in evaluation for k in ("a", "b")}
    heldout = project_heldout()
    dropped: Counter[str] = Counter()
    seen: set[tuple[str, str]] = set()
    training: list[Pair] = []
    for pair in [*msrp(raw), *sick(raw), *sts(raw)]:
        a, b = norm(str(pair["a"])), norm(str(pair["b"]))
        source = str(pair["source"])
        if a in kept_out or b in kept_out:
            dropped[f"{source}: shares a text with the evaluation sets"] += 1
            continue
        if a in heldout or b in heldout:
            dropped[f"{source}: shares a text with the held-out project pairs"] += 1
            continue
        if not a or not b or (a, b) in seen or (b, a) in seen:
            dropped[f"{source}: duplicate or empty"] += 1
            continue
        seen.add((a, b))
        kind = f"{source}_{'para' if pair['match'] else 'near'}"
        training.append(
            {
                "id": f"{source}-{len(training):05d}",
                **pair,
                "kind": kind,
                "split": _split(str(pair["a"])),
            }
        )
    OUT.mkdir(exist_ok=True)
    with (OUT / "train_pairs.jsonl").open("w") as handle:
        for pair in training:
            handle.write(json.dumps(pair, ensure_ascii=False) + "\n")
    with (OUT / "eval_external.jsonl").open("w") as handle:
        for pair in evaluation:
            row = {**pair, "source": str(pair["kind"]).rsplit("_", 1)[0], "split": "eval"}
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"training pairs: {len(training)}", Counter(str(p["kind"]) for p in training))
    print("split:", Counter(str(p["split"]) for p in training))
    print(f"evaluation pairs: {len(evaluation)}", Counter(str(p["kind"]) for p in evaluation))
    print("dropped:", dict(dropped))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
