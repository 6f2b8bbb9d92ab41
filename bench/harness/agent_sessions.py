"""Synthetic agent sessions: a system prompt, a task, then tool rounds on a growing context.

Each session is what an agent sends turn after turn: the whole conversation every time
(system prompt, tools, the task, then per round the assistant's tool call and the tool's
result). Tasks are held-out benchmark prompts (``data/routing``: GSM8K, MMLU, MBPP,
OpenBookQA, Winogrande, evaluation-only sets; a replay tunes nothing), a fixed sample;
tool calls and results are generated from a seeded RNG, so every run replays the same
conversations, whatever the model answered.

    sessions(40, rounds=5) -> [[turn 1 messages, turn 2 messages, ...], ...]
"""

from __future__ import annotations

import random
from typing import Any

SYSTEM = (
    "You are a software agent working in a sandboxed repository on behalf of a user. "
    "You can read files, run shell commands and write files with the tools provided. "
    "Work step by step: inspect what you need, run the relevant commands, check results "
    "before you claim success, and keep changes minimal. Never invent file contents: read "
    "them. When a command fails, read its output and fix the cause rather than retrying "
    "blindly. When the task is a question, answer it precisely; when it asks for code, "
    "write it to a file and run it. Report briefly what you did and what remains.\n"
    "Conventions: Python 3.11, tests under tests/, run them with pytest -q; format with "
    "ruff; keep functions short and documented; do not add dependencies."
)
# A terse agent prompt: with the long one above the shipped model puts every agent turn
# on the large tier (its length prior reads the whole conversation), so nothing can switch.
SHORT_SYSTEM = (
    "You are a coding agent. Use the tools: read files, run commands, write files. Be brief."
)
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": about,
            "parameters": {
                "type": "object",
                "properties": {arg: {"type": "string"}},
                "required": [arg],
            },
        },
    }
    for name, about, arg in (
        ("read_file", "Read a file of the repository.", "path"),
        ("run_shell", "Run a shell command in the repository and return its output.", "cmd"),
        ("write_file", "Write a file of the repository (whole contents).", "content"),
    )
]
WORDS = (
    "parser token value config cache index record result error buffer stream table "
    "module import return count total limit window check update merge split format"
).split()
CALLS = (
    ("run_shell", "cmd", "ls -R src tests"),
    ("read_file", "path", "src/solution.py"),
    ("run_shell", "cmd", "pytest -q tests/test_solution.py"),
    ("write_file", "content", "def solve(data):\n    return sorted(data)\n"),
    ("run_shell", "cmd", "pytest -q"),
)


def tasks(n: int, seed: int = 31) -> list[str]:
    """``n`` held-out benchmark prompts, spread over the benchmarks (a fixed sample)."""
    from routers.training.datasets import shared_splits
    from routers.training.tier_sets import chars

    splits = shared_splits()
    by_benchmark: dict[str, list[str]] = {}
    for example in [*splits.golden_test, *splits.pool_test]:
        if 60 <= chars(example) <= 1500:
            by_benchmark.setdefault(example.benchmark, []).append(example.text)
    rng = random.Random(seed)
    names = sorted(by_benchmark)
    picked: list[str] = []
    while len(picked) < n:
        for name in names:
            pool = sorted(set(by_benchmark[name]) - set(picked))
            if pool and len(picked) < n:
                picked.append(rng.choice(pool))
    return picked


def _result(rng: random.Random, call: str, lines: int) -> str:
    """A tool's output: file listings, source, or test logs, ``lines`` long."""
    out = []
    for i in range(lines):
        a, b, c = rng.choice(WORDS), rng.choice(WORDS), rng.choice(WORDS)
        if call == "read_file":
            out.append(f"def {a}_{b}({c}):  # line {i}\n    return {c}.{a}({b}={i})")
        elif i % 3 == 0:
            out.append(
                f"tests/test_{a}.py::test_{b}_{c} {'PASSED' if rng.random() > 0.2 else 'FAILED'}"
            )
        else:
            out.append(f"src/{a}/{b}_{c}.py  {rng.randint(100, 9999)} bytes")
    return "\n".join(out)


def session(task: str, rounds: int, seed: int, system: str = SYSTEM) -> list[list[dict[str, Any]]]:
    """One session's turns: turn k carries the task and k - 1 tool rounds."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": task},
    ]
    turns = [list(messages)]
    for i in range(rounds):
        name, arg, value = CALLS[i % len(CALLS)]
        call_id = f"call_{seed}_{i}"
        arguments = '{"' + arg + '": ' + repr(value).replace("'", '"') + "}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": arguments},
                    }
                ],
            }
        )
        content = _result(rng, name, rng.randint(8, 16))
        messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        turns.append(list(messages))
    return turns


def sessions(
    n: int, rounds: int = 5, seed: int = 31, system: str = SYSTEM
) -> list[list[list[dict[str, Any]]]]:
    return [session(task, rounds, seed + i, system) for i, task in enumerate(tasks(n, seed))]
