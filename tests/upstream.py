"""A small OpenAI-compatible server for tests: fixed words, SSE or JSON, with usage.

It stands in for any provider that litellm (or another HTTP backend) talks to, and
counts what it was asked so tests can assert on what reached the upstream. Like a real
provider it bills image parts as prompt tokens (``IMAGE_TOKENS``), and the model
``no-usage`` answers without any usage at all.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.support import free_port

WORDS = ["Hello", " from", " the", " upstream", " server", "."]
# What GPT-4o bills for an image: 85 at detail low, else 85 + 170 per tile; as if every
# image were a 1024x1536 photo (768x1152 once scaled: 2 x 3 tiles).
IMAGE_TOKENS = {"low": 85, "high": 85 + 170 * 6}


def prompt_tokens(body: dict[str, Any]) -> int:
    """7 for the text, plus what each image part is billed."""
    tokens = 7
    for message in body.get("messages") or ():
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            if part.get("type") == "image_url":
                low = (part.get("image_url") or {}).get("detail") == "low"
                tokens += IMAGE_TOKENS["low" if low else "high"]
    return tokens


@dataclass
class UpstreamLog:
    requests: list[dict[str, Any]] = field(default_factory=list)
    completed_streams: int = 0
    cancelled_streams: int = 0


def _chunk(
    rid: str,
    model: str,
    delta: dict[str, Any],
    finish: str | None,
    logprobs: dict[str, Any] | None = None,
) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}
    body = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


def _logprobs(words: list[str]) -> dict[str, Any]:
    entries = [
        {"token": w, "logprob": -0.5, "bytes": list(w.encode()), "top_logprobs": []} for w in words
    ]
    return {"content": entries, "refusal": None}


def build_app(log: UpstreamLog, token_delay_s: float = 0.0) -> Starlette:
    async def chat(request: Request) -> Response:
        body = await request.json()
        log.requests.append(body)
        if body.get("model") == "reject-me":
            error = {
                "error": {
                    "message": "bad model",
                    "type": "invalid_request_error",
                    "param": "model",
                    "code": None,
                }
            }
            return Response(orjson.dumps(error), status_code=400, media_type="application/json")
        if body.get("model") == "unauthorized":  # a provider's 401 body, as they look
            error = {
                "error": {
                    "message": "Incorrect API key provided: sk-live-abcdef123456 for "
                    "https://10.0.0.7:8443/v1 (org org-42)",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
            }
            return Response(orjson.dumps(error), status_code=401, media_type="application/json")
        words = WORDS[: body.get("max_tokens") or len(WORDS)]
        prompt = prompt_tokens(body)
        usage: dict[str, Any] | None = {
            "prompt_tokens": prompt,
            "completion_tokens": len(words),
            "total_tokens": prompt + len(words),
            "prompt_tokens_details": {"cached_tokens": 3},
        }
        model = body["model"]
        if model == "no-usage":
            usage = None
        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(words)}
            return Response(
                orjson.dumps(
                    {
                        "id": "cmpl-up",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": model,
                        "usage": usage,
                        "choices": [
                            {
                                "index": 0,
                                "message": message,
                                "finish_reason": "stop",
                                "logprobs": _logprobs(words) if body.get("logprobs") else None,
                            }
                        ],
                    }
                ),
                media_type="application/json",
            )

        async def events() -> AsyncIterator[bytes]:
            try:
                yield _chunk("cmpl-up", model, {"role": "assistant", "content": ""}, None)
                for word in words:
                    await asyncio.sleep(token_delay_s)
                    logprobs = _logprobs([word]) if body.get("logprobs") else None
                    yield _chunk("cmpl-up", model, {"content": word}, None, logprobs)
                yield _chunk("cmpl-up", model, {}, "stop")
                if usage is not None and (body.get("stream_options") or {}).get("include_usage"):
                    final = {
                        "id": "cmpl-up",
                        "object": "chat.completion.chunk",
                        "created": int(time.time()),
                        "model": model,
                        "choices": [],
                        "usage": usage,
                    }
                    yield b"data: " + orjson.dumps(final) + b"\n\n"
                yield b"data: [DONE]\n\n"
                log.completed_streams += 1
            except asyncio.CancelledError:
                log.cancelled_streams += 1
                raise

        return StreamingResponse(events(), media_type="text/event-stream")

    async def embeddings(request: Request) -> Response:
        """One vector per input, from the text's bytes; usage: one token per word."""
        body = await request.json()
        log.requests.append(body)
        if body.get("model") == "reject-me":
            error = {"error": {"message": "bad", "type": "invalid_request_error", "param": None}}
            return Response(orjson.dumps(error), status_code=400, media_type="application/json")
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if inputs and isinstance(inputs[0], int):
            inputs = [inputs]
        dim = body.get("dimensions") or 8
        data, tokens = [], 0
        for i, item in enumerate(inputs):
            seed = item.encode() if isinstance(item, str) else bytes(v % 256 for v in item)
            vector = np.frombuffer(hashlib.sha512(seed).digest() * 4, dtype=np.uint8)[:dim]
            vector = vector.astype("<f4") / 255
            encoded: Any = vector.tolist()
            if body.get("encoding_format") == "base64":
                encoded = base64.b64encode(vector.tobytes()).decode()
            data.append({"object": "embedding", "index": i, "embedding": encoded})
            tokens += len(item.split()) if isinstance(item, str) else len(item)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        answer = {"object": "list", "data": data, "model": body["model"], "usage": usage}
        return Response(orjson.dumps(answer), media_type="application/json")

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/embeddings", embeddings, methods=["POST"]),
        ]
    )


@contextmanager
def running_upstream(token_delay_s: float = 0.0) -> Iterator[tuple[str, UpstreamLog]]:
    import threading

    log = UpstreamLog()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            build_app(log, token_delay_s), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/v1", log
    finally:
        server.should_exit = True
        thread.join(10)
