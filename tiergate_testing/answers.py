"""The bodies the fake upstream sends: one answer's JSON, its SSE events, an error."""

from __future__ import annotations

import time

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
        self.prompt_tokens = profile.prompt_tokens or max(body_bytes // 4, 1)
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
