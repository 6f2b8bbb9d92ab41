"""Detection quality of the deterministic recognizers on data/guardrails/eval.jsonl.

    python -m bench.experiments.guardrails_quality

The set: 70 sentences, each carrying a value published as an example in a public
document (Stripe's and Braintree's test cards, the SWIFT IBAN Registry's examples, the
RFC 2606/3696 e-mail forms, NANP 555-01xx and Ofcom's drama numbers, the RFC 5737/3849
documentation addresses, the providers' documented key formats with AWS's example keys),
in sentences written here; and 26 benign look-alikes (versions, S3/EC2/EKS, ISBNs,
order ids, sums in word problems, hex, UUIDs, times) that should flag nothing. It is
small and its values are well-formed by construction: recall on it says each format is
read, not how often real text writes a value some other way. Precision and recall per
type (exact value match), and the share of benign sentences with any value flagged.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from gateway.guardrails.recognizers import find

DATA = Path(__file__).resolve().parents[2] / "data" / "guardrails" / "eval.jsonl"


def main() -> None:
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    tp: Counter[str] = Counter()
    fp: Counter[str] = Counter()
    fn: Counter[str] = Counter()
    benign = flagged = 0
    misses: list[str] = []
    for row in rows:
        want = {(v["type"], v["value"]) for v in row["values"]}
        got = {(f.kind, f.value) for f in find(row["text"])}
        for kind, _ in want & got:
            tp[kind] += 1
        for kind, value in got - want:
            fp[kind] += 1
            misses.append(f"  false {kind}: {value!r} in {row['text']!r}")
        for kind, value in want - got:
            fn[kind] += 1
            misses.append(f"  missed {kind}: {value!r} in {row['text']!r}")
        if not want:
            benign += 1
            flagged += bool(got)
    print(f"{'type':12s} {'n':>3s} {'precision':>9s} {'recall':>7s}")
    for kind in sorted(set(tp) | set(fp) | set(fn)):
        n = tp[kind] + fn[kind]
        precision = tp[kind] / (tp[kind] + fp[kind]) if tp[kind] + fp[kind] else float("nan")
        recall = tp[kind] / n if n else float("nan")
        print(f"{kind:12s} {n:3d} {precision:9.3f} {recall:7.3f}")
    total_tp, total_fp, total_fn = sum(tp.values()), sum(fp.values()), sum(fn.values())
    print(
        f"{'all':12s} {total_tp + total_fn:3d} {total_tp / (total_tp + total_fp):9.3f} "
        f"{total_tp / (total_tp + total_fn):7.3f}"
    )
    print(f"benign look-alikes flagged: {flagged} of {benign}")
    print("\n".join(misses))


if __name__ == "__main__":
    main()
