"""Grades the live bench's records against their gold answers.

- fact: a gold alias (lowercased, articles and punctuation dropped) is in the answer;
- chat: the reply is non-empty, ended by itself (``stop``) and does not loop (no 4-word run
  three times);
- task: arithmetic: the gold number is among the answer's numbers; "which is larger": the
  first number is the gold; a word: the gold word is in the answer;
- math: the number after the last "answer" (else the last number) equals the gold;
- code: the answer's code (the prompt's imports added) passes the problem's tests in a fresh
  Python process (10 CPU-s, 1 GiB).

Usage: ``python -m bench.live.grade --set heldout`` writes ``bench/live/grades/<set>.json``:
``{id: {tier: 0 | 1}}`` for every record (a failed request counts as wrong). ``--dir D``: the
records in ``D/records/``, the grades to ``D/grades/``.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import string
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.live.sets import load

HERE = Path(__file__).resolve().parent

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalise(text: str) -> str:
    text = _ARTICLES.sub(" ", text.lower().translate(_PUNCT))
    return " ".join(text.split())


def numbers(text: str) -> list[float]:
    out = []
    for match in _NUMBER.findall(text):
        try:
            out.append(float(match.replace(",", "")))
        except ValueError:
            continue
    return out


def loops(text: str) -> bool:
    words = text.lower().split()
    seen: dict[tuple[str, ...], int] = {}
    for i in range(len(words) - 3):
        gram = tuple(words[i : i + 4])
        seen[gram] = seen.get(gram, 0) + 1
        if seen[gram] >= 3:
            return True
    return False


def grade_fact(answer: str, gold: list[str]) -> bool:
    said = f" {normalise(answer)} "
    return any(f" {normalise(alias)} " in said for alias in gold if normalise(alias))


def grade_chat(answer: str, finish: str) -> bool:
    return bool(answer.strip()) and finish == "stop" and not loops(answer)


def grade_task(prompt: str, answer: str, gold: list[str]) -> bool:
    target = gold[0]
    if re.fullmatch(r"-?\d+(?:\.\d+)?", target):
        found = numbers(answer)
        if prompt.startswith("Which is larger"):
            return bool(found) and found[0] == float(target)
        return float(target) in found
    return re.search(rf"\b{re.escape(target.lower())}\b", answer.lower()) is not None


def final_number(answer: str) -> float | None:
    """The first number after the last "answer", else the answer's last number."""
    cut = answer.lower().rfind("answer")
    if cut >= 0:
        after = numbers(answer[cut:])
        if after:
            return after[0]
    found = numbers(answer)
    return found[-1] if found else None


def grade_math(answer: str, gold: list[str]) -> bool:
    got = final_number(answer)
    return got is not None and abs(got - float(gold[0])) < 1e-6


def extract_code(answer: str) -> str:
    blocks = re.findall(r"```(?:python|py)?\s*\n(.*?)```", answer, flags=re.DOTALL)
    if blocks:
        return max(blocks, key=len)
    opened = re.search(r"```(?:python|py)?\s*\n(.*)", answer, flags=re.DOTALL)  # cut off
    return opened.group(1) if opened else answer


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    resource.setrlimit(resource.RLIMIT_CPU, (10, 10))


def grade_code(item: dict[str, Any], answer: str) -> bool:
    code = extract_code(answer)
    imports = [
        line for line in item["code_prompt"].splitlines() if line.startswith(("import ", "from "))
    ]
    program = "\n".join([*imports, code, item["gold"][0], f"check({item['entry_point']})", ""])
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "candidate.py"
        path.write_text(program)
        try:
            done = subprocess.run(
                [sys.executable, "-I", str(path)],
                cwd=folder,
                capture_output=True,
                timeout=10,
                preexec_fn=_limits,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return False
    return done.returncode == 0


def grade(item: dict[str, Any], row: dict[str, Any]) -> bool:
    if "error" in row:
        return False
    answer = row["answer"]
    kind = item["kind"]
    if kind == "fact":
        return grade_fact(answer, item["gold"])
    if kind == "chat":
        return grade_chat(answer, row["finish_reason"])
    if kind == "task":
        return grade_task(item["prompt"], answer, item["gold"])
    if kind == "math":
        return grade_math(answer, item["gold"])
    return grade_code(item, answer)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--set", default="heldout", choices=["heldout", "fit"])
    parser.add_argument("--dir", type=Path, default=HERE, help="records/ and grades/ under it")
    args = parser.parse_args()
    items = {item["id"]: item for item in load(args.set)}
    grades: dict[str, dict[str, int]] = {}
    for path in sorted((args.dir / "records").glob(f"{args.set}-*.jsonl")):
        for line in path.read_text().splitlines():
            if not line:
                continue
            row = json.loads(line)
            grades.setdefault(row["id"], {})[row["tier"]] = int(grade(items[row["id"]], row))
    (args.dir / "grades").mkdir(exist_ok=True)
    out = args.dir / "grades" / f"{args.set}.json"
    out.write_text(json.dumps(grades, indent=1, sort_keys=True) + "\n")
    for tier in ("small", "medium", "large"):
        marks = [g[tier] for g in grades.values() if tier in g]
        if marks:
            print(f"{tier}: {sum(marks)}/{len(marks)} = {sum(marks) / len(marks):.3f}")


if __name__ == "__main__":
    main()
