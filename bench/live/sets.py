"""The live bench's prompt sets: a held-out set and a FIT set, each with gold answers.

Mixed as traffic is (per set): one-line facts, chit-chat, short tasks, multi-step word
problems and code. The held-out set is only ever evaluated on; the FIT set (other splits or
other items of each source) is what per-tier quality may be fitted on.

| kind | held-out (`heldout.jsonl`) | FIT (`fit.jsonl`) | graded by |
|---|---|---|---|
| fact | 100 NQ-open dev | 100 NQ-open EfficientQA dev | a gold alias in the answer |
| chat | 40 greetings, small talk (written here) | 40 others | a finished, sane reply |
| task | 70 generated one-step tasks (seed 1) | 70 (seed 2) | the number or word |
| math | 60 GSM8K **test** questions | 60 GSM8K train | the final number |
| code | 40 HumanEval problems (even hash) | 40 others (odd hash) | the problem's tests |

Sources (fetched public repositories; only the selected items are written out):
NQ-open (google-research-datasets/natural-questions, CC BY-SA 3.0), GSM8K
(openai/grade-school-math, MIT), HumanEval (openai/human-eval, MIT).

Usage: ``python -m bench.live.sets --nq DIR --gsm8k DIR --humaneval FILE`` (the folders
holding ``NQ-open.dev.jsonl`` and ``NQ-open.efficientqa.dev.1.1.jsonl``, ``test.jsonl`` and
``train.jsonl``, and ``HumanEval.jsonl.gz``). Byte-identical for the same input.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"

# Generation caps per kind: enough to reach an answer, no more (2 cores).
MAX_TOKENS = {"fact": 24, "chat": 48, "task": 32, "math": 200, "code": 200}

FACT_SUFFIX = " Answer in a few words."
MATH_SUFFIX = "\nSolve it briefly, step by step, and end with 'Answer: <number>'."
CODE_PREFIX = "Complete this Python function. Reply with the whole function in one code block.\n\n"

CHAT_HELDOUT = [
    "Hi!",
    "Hello there",
    "Good morning!",
    "Hey, how are you?",
    "Thanks, that helped a lot.",
    "Good night!",
    "What's up?",
    "Nice to meet you.",
    "How is your day going?",
    "Thank you!",
    "Hi, can you hear me?",
    "Hello! Are you a bot?",
    "Have a great weekend!",
    "Bye for now.",
    "Good afternoon.",
    "I'm back.",
    "Cheers!",
    "Sorry, I was away for a minute.",
    "Happy Friday!",
    "Hey there, friend.",
    "Merry Christmas!",
    "Happy new year!",
    "You're awesome, thanks.",
    "Ok, got it.",
    "See you tomorrow.",
    "Hello again!",
    "Just saying hi.",
    "How are things?",
    "Morning!",
    "Can we chat for a bit?",
    "That's great news!",
    "I appreciate your help.",
    "Hey!",
    "Yo!",
    "Greetings.",
    "Thanks a million.",
    "Talk to you later.",
    "Hope you are well.",
    "Long time no see!",
    "Welcome back!",
]
CHAT_FIT = [
    "Hello!",
    "Hi there",
    "Good evening!",
    "Hey, what's new?",
    "Thanks so much.",
    "Sleep well!",
    "Howdy!",
    "Pleased to meet you.",
    "How was your weekend?",
    "Many thanks!",
    "Hi, are you there?",
    "Hello, who am I talking to?",
    "Enjoy your holiday!",
    "Goodbye.",
    "Good day to you.",
    "I'm here again.",
    "Thank you kindly.",
    "Sorry for the delay.",
    "Happy Monday!",
    "Hi pal.",
    "Happy birthday to me!",
    "Happy holidays!",
    "You are very helpful.",
    "Alright, understood.",
    "Catch you later.",
    "Hi once more!",
    "Just checking in.",
    "How's it going?",
    "Evening!",
    "Do you have a moment to talk?",
    "That's wonderful!",
    "Thanks for your patience.",
    "Heya!",
    "Sup?",
    "Salutations.",
    "Thanks a bunch.",
    "Until next time.",
    "Hope all is well.",
    "It's been a while!",
    "Good to see you!",
]

OPPOSITES = {
    "hot": "cold",
    "up": "down",
    "big": "small",
    "fast": "slow",
    "early": "late",
    "open": "closed",
    "light": "dark",
    "happy": "sad",
    "full": "empty",
    "old": "new",
    "wet": "dry",
    "hard": "soft",
    "high": "low",
    "long": "short",
    "rich": "poor",
    "strong": "weak",
    "thick": "thin",
    "loud": "quiet",
    "push": "pull",
    "win": "lose",
}
PLURALS = {
    "mouse": "mice",
    "child": "children",
    "tooth": "teeth",
    "foot": "feet",
    "goose": "geese",
    "man": "men",
    "woman": "women",
    "person": "people",
    "leaf": "leaves",
    "knife": "knives",
    "wolf": "wolves",
    "box": "boxes",
    "city": "cities",
    "baby": "babies",
    "cactus": "cacti",
    "ox": "oxen",
    "half": "halves",
    "potato": "potatoes",
    "bus": "buses",
    "fish": "fish",
}


def _task(rng: random.Random) -> tuple[str, list[str]]:
    """One short task with its gold answers (first: the canonical one)."""
    kind = rng.choice(["add", "sub", "mul", "minutes", "compare", "opposite", "plural", "days"])
    if kind == "add":
        a, b = rng.randint(11, 99), rng.randint(11, 99)
        return f"What is {a} + {b}?", [str(a + b)]
    if kind == "sub":
        a, b = rng.randint(50, 199), rng.randint(1, 49)
        return f"What is {a} - {b}?", [str(a - b)]
    if kind == "mul":
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        return f"What is {a} times {b}?", [str(a * b)]
    if kind == "minutes":
        hours = rng.randint(2, 9)
        return f"How many minutes are there in {hours} hours?", [str(hours * 60)]
    if kind == "days":
        weeks = rng.randint(2, 9)
        return f"How many days are there in {weeks} weeks?", [str(weeks * 7)]
    if kind == "compare":
        a, b = round(rng.uniform(0.1, 0.99), 2), round(rng.uniform(0.1, 0.99), 2)
        while a == b:
            b = round(rng.uniform(0.1, 0.99), 2)
        return f"Which is larger, {a} or {b}? Reply with the number.", [str(max(a, b))]
    if kind == "opposite":
        word = rng.choice(sorted(OPPOSITES))
        return f"What is the opposite of '{word}'? One word.", [OPPOSITES[word]]
    word = rng.choice(sorted(PLURALS))
    return f"What is the plural of '{word}'? One word.", [PLURALS[word]]


def _bucket(key: str) -> int:
    return hashlib.sha256(key.encode()).digest()[0]


def _pick(items: list[dict[str, Any]], count: int, seed: int) -> list[dict[str, Any]]:
    order = sorted(
        items, key=lambda item: hashlib.sha256(f"{seed}:{item['id']}".encode()).hexdigest()
    )
    return order[:count]


def _jsonl(path: Path) -> Iterable[dict[str, Any]]:
    opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as file:
        for line in file:
            if line.strip():
                yield json.loads(line)


def facts(path: Path, split: str, count: int, exclude: set[str]) -> list[dict[str, Any]]:
    rows = [
        {
            "id": f"nq-{split}-{i}",
            "kind": "fact",
            "source": f"NQ-open {split}",
            "prompt": row["question"][0].upper() + row["question"][1:] + "?" + FACT_SUFFIX,
            "gold": row["answer"],
        }
        for i, row in enumerate(_jsonl(path))
    ]
    return _pick([row for row in rows if row["prompt"] not in exclude], count, 39)


def math(path: Path, split: str, count: int) -> list[dict[str, Any]]:
    rows = [
        {
            "id": f"gsm8k-{split}-{i}",
            "kind": "math",
            "source": f"GSM8K {split}",
            "prompt": row["question"] + MATH_SUFFIX,
            "gold": [row["answer"].split("####")[-1].strip().replace(",", "")],
        }
        for i, row in enumerate(_jsonl(path))
    ]
    return _pick(rows, count, 39)


def code(path: Path, held_out: bool, count: int) -> list[dict[str, Any]]:
    rows = [
        {
            "id": row["task_id"],
            "kind": "code",
            "source": "HumanEval",
            "prompt": CODE_PREFIX + "```python\n" + row["prompt"] + "```",
            "gold": [row["test"]],
            "entry_point": row["entry_point"],
            "code_prompt": row["prompt"],
        }
        for row in _jsonl(path)
        if (_bucket(row["task_id"]) % 2 == 0) == held_out
    ]
    return _pick(rows, count, 39)


def chats(prompts: list[str], name: str) -> list[dict[str, Any]]:
    return [
        {"id": f"chat-{name}-{i}", "kind": "chat", "source": "written", "prompt": p, "gold": []}
        for i, p in enumerate(prompts)
    ]


def tasks(seed: int, count: int, name: str, exclude: set[str]) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    seen = set(exclude)
    out = []
    while len(out) < count:
        prompt, gold = _task(rng)
        if prompt in seen:
            continue
        seen.add(prompt)
        out.append(
            {
                "id": f"task-{name}-{len(out)}",
                "kind": "task",
                "source": "generated",
                "prompt": prompt,
                "gold": gold,
            }
        )
    return out


def build(nq: Path, gsm8k: Path, humaneval: Path) -> dict[str, list[dict[str, Any]]]:
    heldout = (
        facts(nq / "NQ-open.dev.jsonl", "dev", 100, set())
        + chats(CHAT_HELDOUT, "heldout")
        + tasks(1, 70, "heldout", set())
        + math(gsm8k / "test.jsonl", "test", 60)
        + code(humaneval, True, 40)
    )
    held_prompts = {row["prompt"] for row in heldout}
    fit = (
        facts(nq / "NQ-open.efficientqa.dev.1.1.jsonl", "efficientqa-dev", 100, held_prompts)
        + chats(CHAT_FIT, "fit")
        + tasks(2, 70, "fit", held_prompts)
        + math(gsm8k / "train.jsonl", "train", 60)
        + code(humaneval, False, 40)
    )
    assert not held_prompts & {row["prompt"] for row in fit}, "a prompt in both sets"
    for rows in (heldout, fit):
        for row in rows:
            row["max_tokens"] = MAX_TOKENS[row["kind"]]
    return {"heldout": heldout, "fit": fit}


def load(name: str) -> list[dict[str, Any]]:
    return list(_jsonl(DATA / f"{name}.jsonl"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nq", type=Path, required=True)
    parser.add_argument("--gsm8k", type=Path, required=True)
    parser.add_argument("--humaneval", type=Path, required=True)
    args = parser.parse_args()
    DATA.mkdir(exist_ok=True)
    for name, rows in build(args.nq, args.gsm8k, args.humaneval).items():
        with (DATA / f"{name}.jsonl").open("w", encoding="utf-8") as out:
            for row in rows:
                out.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
        mix: dict[str, int] = {}
        for row in rows:
            mix[row["kind"]] = mix.get(row["kind"], 0) + 1
        print(name, len(rows), mix)


if __name__ == "__main__":
    main()
