"""A stand-in for ``sglang.Engine`` that runs inside the real worker process.

It yields what SGLang's ``TokenizerManager`` yields for ``async_generate(stream=True)``:
dicts with ``text`` (cumulative by default, the increment with
``incremental_streaming_output=True``), ``output_ids`` and ``meta_info`` carrying
``id``, ``finish_reason`` (``None`` until the end, then ``{"type": "length", "length": n}``
or ``{"type": "stop", "matched": ...}``), ``prompt_tokens``, ``completion_tokens`` and
``cached_tokens`` (a radix-cache stand-in: the longest token prefix seen before).
``get_loads`` returns objects shaped like SGLang's ``LoadSnapshot``.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import jinja2


@dataclass
class FakeLoadSnapshot:
    num_running_reqs: int = 0
    num_waiting_reqs: int = 0
    token_usage: float = 0.0
    cache_hit_rate: float = 0.0

    def to_dict(self, include: set[str] | None = None) -> dict[str, Any]:
        return dict(vars(self))


class FakeTokenizer:
    def apply_chat_template(
        self, messages: list[dict[str, Any]], tokenize: bool, add_generation_prompt: bool
    ) -> str:
        for m in messages:  # as real templates do, through jinja2's raise_exception
            if m["role"] not in ("system", "user", "assistant", "tool"):
                raise jinja2.TemplateError(f"unknown role {m['role']!r}")
        body = "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in messages)
        return body + ("<|assistant|>" if add_generation_prompt else "")


class FakeTokenizerManager:
    def __init__(self, engine: FakeSglangEngine) -> None:
        self.engine = engine
        self.tokenizer = FakeTokenizer()

    def abort_request(self, rid: str) -> None:
        self.engine.aborted.add(rid)

    async def get_loads(self) -> list[FakeLoadSnapshot]:
        usage = min(1.0, len(self.engine.running) / 8)
        return [FakeLoadSnapshot(num_running_reqs=len(self.engine.running), token_usage=usage)]


def tokens(text: str) -> list[str]:
    """Four characters per token, like a rough BPE."""
    return [text[i : i + 4] for i in range(0, len(text), 4)]


class FakeSglangEngine:
    def __init__(self, **server_args: Any) -> None:
        self.incremental = bool(server_args.get("incremental_streaming_output", False))
        self.token_delay_s = float(server_args.get("fake_token_delay_s", 0.0))
        self.crash_after_tokens = server_args.get("fake_crash_after_tokens")
        self.tokenizer_manager = FakeTokenizerManager(self)
        self.seen: list[list[str]] = []
        self.running: set[str] = set()
        self.aborted: set[str] = set()

    def _cached(self, prompt: list[str]) -> int:
        best = 0
        for earlier in self.seen:
            common = 0
            for a, b in zip(earlier, prompt, strict=False):
                if a != b:
                    break
                common += 1
            best = max(best, common)
        return best

    async def async_generate(
        self, prompt: str, sampling_params: dict[str, Any], stream: bool, rid: str
    ) -> AsyncIterator[dict[str, Any]]:
        prompt_tokens = tokens(prompt)
        cached = self._cached(prompt_tokens)
        self.seen.append(prompt_tokens)
        limit = int(sampling_params.get("max_new_tokens", 16))
        digest = hashlib.sha256(prompt.encode()).hexdigest()
        words = [f" {digest[i % 60 : i % 60 + 3]}é" for i in range(limit)]

        async def outputs() -> AsyncIterator[dict[str, Any]]:
            self.running.add(rid)
            text = ""
            try:
                for index, word in enumerate(words):
                    if self.crash_after_tokens is not None and index >= self.crash_after_tokens:
                        import os

                        os._exit(17)  # a worker dying without a word, like a CUDA fault
                    await asyncio.sleep(self.token_delay_s)
                    text += word
                    last = index == len(words) - 1
                    yield {
                        "text": word if self.incremental else text,
                        "output_ids": [index],
                        "meta_info": {
                            "id": rid,
                            "finish_reason": {"type": "length", "length": limit} if last else None,
                            "prompt_tokens": len(prompt_tokens),
                            "completion_tokens": index + 1,
                            "cached_tokens": cached,
                        },
                    }
            finally:
                self.running.discard(rid)

        return outputs()

    def shutdown(self) -> None:
        self.running.clear()


def expected_text(messages: list[dict[str, Any]], limit: int) -> str:
    """What the fake generates for a chat request: the bridge must deliver exactly this."""
    prompt = FakeTokenizer().apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    digest = hashlib.sha256(prompt.encode()).hexdigest()
    return "".join(f" {digest[i % 60 : i % 60 + 3]}é" for i in range(limit))
