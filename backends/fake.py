"""A protocol fake: deterministic text at a set pace, with fault injection for tests.

It implements ``Engine`` exactly as the real backends do (counters, cancellation,
load, overload), so tests that use it exercise the same code paths. It keeps nothing
per request (a load experiment on it runs in constant memory).

With ``tools`` it declares tool calling; ``tool_script`` rules make it call a tool the
way a model would: when the last message is the user's and contains a rule's ``when``
(case-insensitive) and the request offers that tool, it streams that call; when the
last message is a tool result, it answers in text that quotes the result's start. It
honours ``stop`` as an engine does: the text ends before the first stop string.

With ``logprobs`` asked it returns one ``TokenLogprob`` per token, as llama.cpp and vLLM
do: near ``logprob`` (a confident model), or near a ``logprob_rules`` rule's value when
the prompt contains its ``when`` (an unsure one).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from backends.base import (
    Chunk,
    EngineCounters,
    EngineLoad,
    GenerationRequest,
    TokenLogprob,
    Usage,
    unsupported_field,
)
from backends.errors import EngineOverloaded, EngineUnavailable, UpstreamFailed, UpstreamRejected

TOOL_FEATURES = frozenset({"tools", "tool_choice", "parallel_tool_calls"})
LOGPROB_FEATURES = frozenset({"logprobs", "top_logprobs"})


@dataclass(frozen=True, slots=True)
class ToolRule:
    when: str  # a substring of the last user message (case-insensitive)
    call: str  # the tool to call
    arguments: Mapping[str, Any]
    broken: bool = False  # arguments that are not JSON: a call the model could not form


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: their text
        return " ".join(str(p.get("text") or "") for p in content if isinstance(p, Mapping))
    return ""


def _prompt_text(request: GenerationRequest) -> str:
    if request.prompt is not None:
        return request.prompt
    return "\n".join(_text(m.get("content")) for m in request.messages or ())


def _tool_names(request: GenerationRequest) -> set[str]:
    names = set()
    for tool in request.tools or ():
        function = tool.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return names


def _cut_at_stop(words: list[str], stops: Sequence[str]) -> tuple[list[str], str | None]:
    """The words up to the first stop string (left out, as engines leave it out)."""
    text = ""
    for index, word in enumerate(words):
        text += word
        hits = [(text.find(stop), stop) for stop in stops if stop and stop in text]
        if hits:
            at, stop = min(hits)
            kept = words[:index]
            rest = text[len("".join(kept)) : at]
            return [*kept, rest] if rest else kept, stop
    return words, None


class FakeEngine:
    def __init__(
        self,
        *,
        name: str,
        model: str,
        tokens: int = 16,
        token_delay_s: float = 0.0,
        first_token_delay_s: float = 0.0,
        max_running: int = 64,
        fail_after_tokens: int | None = None,
        dead: bool = False,
        tools: bool = False,
        tool_script: Sequence[Mapping[str, Any]] = (),
        logprob: float = -0.1,
        logprob_rules: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.name = name
        self.model = model
        self.counters = EngineCounters()
        # Text generation and its log-probabilities, unless it plays a tool-calling model.
        tool_features = TOOL_FEATURES if tools else frozenset()
        self.capabilities: frozenset[str] = LOGPROB_FEATURES | tool_features
        self.logprob = logprob
        self.logprob_rules = tuple(
            (str(r["when"]).lower(), float(r["logprob"])) for r in logprob_rules
        )
        self.tokens = tokens
        self.token_delay_s = token_delay_s
        self.first_token_delay_s = first_token_delay_s
        self.max_running = max_running
        self.fail_after_tokens = fail_after_tokens
        self.dead = dead
        self.tool_script = tuple(
            ToolRule(
                str(r["when"]).lower(),
                str(r["call"]),
                dict(r.get("arguments") or {}),
                bool(r.get("broken", False)),
            )
            for r in tool_script
        )

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        self.dead = True

    def load(self) -> EngineLoad:
        return EngineLoad(running=self.counters.active, healthy=not self.dead)

    def words(self, request: GenerationRequest) -> list[str]:
        """The reply is a pure function of the prompt and seed, like greedy decoding."""
        digest = hashlib.sha256(
            f"{_prompt_text(request)}|{request.sampling.seed}".encode()
        ).hexdigest()
        return [f" w{digest[i % 60 : i % 60 + 4]}" for i in range(self.tokens)]

    def token_logprob(self, request: GenerationRequest, word: str, index: int) -> TokenLogprob:
        """A token's log-probability: the rule's value (or ``logprob``) less up to 0.04,
        varying by place as a model's do; with ``top_logprobs`` the token leads them."""
        text = _prompt_text(request).lower()
        base = next((lp for when, lp in self.logprob_rules if when in text), self.logprob)
        value = base - 0.01 * (index % 5)
        top = [(word, value, word.encode())]
        top += [(f" alt{k}", value - k, f" alt{k}".encode()) for k in range(1, 20)]
        return TokenLogprob(word, value, word.encode(), tuple(top[: request.top_logprobs or 0]))

    def scripted_call(self, request: GenerationRequest) -> ToolRule | None:
        """The rule whose tool this request should call, if any."""
        last = (request.messages or ({},))[-1]
        if not self.tool_script or last.get("role") != "user" or request.tool_choice == "none":
            return None
        text, offered = _text(last.get("content")).lower(), _tool_names(request)
        return next((r for r in self.tool_script if r.when in text and r.call in offered), None)

    def tool_reply(self, request: GenerationRequest) -> list[str] | None:
        """After a tool result, words that quote its start (so a test sees it arrived)."""
        last = (request.messages or ({},))[-1]
        if not self.tool_script or last.get("role") != "tool":
            return None
        quoted = " ".join(_text(last.get("content")).split()[:8])
        return [f" {w}" for w in f"The tool returned: {quoted}".split()]

    async def stream(self, request: GenerationRequest) -> AsyncIterator[Chunk]:
        if self.dead:
            raise EngineUnavailable(f"{self.name} is dead")
        field = unsupported_field(request, self.capabilities)
        if field is not None:
            raise UpstreamRejected(f"the fake backend cannot honour {field}", status=400)
        if self.counters.active >= self.max_running:
            raise EngineOverloaded(f"{self.name} is full")
        self.counters.started += 1
        rule = self.scripted_call(request)
        if rule is not None:
            async for chunk in self._call(request, rule):
                yield chunk
            return
        limit = request.sampling.max_tokens or self.tokens
        source = self.tool_reply(request) or self.words(request)
        words, stopped = source[:limit], None
        if request.sampling.stop:
            words, stopped = _cut_at_stop(list(words), request.sampling.stop)
        sent = 0
        try:
            if self.first_token_delay_s:
                await asyncio.sleep(self.first_token_delay_s)
            for word in words:
                if self.dead:
                    raise UpstreamFailed(f"{self.name} died mid-stream")
                if self.fail_after_tokens is not None and sent >= self.fail_after_tokens:
                    raise UpstreamFailed(f"{self.name} failed after {sent} tokens")
                if self.token_delay_s:
                    await asyncio.sleep(self.token_delay_s)
                logprobs = (self.token_logprob(request, word, sent),) if request.logprobs else None
                sent += 1
                self.counters.generated_tokens += 1
                yield Chunk(text=word, logprobs=logprobs)
        except BaseException:
            self.counters.aborted += 1
            raise
        self.counters.finished += 1
        finish = "length" if len(words) < len(source) and stopped is None else "stop"
        prompt_tokens = len(_prompt_text(request).split())
        yield Chunk(finish_reason=finish, usage=Usage(prompt_tokens, sent), stop_sequence=stopped)

    async def _call(self, request: GenerationRequest, rule: ToolRule) -> AsyncIterator[Chunk]:
        """One tool call, streamed as a model's: its head, then its arguments in pieces
        (one a token; ``max_tokens`` cuts them, finish ``length``, as an engine would)."""
        digest = hashlib.sha256(_prompt_text(request).encode()).hexdigest()
        call_id, arguments = f"call_{digest[:24]}", json.dumps(dict(rule.arguments))
        if rule.broken:
            arguments = arguments[: max(len(arguments) // 2, 1)]
        head = {"index": 0, "id": call_id, "type": "function"}
        pieces = [arguments[i : i + 8] for i in range(0, len(arguments), 8)] or [""]
        limit = request.sampling.max_tokens
        finish = "tool_calls"
        if limit is not None and len(pieces) > limit:
            pieces, finish = pieces[:limit], "length"
            arguments = "".join(pieces)
        try:
            if self.first_token_delay_s:
                await asyncio.sleep(self.first_token_delay_s)
            yield Chunk(tool_call_deltas=({**head, "function": {"name": rule.call}},))
            for piece in pieces:
                if self.token_delay_s:
                    await asyncio.sleep(self.token_delay_s)
                self.counters.generated_tokens += 1
                yield Chunk(tool_call_deltas=({"index": 0, "function": {"arguments": piece}},))
        except BaseException:
            self.counters.aborted += 1
            raise
        self.counters.finished += 1
        whole = {**head, "function": {"name": rule.call, "arguments": arguments}}
        del whole["index"]
        usage = Usage(len(_prompt_text(request).split()), len(pieces))
        yield Chunk(finish_reason=finish, usage=usage, tool_calls=(whole,))
