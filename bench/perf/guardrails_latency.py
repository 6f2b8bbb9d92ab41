"""What the guardrails cost on this CPU: the recognizers per prompt, the request's
screen, the passthrough (no ``guardrails:`` block), and the answer's window.

    python -m bench.perf.guardrails_latency [--rounds 5] [--n 2000]

- recognizers: every deterministic recognizer over short prompts (with and without
  values in them), µs per prompt; the issue's bar is 300 µs on one core;
- screen: ``gateway.guardrails.screen.screen`` on a chat request of 3 messages, with the
  example tenant's block (every type redacted) and with none (the passthrough: one dict
  lookup over the key's tenant);
- window: CPU per streamed chunk through ``guard_answer`` (4-character chunks, as
  tokens come), and how many chunks the window holds before the first is released: the
  time to first byte grows by that many inter-token gaps (48 or 64 characters ≈ 12 or 16
  tokens of English);
- NER (``--ner``, needs the ``guard-ner`` extra): Presidio + spaCy per prompt;
- TTFB (``--ttfb``): a gateway on loopback over the fake upstream streaming 4-character
  chunks 20 ms apart; time to the first content byte for a key without guardrails and
  for keys with a 48- and a 64-character window (medians of ``--requests``).

CPU time of this process (not wall time), medians and ranges over ``--rounds``; the
CPU is named in the output.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import AsyncIterator, Callable

from backends.base import Chunk, GenerationRequest, SamplingParams, Usage
from bench.harness.report import machine
from gateway.guardrails.answer import guard_answer
from gateway.guardrails.policy import compile_policy
from gateway.guardrails.recognizers import find
from gateway.guardrails.redactor import Redactor
from gateway.guardrails.screen import screen
from gateway.types import Ask
from policies.guardrails_spec import GuardrailsSpec
from policies.schema import GatewayConfig
from policies.tenants import KeyRing
from tiergate_testing.configs import TEST_KEY, fake_config

BENIGN = (
    "Can you help me write a polite note to my landlord about the broken heater? It has "
    "been cold for three days and I would like it fixed by Friday."
)
WITH_VALUES = (
    "Please e-mail jane.doe@example.com that card 4111 1111 1111 1111 was charged, call "
    "+1 415 555 2671 if needed; the key sk-proj-abcDEF1234567890abcdefXYZ is revoked."
)
LOOKALIKES = (
    "Upgrade from 1.2.3 to 2.10.4 on EKS with S3 and EC2; order 12345678901234 totals "
    "$1,200.50; ISBN 978-3-16-148410-0; hash 3f786850e387550fdab836ed7e6dc881de23001b."
)
EVERY = {
    d: "redact"
    for d in ("email", "phone", "card", "iban", "ssn", "ip", "secret", "aws_key", "bearer")
}
EVERY["private_key"] = "redact"
ANSWER = (
    "Sure. Here is a summary of the account: the card on file ends in 1111, the contact "
    "address is jane.doe@example.com and nothing else is stored. Anything else? " * 4
)


def timed(fn: Callable[[], object], n: int) -> float:
    """CPU µs per call over ``n`` calls (this process's CPU time: other work on the
    machine's cores does not count, as wall time would)."""
    start = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - start) / n * 1e6


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):8.1f} µs  ({min(values):.1f} to {max(values):.1f})"


def asks() -> tuple[Ask, Ask]:
    os.environ["TIERGATE_TEST_KEY"] = TEST_KEY
    raw = fake_config()
    raw["tenants"]["acme"]["guardrails"] = {"detectors": EVERY}
    config = GatewayConfig.model_validate(raw)
    guarded = KeyRing.from_config(config).authenticate(TEST_KEY)
    plain = KeyRing.from_config(GatewayConfig.model_validate(fake_config())).authenticate(TEST_KEY)
    assert guarded is not None and plain is not None
    messages = (
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": BENIGN},
        {"role": "user", "content": WITH_VALUES},
    )
    generation = GenerationRequest("r", "auto", SamplingParams(), messages=messages)
    return (
        Ask(guarded, "auto", generation, stream=True, include_usage=False),
        Ask(plain, "auto", generation, stream=True, include_usage=False),
    )


