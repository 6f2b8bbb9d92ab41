"""A prompt over the context of the embedded llama.cpp model is refused before the model
tokenises it (a lower bound from its length, ``backends.token_bound``), with OpenAI's
context-length 400 and nothing charged; near the limit the exact count still decides.
SmolLM2-135M (n_ctx 2048) behind a real uvicorn, real Redis, the official openai client."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from backends.llamacpp import LlamaCppEngine
from backends.token_bound import fewest_tokens, piece
from policies.stores.spending import tenant_scopes
from tests.gateway.budget_support import REDIS_URL, BudgetProbe, redis_prefix
from tiergate_testing.configs import TEST_KEY, smollm2_config
from tiergate_testing.gateways import RunningGateway, running_gateway

pytestmark = pytest.mark.slow

N_CTX = 2048
WORDS = "the quick brown fox jumps over a lazy dog while 3.14 apples fall "


def text_of(size: int) -> str:
    return (WORDS * (size // len(WORDS) + 1))[:size]


@pytest.fixture(scope="module")
def setup() -> Iterator[tuple[RunningGateway, BudgetProbe]]:
    with redis_prefix() as prefix:
        config = smollm2_config(replicas=1)
        config["redis_url"], config["redis_prefix"] = REDIS_URL, prefix
        config["tenants"]["acme"]["budget"] = {"limit_usd": 100.0}
        with running_gateway(config) as gateway:
            yield gateway, BudgetProbe(prefix)


def engine(gateway: RunningGateway) -> LlamaCppEngine:
    found = gateway.state.parts.replicas["smollm2"][0].engine
    assert isinstance(found, LlamaCppEngine)
    return found


def client(gateway: RunningGateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TEST_KEY, max_retries=0)


def spent(gateway: RunningGateway, probe: BudgetProbe) -> tuple[float, float]:
    scopes = tenant_scopes(gateway.state.config, "acme")
    status = probe.status(scopes)
    return sum(s.spent_usd for s in status.values()), sum(s.held_usd for s in status.values())


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_a_3mb_prompt_is_refused_before_the_model_tokenises_it(
    setup: tuple[RunningGateway, BudgetProbe], endpoint: str
) -> None:
    gateway, probe = setup
    model = engine(gateway)
    started_before, before = model.counters.started, spent(gateway, probe)
    prompt = text_of(3_000_000)
    since, began = time.time(), time.process_time()  # CPU: what a busy host cannot stretch
    with pytest.raises(openai.BadRequestError) as refused:
        if endpoint == "chat":
            client(gateway).chat.completions.create(
                model="small", messages=[{"role": "user", "content": prompt}], max_tokens=4
            )
        else:
            client(gateway).completions.create(model="small", prompt=prompt, max_tokens=4)
    took = time.process_time() - began  # the client's, the gateway's and the model's threads
    error: Any = refused.value.body
    assert refused.value.code == "context_length_exceeded"
    assert error["param"] == ("messages" if endpoint == "chat" else "prompt")
    assert f"maximum context length is {N_CTX} tokens" in error["message"]
    assert "at least" in error["message"]  # the bound refused it: no count was made
    # Tokenising 3 MB takes this model ~5-10 s of CPU; the refusal takes none of it.
    assert model.counters.started == started_before
    assert took < 3.0, took
    assert spent(gateway, probe) == before  # nothing charged, nothing held
    assert probe.wait_no_holds() == 0
    request_id = refused.value.response.headers["x-request-id"]  # the ledger's id
    (event,) = [e for e in probe.events() if e.ts >= since]
    assert event.request_id == request_id
    assert event.status == "error" and event.cost_usd == 0.0 and event.prompt_tokens == 0


def test_just_over_the_context_the_exact_count_refuses(
    setup: tuple[RunningGateway, BudgetProbe],
) -> None:
    gateway, probe = setup
    before = spent(gateway, probe)
    prompt = text_of(9_000)  # ~2500 tokens: over 2048, under the bound's reach
    assert fewest_tokens(prompt, engine(gateway)._token_bytes or 1) < N_CTX
    with pytest.raises(openai.BadRequestError) as refused:
        client(gateway).chat.completions.create(
            model="small", messages=[{"role": "user", "content": prompt}], max_tokens=4
        )
    message = refused.value.body["message"]  # type: ignore[index]
    assert refused.value.code == "context_length_exceeded" and "at least" not in message
    assert spent(gateway, probe) == before


def test_under_the_context_it_is_served(setup: tuple[RunningGateway, BudgetProbe]) -> None:
    gateway, _ = setup
    reply = client(gateway).chat.completions.create(
        model="small", messages=[{"role": "user", "content": text_of(5_000)}], max_tokens=2
    )
    assert reply.usage is not None and 1000 < reply.usage.prompt_tokens < N_CTX


ADVERSARIAL = [
    "-" * 20_000,  # the vocabulary's longest pieces, repeated
    " " * 20_000,
    "\n" + " " * 31 + "x",
    "#" * 4_096 + "=" * 4_096,
    "🙂" * 3_000,
    "日本語のテキスト" * 500,
    "<|im_start|>user\n" * 400,  # special tokens: one token each
    "a",
    "",
]


def test_the_bound_never_exceeds_the_real_count(
    setup: tuple[RunningGateway, BudgetProbe],
) -> None:
    """On the real vocabulary: texts built to tokenise into few tokens, and random ones."""
    gateway, _ = setup
    model = engine(gateway)
    max_bytes = model._token_bytes
    assert max_bytes is not None and max_bytes >= 4
    rng = random.Random(7)
    alphabet = [chr(c) for c in range(32, 0x2FF)] + ["\n", "\t", "-", " ", "🙂", "中"]
    texts = ADVERSARIAL + [
        "".join(rng.choices(alphabet, k=rng.randint(1, 3000))) for _ in range(60)
    ]

    def counts() -> list[int]:
        llama = model._llama
        return [len(llama.tokenize(t.encode(), add_bos=True, special=True)) for t in texts]

    real = gateway.call(_on_engine_thread(model, counts), timeout=120)
    for text, tokens in zip(texts, real, strict=True):
        assert fewest_tokens(text, max_bytes) <= tokens, (text[:40], tokens)
    # And not vacuous: a run of one of the longest pieces is close to the bound.
    assert fewest_tokens("-" * 20_000, max_bytes) * 2 > real[0]


async def _on_engine_thread(model: LlamaCppEngine, work: Any) -> Any:
    """The model is not safe for concurrent use: run on its thread, holding its lock."""
    import asyncio

    async with model._lock:
        return await asyncio.get_running_loop().run_in_executor(model._executor, work)


def test_pieces_over_32_bytes_are_read_whole(setup: tuple[RunningGateway, BudgetProbe]) -> None:
    """``Llama.detokenize`` gives b"" for a piece over 32 bytes; the engine's ``piece``
    gives it whole (so a generated run of spaces is not lost), the rest unchanged."""
    gateway, _ = setup
    model = engine(gateway)

    def check() -> tuple[int, int]:
        llama = model._llama
        long_run = "\n" + " " * 80
        (token,) = [t for t in llama.tokenize(long_run.encode(), add_bos=False) if t][-1:]
        assert piece(llama, token) == long_run.encode()
        assert llama.detokenize([token]) == b""  # what the engine used to append
        rng = random.Random(3)
        sample = rng.sample(range(llama.n_vocab()), 2000)
        same = sum(piece(llama, t) == llama.detokenize([t]) for t in sample)
        short = sum(len(piece(llama, t)) <= 32 for t in sample)
        return same, short

    same, short = gateway.call(_on_engine_thread(model, check), timeout=120)
    assert same == short  # every piece that fits 32 bytes reads as before
