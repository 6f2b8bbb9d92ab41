"""The answer's window on the wire: an upstream whose answer carries a card number, an
e-mail and an API key, cut into chunks of 1, 2, 3, 5, 7 and 11 characters (every value
cut at every offset, and at many together), streamed as chat SSE, Responses events and
Messages events to the official clients: none of the values reaches them, in any event.
A ``block`` rule that matches mid-stream ends each stream with its format's error event."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import pytest

from tests.gateway.guardrails.guarded_support import (
    CARD,
    CUTS,
    EMAIL,
    KEY,
    Guarded,
    guarded_gateway,
)
from tiergate_testing.configs import TEST_KEY

REDACTED = (
    "Sure. The card on file is <CARD_1>, the contact is <EMAIL_1> and the API key "
    "is <SECRET_1>. Anything else I can help with today?"
)
ASK = [{"role": "user", "content": "What is on file for me?"}]


@pytest.fixture(scope="module")
def guarded() -> Iterator[Guarded]:
    with guarded_gateway() as running:
        yield running


def assert_none_leaked(wire: str) -> None:
    for value in (CARD, EMAIL, KEY, "4111", "jane.doe", "abcDEF"):
        assert value not in wire, value


def raw_stream(guarded: Guarded, path: str, body: dict[str, object], key: str = TEST_KEY) -> str:
    """The bytes the client receives, every event of them."""
    headers = {"authorization": f"Bearer {key}", "x-api-key": key}
    with httpx.stream(
        "POST", guarded.gateway.base_url + path, json=body, headers=headers, timeout=30
    ) as response:
        assert response.status_code == 200, response.read()
        return "".join(response.iter_text())


@pytest.mark.parametrize("size", CUTS)
def test_chat_stream(guarded: Guarded, size: int) -> None:
    stream = guarded.chat().chat.completions.create(
        model=f"cut{size}",
        messages=ASK,
        stream=True,  # type: ignore[arg-type]
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == REDACTED
    assert_none_leaked(raw_stream(guarded, "/v1/chat/completions", {
        "model": f"cut{size}", "messages": ASK, "stream": True,
    }))  # fmt: skip


@pytest.mark.parametrize("size", CUTS)
def test_responses_stream(guarded: Guarded, size: int) -> None:
    client = guarded.chat()
    deltas: list[str] = []
    final = ""
    with client.responses.stream(model=f"cut{size}", input="What is on file?") as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response().output_text
    assert "".join(deltas) == REDACTED and final == REDACTED
    wire = raw_stream(
        guarded, "/v1/responses", {"model": f"cut{size}", "input": "hi", "stream": True}
    )
    assert_none_leaked(wire)


@pytest.mark.parametrize("size", CUTS)
def test_messages_stream(guarded: Guarded, size: int) -> None:
    client = guarded.messages()
    with client.messages.stream(
        model=f"cut{size}",
        max_tokens=512,
        messages=ASK,  # type: ignore[arg-type]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == REDACTED
    assert isinstance(final.content[0], anthropic.types.TextBlock)
    assert final.content[0].text == REDACTED
    wire = raw_stream(
        guarded,
        "/v1/messages",
        {"model": f"cut{size}", "max_tokens": 512, "messages": ASK, "stream": True},
    )
    assert_none_leaked(wire)


def test_restore_on_a_stream_gives_back_only_the_callers_values(guarded: Guarded) -> None:
    from tests.gateway.guardrails.guarded_support import RESTORE_KEY

    stream = guarded.chat(RESTORE_KEY).chat.completions.create(
        model="large",
        messages=[{"role": "user", "content": f"mail {EMAIL}"}],
        stream=True,
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == f"Noted: I will write to {EMAIL} soon."


@pytest.mark.parametrize(
    ("path", "body", "error_event"),
    [
        ("/v1/chat/completions", {"messages": ASK}, 'data: {"error":'),
        ("/v1/responses", {"input": "hi"}, "event: response.failed"),
        ("/v1/messages", {"messages": ASK, "max_tokens": 512}, "event: error"),
    ],
)
def test_a_block_mid_stream_ends_with_the_formats_error_event(
    guarded: Guarded, path: str, body: dict[str, object], error_event: str
) -> None:
    from tests.gateway.guardrails.guarded_support import BLOCK_KEY

    for size in (1, 7):
        wire = raw_stream(
            guarded, path, {**body, "model": f"cut{size}", "stream": True}, key=BLOCK_KEY
        )
        assert "4111" not in wire and "jane.doe" not in wire
        assert "Sure." in wire  # what came before the card was sent
        assert error_event in wire and "'card' rule blocks" in wire  # Anthropic's: no code