async def window_run(window: int) -> tuple[int, float]:
    """Chunks held before the first release, and µs of guard CPU per chunk."""
    policy = compile_policy(GuardrailsSpec.model_validate({"detectors": EVERY}))
    pieces = [ANSWER[i : i + 4] for i in range(0, len(ANSWER), 4)]
    fed = 0

    async def source() -> AsyncIterator[Chunk]:
        nonlocal fed
        for piece in pieces:
            fed += 1
            yield Chunk(text=piece)
        yield Chunk(finish_reason="stop", usage=Usage(1, 1))

    first = -1
    start = time.process_time()
    async for chunk in guard_answer(source(), Redactor(policy), window):
        if chunk.text and first < 0:
            first = fed
    cpu = (time.process_time() - start) / len(pieces) * 1e6
    return first, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--ner", action="store_true")
    parser.add_argument("--ttfb", action="store_true")
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    config = GatewayConfig.model_validate(fake_config())
    guarded, plain = asks()
    rows: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for name, text in (
            ("recognizers, benign prompt", BENIGN),
            ("recognizers, prompt with 4 values", WITH_VALUES),
            ("recognizers, look-alikes (none flagged)", LOOKALIKES),
        ):
            rows.setdefault(f"{name} ({len(text)} chars)", []).append(
                timed(lambda t=text: find(t), args.n)  # type: ignore[misc]
            )
        rows.setdefault("screen, 3-message chat request, every type", []).append(
            timed(lambda: screen(guarded, config), args.n)
        )
        rows.setdefault("screen, passthrough (no guardrails: block)", []).append(
            timed(lambda: screen(plain, config), args.n * 10)
        )
    print(f"CPU: {machine()}\n")
    for name, values in rows.items():
        print(f"{name:55s} {spread(values)}")
    for window in (48, 64):
        held, cpu = asyncio.run(window_run(window))
        print(
            f"window {window} chars: first release after {held} chunks of 4 chars "
            f"(added TTFB = {held - 1} inter-token gaps); guard CPU {cpu:.1f} µs per chunk"
        )
    if args.ner:
        policy = compile_policy(
            GuardrailsSpec.model_validate({"detectors": {"person": "redact", "location": "redact"}})
        )
        Redactor(policy).text("warm up: John Smith lives in Paris")
        values = [timed(lambda: Redactor(policy).text(BENIGN), 50) for _ in range(args.rounds)]
        print(f"{'NER (Presidio + en_core_web_sm), benign prompt':55s} {spread(values)}")
    if args.ttfb:
        ttfb(args.requests)


def ttfb(requests: int) -> None:
    """Time to the first content byte through a real gateway, with and without a window."""
    import httpx

    from tiergate_testing.gateways import running_gateway
    from tiergate_testing.profiles import Profile
    from tiergate_testing.upstream import running_upstream

    keys = {
        "plain": "tg-bench-plain-0001",
        "w48": "tg-bench-w48-00001",
        "w64": "tg-bench-w64-00001",
    }
    paced = Profile(chunks=64, gap_s=0.02, word="tok ")
    with running_upstream({}, default=paced) as upstream:
        raw = fake_config()
        raw["engines"] = {
            "up": {"backend": "openai", "model": "up-m", "options": {"api_base": upstream.base_url}}
        }
        raw["tiers"] = {name: {"engines": ["up"]} for name in ("small", "medium", "large")}
        raw["prices"] = {"up-m": {"input": 1.0, "output": 1.0}}
        raw["tenants"] = {}
        for name, key in keys.items():
            os.environ[f"BENCH_{name.upper()}_KEY"] = key
            tenant: dict[str, object] = {
                "keys": [{"id": name, "from_env": f"BENCH_{name.upper()}_KEY"}]
            }
            if name != "plain":
                tenant["guardrails"] = {"detectors": EVERY, "window_chars": int(name[1:])}
            raw["tenants"][name] = tenant
        with running_gateway(raw) as gateway, httpx.Client(timeout=30) as client:
            for name, key in keys.items():
                firsts: list[float] = []
                for i in range(requests):
                    body = {
                        "model": "small",
                        "stream": True,
                        "messages": [{"role": "user", "content": f"count {i}"}],
                    }
                    started = time.perf_counter()
                    with client.stream(
                        "POST",
                        gateway.base_url + "/v1/chat/completions",
                        json=body,
                        headers={"authorization": f"Bearer {key}"},
                    ) as response:
                        for line in response.iter_lines():
                            if '"content":"t' in line:
                                firsts.append((time.perf_counter() - started) * 1000)
                                break
                print(f"TTFB {name:6s} {statistics.median(firsts):7.1f} ms (median of {requests})")


if __name__ == "__main__":
    main()
