"""The bodies the fake upstream sends: one answer's JSON, its SSE events, an error."""

from __future__ import annotations

import base64
import hashlib
import time

import numpy as np
import orjson

from tiergate_testing.profiles import Profile


def error_body(status: int, error: dict[str, object]) -> bytes:
    """OpenAI's error shape; ``error`` supplies the message and anything it overrides."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return orjson.dumps({"error": {"type": kind, "param": None, "code": None, **error}})


def usage_body(prompt: int, completion: int, cached: int = 0) -> dict[str, object]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


# What GPT-4o bills for an image: 85 at detail low, else 85 + 170 per tile; as if every
# image were a 1024x1536 photo (768x1152 once scaled: 2 x 3 tiles).
IMAGE_TOKENS = {"low": 85, "high": 85 + 170 * 6}


def image_tokens(request: dict[str, object]) -> int:
    """What a provider bills for the request's image parts, as prompt tokens."""
    tokens = 0
    messages = request.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("type") == "image_url":
                image = part.get("image_url")
                low = isinstance(image, dict) and image.get("detail") == "low"
                tokens += IMAGE_TOKENS["low" if low else "high"]
    return tokens


def embeddings_body(request: dict[str, object]) -> bytes:
    """One vector per input, from the input's bytes (``dimensions`` long, default 8);
    usage: one token per word (or per id of a token array)."""
    raw = request.get("input")
    inputs: list[object] = raw if isinstance(raw, list) else [raw]
    if inputs and isinstance(inputs[0], int):
        inputs = [inputs]
    dimensions = request.get("dimensions")
    dim = dimensions if isinstance(dimensions, int) and dimensions > 0 else 8
    data, tokens = [], 0
    for i, item in enumerate(inputs):
        ids = item if isinstance(item, list) else []
        seed = item.encode() if isinstance(item, str) else bytes(int(v) % 256 for v in ids)
        vector = np.frombuffer(hashlib.sha512(seed).digest() * 4, dtype=np.uint8)[:dim]
        floats = vector.astype("<f4") / 255
        encoded: object = floats.tolist()
        if request.get("encoding_format") == "base64":
            encoded = base64.b64encode(floats.tobytes()).decode()
        data.append({"object": "embedding", "index": i, "embedding": encoded})
        tokens += len(item.split()) if isinstance(item, str) else len(ids)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return orjson.dumps(
        {"object": "list", "data": data, "model": request.get("model"), "usage": usage}
    )


def _logprobs(texts: list[str]) -> dict[str, object]:
    entries = [
        {"token": t, "logprob": -0.5, "bytes": list(t.encode()), "top_logprobs": []} for t in texts
    ]
    return {"content": entries, "refusal": None}


class Answer:
    """One request's answer under a profile: chat or text completion, whole or streamed."""

    def __init__(
        self,
        model: str,
        profile: Profile,
        request: dict[str, object],
        body_bytes: int,
        text_completion: bool,
    ) -> None:
        self.model = model
        self.profile = profile
        self.text_completion = text_completion
        self.texts = profile.texts(
            request.get("max_tokens") or request.get("max_completion_tokens")
        )
        self.logprobs = bool(request.get("logprobs")) and not text_completion
        options = request.get("stream_options")
        self.stream_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        text_tokens = profile.prompt_tokens or max(body_bytes // 4, 1)
        self.prompt_tokens = text_tokens + image_tokens(request)
        self._base = {"id": "up-1", "object": "chat.completion.chunk", "created": 0, "model": model}

    def usage(self) -> dict[str, object]:
        return usage_body(self.prompt_tokens, len(self.texts), self.profile.cached_tokens)

    def whole(self) -> bytes:
        text = "".join(self.texts)
        choice: dict[str, object] = {"index": 0, "finish_reason": "stop"}
        if self.text_completion:
            choice["text"] = text
        else:
            choice["message"] = {"role": "assistant", "content": text}
            if self.logprobs:
                choice["logprobs"] = _logprobs(self.texts)
        answer: dict[str, object] = {
            "id": "up-1",
            "object": "text_completion" if self.text_completion else "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [choice],
        }
        if self.profile.usage:
            answer["usage"] = self.usage()
        return orjson.dumps(answer)

    def _choice(self, i: int, text: str, finish: str | None) -> dict[str, object]:
        if self.text_completion:
            return {"index": 0, "text": text, "finish_reason": finish}
        delta = {"content": text} if i else {"role": "assistant", "content": text}
        choice: dict[str, object] = {
            "index": 0,
            "delta": delta if text else {},
            "finish_reason": finish,
        }
        if self.logprobs and text:
            choice["logprobs"] = _logprobs([text])
        return choice

    def _event(self, body: dict[str, object]) -> bytes:
        return b"data: " + orjson.dumps(body) + b"\n\n"

    def chunk(self, i: int, text: str) -> bytes:
        """The ``i``-th streamed event: one chunk of text."""
        return self._event({**self._base, "choices": [self._choice(i, text, None)]})

    def ending(self) -> list[bytes]:
        """After the text: the finish reason, the usage when asked for, ``[DONE]``."""
        events = [self._event({**self._base, "choices": [self._choice(1, "", "stop")]})]
        if self.stream_usage and self.profile.usage:
            events.append(self._event({**self._base, "choices": [], "usage": self.usage()}))
        events.append(b"data: [DONE]\n\n")
        return events
