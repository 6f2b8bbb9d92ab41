"""A stand-in for ``sglang.Engine`` that runs inside the real worker process.

It yields what SGLang's ``TokenizerManager`` yields for ``async_generate(stream=True)``:
dicts with ``text`` (cumulative by default, the increment with
``incremental_streaming_output=True``), ``output_ids`` and ``meta_info`` carrying
``id``, ``finish_reason`` (``None`` until the end, then ``{"type": "length", "length": n}``
or ``{"type": "stop", "matched": ...}``), ``prompt_tokens``, ``completion_tokens`` and
``cached_tokens`` (a radix-cache stand-in: the longest token prefix seen before).
``get_loads`` returns objects shaped like SGLang's ``LoadSnapshot``.

Constrained decoding is stood in for: with a ``json_schema`` sampling param the fake
writes an instance of that schema (a grammar would allow nothing else); with tools in
the prompt and a user turn last it writes a hermes call (``<tool_call>{"name": N,
"arguments": A}</tool_call>``) to the first tool, which ``fake_sglang_calls`` parses.
The fake chat template renders ``tools`` and past calls as hermes templates do, and,
like templates that write ``arguments | tojson``, refuses arguments that are not objects.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
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
    def __init__(self, bare_functions: bool = False) -> None:
        self.bare_functions = bare_functions  # as Mistral's template: tools without wrapper

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        tokenize: bool,
        add_generation_prompt: bool,
        tools: list[dict[str, Any]] | None = None,
    ) -> str:
        for m in messages:  # as real templates do, through jinja2's raise_exception
            if m["role"] not in ("system", "user", "assistant", "tool"):
                raise jinja2.TemplateError(f"unknown role {m['role']!r}")
            if not isinstance(m["content"], str):
                raise TypeError(f"content must be a string, not {type(m['content']).__name__}")
        if tools and self.bare_functions and any("function" in t for t in tools):
            raise jinja2.TemplateError("tools must be bare functions")
        head = f"<|tools|><tools>{json.dumps(tools)}</tools><|end|>" if tools else ""
        body = "".join(f"<|{m['role']}|>{m['content']}{_calls(m)}<|end|>" for m in messages)
        return head + body + ("<|assistant|>" if add_generation_prompt else "")


def _calls(message: dict[str, Any]) -> str:
    out = ""
    for call in message.get("tool_calls") or ():
        arguments = call["function"]["arguments"]
        if not isinstance(arguments, dict):  # ``tojson`` would write a string of JSON
            raise TypeError("tool call arguments must be a mapping")
        name = call["function"]["name"]
        out += f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"
    return out


def schema_instance(schema: Any, root: dict[str, Any] | None = None) -> Any:
    """A value valid for ``schema`` (the subset tool and response schemas use)."""
    root = schema if root is None else root
    if not isinstance(schema, dict):
        return None
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        return schema_instance(target, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return schema_instance({**schema[key][0], **_without(schema, key)}, root)
    kind = schema.get("type", "object")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: schema_instance(sub, root) for name, sub in props.items()}
    if kind == "array":
        count = max(1, int(schema.get("minItems", 1)))
        return [schema_instance(schema.get("items") or {}, root) for _ in range(count)]
    samples = {"string": "x", "integer": 7, "number": 1.5, "boolean": True, "null": None}
    return samples.get(kind)


def _without(schema: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != key}


def answer_text(prompt: str, sampling_params: dict[str, Any]) -> tuple[str, str] | None:
    """What a constrained or tool-calling model writes here, with the finish type."""
    if sampling_params.get("json_schema") is not None:
        value = schema_instance(json.loads(sampling_params["json_schema"]))
        return json.dumps(value, separators=(",", ":")), "stop"
    if "<tools>" in prompt and prompt.rfind("<|user|>") > prompt.rfind("<|tool|>"):
        listed = json.loads(prompt.split("<tools>", 1)[1].split("</tools>", 1)[0])
        function = listed[0].get("function", listed[0])
        arguments = schema_instance(function.get("parameters") or {})
        call = json.dumps({"name": function["name"], "arguments": arguments})
        return f"<tool_call>\n{call}\n</tool_call>", "stop"
    return None


class FakeTokenizerManager:
    def __init__(self, engine: FakeSglangEngine) -> None:
        self.engine = engine
        self.tokenizer = FakeTokenizer(engine.bare_functions)

    def abort_request(self, rid: str) -> None:
        self.engine.aborted.add(rid)

    async def get_loads(self) -> list[FakeLoadSnapshot]:
        usage = min(1.0, len(self.engine.running) / 8)
        return [FakeLoadSnapshot(num_running_reqs=len(self.engine.running), token_usage=usage)]


# ``sglang.srt.sampling.sampling_params.SamplingParams``'s API fields: SGLang builds it
# with ``SamplingParams(**sampling_params)``, so any other key is a TypeError there.
SAMPLING_KEYS = frozenset(
    {
        "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p",
        "top_k", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty",
        "min_new_tokens", "n", "json_schema", "regex", "ebnf", "structural_tag",
        "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
        "no_stop_trim", "custom_params", "stream_interval", "logit_bias", "sampling_seed",
    }
)  # fmt: skip


def check_sampling(params: dict[str, Any]) -> None:
    """What SGLang's SamplingParams construction and ``verify`` refuse."""
    unknown = set(params) - SAMPLING_KEYS
    if unknown:
        raise TypeError(f"SamplingParams got unexpected keyword arguments {sorted(unknown)}")
    for name in ("frequency_penalty", "presence_penalty"):
        if not -2.0 <= float(params.get(name, 0.0)) <= 2.0:
            raise ValueError(f"{name} must be in [-2, 2]")
    grammars = [params.get(k) for k in ("json_schema", "regex", "ebnf")]
    if sum(g is not None for g in grammars) > 1:
        raise ValueError("Only one of regex, json_schema, or ebnf can be set.")
    if params.get("json_schema") is not None and not isinstance(params["json_schema"], str):
        raise TypeError("json_schema is a JSON string")


def tokens(text: str) -> list[str]:
    """Four characters per token, like a rough BPE."""
    return [text[i : i + 4] for i in range(0, len(text), 4)]


class FakeSglangEngine:
    def __init__(self, **server_args: Any) -> None:
        self.incremental = bool(server_args.get("incremental_streaming_output", False))
        self.bare_functions = bool(server_args.get("fake_bare_functions", False))
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
        check_sampling(sampling_params)
        prompt_tokens = tokens(prompt)
        cached = self._cached(prompt_tokens)
        self.seen.append(prompt_tokens)
        limit = int(sampling_params.get("max_new_tokens", 16))
        digest = hashlib.sha256(prompt.encode()).hexdigest()
        words = [f" {digest[i % 60 : i % 60 + 3]}é" for i in range(limit)]
        finish: dict[str, Any] = {"type": "length", "length": limit}
        if (answer := answer_text(prompt, sampling_params)) is not None:
            words = tokens(answer[0])
            if len(words) > limit:
                words = words[:limit]
            else:
                finish = {"type": answer[1], "matched": 0}

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
                            "finish_reason": finish if last else None,
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


def generated(prompt: str, limit: int) -> str:
    """What the fake writes, unconstrained, for this rendered prompt."""
    digest = hashlib.sha256(prompt.encode()).hexdigest()
    return "".join(f" {digest[i % 60 : i % 60 + 3]}é" for i in range(limit))


def expected_text(messages: list[dict[str, Any]], limit: int) -> str:
    """What the fake generates for a chat request: the bridge must deliver exactly this."""
    prompt = FakeTokenizer().apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    return generated(prompt, limit)
