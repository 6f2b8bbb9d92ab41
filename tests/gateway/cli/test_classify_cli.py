"""``tiergate classify`` / ``train-classifier`` / ``eval-classifier`` as a user runs them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from gateway.settings import load_effective_config
from routers.classifier import ComplexityModel
from routers.objective import choose
from routers.tier_costs import expected_costs
from tests.support import PYTHON, REPO
from tiergate_testing.gateways import subprocess_env

TIERS = {"small", "medium", "large"}
SESSION = {"session", "turn", "moved", "reason"}  # routing.sessions: each row's session


def tiergate(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "gateway", *args],
        cwd=REPO,
        env=subprocess_env(TIERGATE_LOG_LEVEL="warning"),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


def tier_at(lam: float, prompt_chars: int, quality: dict[str, float], among: list[str]) -> str:
    """The shipped objective's tier for a request at ``lam``: best quality - λ · cost share
    among the tiers of the objective's hull segment."""
    config = load_effective_config(REPO / "config" / "gateway.yaml")
    objective = config.routing.objective
    assert objective is not None
    cost = np.asarray([expected_costs(config, objective, prompt_chars)])
    tiers = list(config.tiers)
    allowed = [tiers.index(t) for t in among]
    return tiers[int(choose(np.asarray([[quality[t] for t in tiers]]), cost, lam, allowed)[0])]


@pytest.mark.slow
def test_classify_contract_prompt_and_messages_in_order(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "prompt": "hi"},
        {
            "id": 2,
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "Prove that sqrt(2) is irrational."},
            ],
        },
        {"id": "c", "prompt": "Write a Python function that merges k sorted linked lists."},
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    done = tiergate("classify", str(source), "-o", str(tmp_path / "out.jsonl"))
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [o["id"] for o in out] == ["a", 2, "c"]
    chars = [len(rows[0]["prompt"]), len("be brief") + len(rows[1]["messages"][1]["content"])]
    chars.append(len(rows[2]["prompt"]))
    for line, n in zip(out, chars, strict=True):
        assert set(line) == {"id", "score", "tier", "quality", "lambda", "among"} | SESSION
        assert line["turn"] == 1 and not line["moved"]  # three tasks: three sessions
        assert 0.0 <= line["score"] <= 1.0
        assert set(line["quality"]) == TIERS and all(0 < q < 1 for q in line["quality"].values())
        # three requests, fewer than min_samples: the reference traffic's λ, as in the gateway
        assert line["lambda"] > 0 and line["lambda"] == out[0]["lambda"]
        assert line["among"] == out[0]["among"] and set(line["among"]) <= TIERS
        assert line["tier"] == tier_at(line["lambda"], n, line["quality"], line["among"])
    # stdin → stdout gives the same scores
    piped = tiergate("classify", stdin=source.read_text())
    assert [json.loads(x) for x in piped.stdout.splitlines()] == out


# Requests no benchmark holds: open-ended expert work and chit-chat (issue 15's probe).
EXPERT = [
    (
        "Implement a lock-free multi-producer multi-consumer queue in C++ with std::atomic, and"
        " justify every memory_order you use (acquire, release, seq_cst), including how you "
        "avoid the ABA problem."
    ),
    (
        "Prove that every continuous function on a closed bounded interval [a, b] is uniformly "
        "continuous, using the epsilon-delta definition and the Bolzano-Weierstrass theorem."
    ),
    (
        "Design a globally distributed, strongly consistent key-value store: the replication "
        "protocol (Raft or Paxos), handling network partitions and leader failover, and the "
        "latency versus consistency trade-offs across regions."
    ),
    (
        "Write the front end of a compiler for a small C-like language: a lexer, a recursive-"
        "descent parser that builds an AST, and a type checker with scoped symbol tables, with "
        "error messages that carry line numbers."
    ),
    (
        "Derive the Black-Scholes partial differential equation from a self-financing hedging "
        "argument using Ito's lemma, and state every assumption you rely on."
    ),
    (
        "Give an O(n log n) divide-and-conquer algorithm for the closest pair of points in the "
        "plane, prove it correct, and solve its recurrence."
    ),
    (
        "Compare the key schedules of TLS 1.3 and TLS 1.2: walk through the HKDF stages, the "
        "replay risks of 0-RTT data, and what forward secrecy each guarantees."
    ),
    (
        "For a Bayesian hierarchical model with partial pooling, derive the full conditional "
        "distributions of the group means and the hyperparameters for a Gibbs sampler, and "
        "explain which convergence diagnostics you would check."
    ),
    (
        "Write a CUDA kernel for tiled matrix multiplication with shared memory, explain bank "
        "conflicts and occupancy, and estimate its arithmetic intensity on an A100."
    ),
    (
        "Prove in Lean 4 that reversing a list twice gives back the original list, and explain "
        "each tactic you use."
    ),
]
TRIVIAL = [
    "hi",
    "What is 2 + 2?",
    "Say hello in Spanish.",
    "Thanks!",
    "What colour is the sky on a clear day?",
    "Translate 'cat' into French.",
    "How many days are in a week?",
    "Spell the word apple.",
    "Good morning!",
    "Is ice cold? Answer yes or no.",
]


