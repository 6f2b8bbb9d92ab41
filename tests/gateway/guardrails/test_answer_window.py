"""The answer's window on its own: a value cut at any offset, in any number of chunks,
never leaves the guard whole or in part; tool calls leave whole and redacted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from backends.base import Chunk, Usage
from gateway.guardrails.answer import guard_answer
from gateway.guardrails.errors import GuardrailBlocked
from gateway.guardrails.guard import RequestGuard
from gateway.guardrails.policy import compile_policy
from gateway.guardrails.redactor import Redactor
from policies.guardrails_spec import GuardrailsSpec
from policies.schema import GatewayConfig
from tiergate_testing.configs import fake_config

CARD, EMAIL, KEY = (
    "4111 1111 1111 1111",
    "jane.doe@example.com",
    "sk-proj-abcDEF1234567890abcdefXYZ",
)
ANSWER = (
    f"Sure. The card on file is {CARD}, the contact is {EMAIL} and the API key "
    f"is {KEY}. Anything else I can help with today?"
)
REDACT = {"card": "redact", "email": "redact", "secret": "redact"}


def redactor(**block: Any) -> Redactor:
    return Redactor(compile_policy(GuardrailsSpec.model_validate(block)))


async def source(pieces: Sequence[str], **final: Any) -> AsyncIterator[Chunk]:
    for piece in pieces:
        yield Chunk(text=piece)
    yield Chunk(finish_reason="stop", usage=Usage(10, 10), **final)


async def drain(stream: AsyncIterator[Chunk]) -> list[Chunk]:
    return [chunk async for chunk in stream]


def run(pieces: Sequence[str], r: Redactor, window: int = 64) -> list[Chunk]:
    return asyncio.run(drain(guard_answer(source(pieces), r, window)))


def assert_clean(chunks: list[Chunk]) -> str:
    text = "".join(c.text for c in chunks)
    for value in (CARD, EMAIL, KEY):
        assert value not in text
        # no piece of a value left the guard either: its digits/letters run is gone
    assert "4111" not in text and "jane.doe" not in text and "abcDEF" not in text
    return text


@pytest.mark.parametrize("value", [CARD, EMAIL, KEY])
def test_every_two_chunk_cut_of_each_value(value: str) -> None:
    start = ANSWER.index(value)
    for offset in range(start, start + len(value) + 1):
        chunks = run([ANSWER[:offset], ANSWER[offset:]], redactor(detectors=REDACT))
        text = assert_clean(chunks)
        assert text == (
            "Sure. The card on file is <CARD_1>, the contact is <EMAIL_1> and the API key "
            "is <SECRET_1>. Anything else I can help with today?"
        )


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 13])
def test_fixed_size_chunks(size: int) -> None:
    pieces = [ANSWER[i : i + size] for i in range(0, len(ANSWER), size)]
    assert_clean(run(pieces, redactor(detectors=REDACT)))


def test_text_is_released_before_the_end_and_holds_back_only_the_window() -> None:
    words = [f"word{i} " for i in range(60)]

    async def first_release() -> int:
        fed = 0

        async def counting() -> AsyncIterator[Chunk]:
            nonlocal fed
            for w in words:
                fed += len(w)
                yield Chunk(text=w)
            yield Chunk(finish_reason="stop")

        async for chunk in guard_answer(counting(), redactor(detectors=REDACT), 64):
            if chunk.text:
                return fed
        return -1

    fed = asyncio.run(first_release())
    assert 64 < fed <= 64 + 2 * len(words[-1])  # the window and one word, not the whole


def test_a_block_rule_in_the_answer_raises_mid_stream() -> None:
    r = redactor(detectors={"card": "block", "email": "redact"})
    pieces = [ANSWER[i : i + 4] for i in range(0, len(ANSWER), 4)]
    released: list[str] = []

    async def consume() -> None:
        async for chunk in guard_answer(source(pieces), r, 48):
            released.append(chunk.text)

    with pytest.raises(GuardrailBlocked) as raised:
        asyncio.run(consume())
    assert raised.value.code == "guardrail_blocked" and "answer" in raised.value.message
    assert "4111" not in "".join(released)


def test_tool_calls_are_held_and_sent_whole_and_redacted() -> None:
    args = '{"to": "jane.doe@example.com", "body": "hi"}'
    deltas = [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "send"}},
        *({"index": 0, "function": {"arguments": args[i : i + 5]}} for i in range(0, 45, 5)),
    ]

    async def calls() -> AsyncIterator[Chunk]:
        for d in deltas:
            yield Chunk(tool_call_deltas=(d,))
        whole = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "send", "arguments": args},
        }
        yield Chunk(finish_reason="tool_calls", tool_calls=(whole,))

    chunks = asyncio.run(drain(guard_answer(calls(), redactor(detectors=REDACT), 64)))
    assert len(chunks) == 1
    (final,) = chunks
    assert final.tool_call_deltas is not None and final.tool_calls is not None
    (delta,) = final.tool_call_deltas
    assert delta["id"] == "call_1" and delta["function"]["name"] == "send"
    assert delta["function"]["arguments"] == '{"to": "<EMAIL_1>", "body": "hi"}'
    assert final.tool_calls[0]["function"]["arguments"] == delta["function"]["arguments"]


def test_restore_gives_the_values_back_across_cut_placeholders() -> None:
    r = redactor(detectors=REDACT, restore=True)
    r.text(f"my card is {CARD}")  # the request's redaction made <CARD_1>
    guard = RequestGuard(r, GatewayConfig.model_validate(fake_config()), 0.0)
    answer = "Charged <CARD_1> as asked."
    for offset in range(len(answer) + 1):
        pieces = [answer[:offset], answer[offset:]]
        chunks = asyncio.run(drain(guard.restored(source(pieces))))
        assert "".join(c.text for c in chunks) == f"Charged {CARD} as asked."


def test_a_private_key_longer_than_the_window_is_held_whole() -> None:
    body = "\n".join("MIIEpAIBAAKCAQEA" + str(i) * 48 for i in range(10))
    block = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"
    answer = f"Here it is:\n{block}\nKeep it safe, and rotate it soon please."
    for size in (3, 17):
        pieces = [answer[i : i + size] for i in range(0, len(answer), size)]
        text = "".join(c.text for c in run(pieces, redactor(detectors={"private_key": "redact"})))
        assert text == "Here it is:\n<PRIVATE_KEY_1>\nKeep it safe, and rotate it soon please."


def test_a_bearer_token_after_a_release_still_reads_as_one() -> None:
    answer = "x " * 40 + "Authorization: Bearer abc123def456ghi789jkl0 and the rest of it."
    for offset in range(70, 110):
        pieces = [answer[:offset], answer[offset:]]
        text = "".join(c.text for c in run(pieces, redactor(detectors={"bearer": "redact"}), 48))
        assert "abc123" not in text and "Bearer <BEARER_1>" in text


def test_values_at_the_very_start_and_end_of_an_answer() -> None:
    answer = f"{EMAIL} is the address and the card is {CARD}"
    for size in (1, 4, len(answer)):
        pieces = [answer[i : i + size] for i in range(0, len(answer), size)]
        text = "".join(c.text for c in run(pieces, redactor(detectors=REDACT)))
        assert text == "<EMAIL_1> is the address and the card is <CARD_1>"
