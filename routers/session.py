"""An agent's conversation as one session: its name, its task, and what a turn says.

Agents (Claude Code, Codex, the Agents SDK) send the whole conversation on every turn,
and a turn is mostly the last one plus a tool's result. Routed alone, each turn's
prediction drifts with the growing context and the conversation changes tier half-way,
paying a cold prefill and full-price input on the new tier. A session names the
conversation so that its turns are routed together.

Its name comes from the client where the client gives one (``SessionHint``): an
``x-session-id`` header, a ``prompt_cache_key``, or a Responses ``previous_response_id``
chain (every stored Response keeps its session, so a continuation is in its chain's).
An OpenAI ``user`` or Anthropic ``metadata.user_id`` names the person, so it scopes
the conversation's derived name instead of replacing it. Otherwise the name is derived
from the conversation's **stable prefix**: the system messages, the tools and the first
user message, which every turn of the conversation repeats unchanged. Names
are digests scoped by tenant: two tenants never share a session.

The **task** a session is first routed on is its system messages and first user
message (never a tool result); a later user message is a new **instruction**, which is
predicted afresh. Pure functions: no store, no HTTP.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from routers.features import message_text

EXPLICIT = frozenset({"header", "prompt_cache_key", "response"})  # a name for the conversation
PERSON = "user"  # a name for the person: it scopes the derived name
DERIVED = "prefix"
SYSTEM_ROLES = frozenset({"system", "developer"})

Message = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SessionHint:
    """What a client said about the conversation a request belongs to."""

    source: str  # header | prompt_cache_key | response | user
    value: str


@dataclass(frozen=True, slots=True)
class SessionKey:
    id: str  # 32 hex digits, scoped by tenant
    source: str  # header | prompt_cache_key | response | user | prefix

    @property
    def explicit(self) -> bool:
        """Named by the client for this conversation (not derived from its text)."""
        return self.source in EXPLICIT

    @property
    def short(self) -> str:
        return self.id[:8]


def task_messages(messages: Sequence[Message]) -> list[Message]:
    """The system messages before the first user message, then that message."""
    out: list[Message] = []
    for message in messages:
        role = message.get("role")
        if role in SYSTEM_ROLES:
            out.append(message)
        elif role == "user":
            out.append(message)
            return out
    return out


def instruction_messages(messages: Sequence[Message]) -> list[Message]:
    """The system messages before the first user message, then the latest user message:
    what a new instruction is predicted on (without the tool rounds in between)."""
    system = [m for m in task_messages(messages) if m.get("role") in SYSTEM_ROLES]
    for message in reversed(messages):
        if message.get("role") == "user":
            return [*system, message]
    return system


def user_turns(messages: Sequence[Message]) -> int:
    """How many user messages (instructions) the conversation holds; tool results are
    ``tool`` messages in every wire format's translation."""
    return sum(1 for m in messages if m.get("role") == "user")


def instruction_digest(messages: Sequence[Message]) -> str:
    """The latest user message's digest: a turn whose differs from the one its session
    was predicted on carries a new instruction."""
    latest = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    return _digest(_shape(latest), user_turns(messages))


def follow_up(messages: Sequence[Message]) -> bool:
    """A later turn of a conversation: it carries an answer the model gave."""
    return any(m.get("role") == "assistant" for m in messages)


def conversation_chars(messages: Sequence[Message]) -> int:
    """The characters the objective prices a request by (as ``gateway.core.route``)."""
    return sum(len(message_text(m)) for m in messages)


def _shape(message: Message) -> tuple[Any, ...]:
    """A message as its digest reads it: role, text and the calls it makes."""
    calls = [
        (str(f.get("name", "")), str(f.get("arguments", "")))
        for c in message.get("tool_calls") or ()
        if isinstance(c, Mapping) and isinstance(f := c.get("function"), Mapping)
    ]
    return (message.get("role", ""), message_text(message), calls)


def _digest(*parts: Any) -> str:
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def prefix_digest(messages: Sequence[Message], tools: Sequence[Message] | None) -> str:
    """The stable prefix's digest: system messages, tools, first user message."""
    return _digest([_shape(m) for m in task_messages(messages)], list(tools or ()))


def turn_digest(messages: Sequence[Message], tools: Sequence[Message] | None) -> str:
    """The whole conversation's digest: the same turn sent again has the same one."""
    return _digest([_shape(m) for m in messages], list(tools or ()))


def session_key(
    tenant: str,
    hint: SessionHint | None,
    messages: Sequence[Message],
    tools: Sequence[Message] | None,
) -> SessionKey:
    """The session a request belongs to (see the module's docstring). A ``response``
    hint is a session id already: the one the stored Response it continues was in."""
    if hint is not None and hint.source == "response":
        return SessionKey(hint.value, hint.source)
    if hint is not None and hint.source in EXPLICIT:
        return SessionKey(_digest(tenant, hint.source, hint.value), hint.source)
    prefix = prefix_digest(messages, tools)
    if hint is not None and hint.source == PERSON:
        return SessionKey(_digest(tenant, PERSON, hint.value, prefix), PERSON)
    return SessionKey(_digest(tenant, DERIVED, prefix), DERIVED)