def classify_probes() -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    stdin = "".join(
        json.dumps({"id": f"{kind}{i}", "prompt": p}) + "\n"
        for kind, prompts in (("x", EXPERT), ("t", TRIVIAL))
        for i, p in enumerate(prompts)
    )
    done = tiergate("classify", stdin=stdin)
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    return [o for o in out if o["id"].startswith("x")], [o for o in out if o["id"].startswith("t")]


@pytest.mark.slow
def test_probes_under_the_shipped_objective_never_put_expert_below_trivial() -> None:
    """The twenty prompts as the traffic (config/gateway.yaml's objective)."""
    expert, trivial = classify_probes()
    # every expert prompt still scores above every trivial one (the complexity score)
    assert min(o["score"] for o in expert) > max(o["score"] for o in trivial)
    # the reference traffic's hull segment under {quality: 0.95} is medium-large
    assert {o["tier"] for o in trivial} <= {"medium"}
    assert [o["tier"] for o in expert].count("large") >= 8
    assert all(o["tier"] != "small" for o in expert)


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="the small tier is off {quality: 0.95}'s segment of the reference traffic's "
    "predicted hull (medium-large), so trivial requests go to medium: on the shipped tiers "
    "SmolLM2-135M finishes 55 % of the live bench's held-out chit-chat, the 0.5B model all "
    "(docs/classifier.md)",
)
def test_trivial_requests_go_to_the_smallest_tier_under_the_shipped_objective() -> None:
    _, trivial = classify_probes()
    assert [o["tier"] for o in trivial] == ["small"] * len(TRIVIAL)


@pytest.mark.slow
def test_expert_requests_reach_the_largest_tier_under_the_shipped_objective() -> None:
    expert, _ = classify_probes()
    assert [o["tier"] for o in expert] == ["large"] * len(EXPERT)


@pytest.mark.slow
def test_classify_reports_bad_lines_and_keeps_going() -> None:
    stdin = '{"id": 1, "prompt": "ok"}\nnot json\n{"prompt": "no id"}\n{"id": 4, "messages": 3}\n'
    done = tiergate("classify", stdin=stdin)
    assert done.returncode == 1
    assert [json.loads(x)["id"] for x in done.stdout.splitlines()] == [1]
    assert "line 2: invalid JSON" in done.stderr
    assert "line 3: needs an object with 'id'" in done.stderr
    assert "line 4: needs 'prompt'" in done.stderr


@pytest.mark.slow
def test_train_on_operator_file_then_classify_and_eval_with_it(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    records = []
    for i in range(40):
        hard = i % 2 == 1
        prompt = (
            f"Derive and prove the asymptotic bound of recurrence T(n)=2T(n/2)+n log n, case {i}"
            if hard
            else f"Say hello to person number {i}"
        )
        records.append(
            {
                "prompt": prompt,
                "small_correct": int(not hard or rng.random() < 0.2),
                "large_correct": 1,
            }
        )
    data = tmp_path / "traffic.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    model_a, model_b = tmp_path / "a.npz", tmp_path / "b.npz"
    for out in (model_a, model_b):
        done = tiergate("train-classifier", "--data", str(data), "--out", str(out), "--seed", "3")
        assert done.returncode == 0, done.stderr
    assert model_a.read_bytes() == model_b.read_bytes()  # same seed, same bytes
    assert ComplexityModel.load(model_a).info["examples"] == 40
    source = tmp_path / "in.jsonl"
    source.write_text(
        json.dumps({"id": "h", "prompt": "Derive and prove the bound of T(n)=3T(n/3)+n"})
        + "\n"
        + json.dumps({"id": "e", "prompt": "Say hello to Ann"})
        + "\n"
    )
    done = tiergate("classify", str(source), "--model", str(model_a))
    scores = {json.loads(x)["id"]: json.loads(x)["score"] for x in done.stdout.splitlines()}
    assert scores["h"] > scores["e"]
    table = tiergate("eval-classifier", "--model", str(model_a), "--data", str(data))
    assert table.returncode == 0, table.stderr
    assert "traffic.jsonl" in table.stdout and "APGR" in table.stdout


def test_train_refuses_a_bad_operator_file(tmp_path: Path) -> None:
    data = tmp_path / "bad.csv"
    data.write_text("prompt\nhello\n")
    done = tiergate("train-classifier", "--data", str(data), "--out", str(tmp_path / "m.npz"))
    assert done.returncode == 2
    assert "needs 'label'" in done.stderr
    assert not (tmp_path / "m.npz").exists()
