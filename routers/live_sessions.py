"""Agent sessions as the replicas share them: the state, the cached prefix, the turn's signals.

``Sessions`` is built once (the lifespan) over the session store and the tier pools.
Routing (``routers/session_route.py``) opens a request's session, prices the
prefix its tier already caches, and records the turn; the run tells it, when the turn
ends, what the stream showed (``SessionWatch``: a tool call cut by ``length`` or one the
engine could not form) and which replica served; ``/v1/feedback`` tells it a bad
verdict. Those become the session's ``signal``, which its next turn reads and clears.
The store failing never fails a request: the turn is routed alone, and the trail says so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from backends.affinity import block_keys, canonical_prompt
from backends.base import Chunk, GenerationRequest
from backends.pool import EnginePool
from policies.session_spec import SessionsConfig
from policies.stores.sessions import REPLICA, SIGNAL, STATE, SessionStore
from policies.stores.store import StoreUnavailable
from routers.session import SessionKey
from routers.session_policy import SessionState, SessionTurn

log = logging.getLogger(__name__)

RETRIED = "retried turn"
BAD_VERDICT = "bad feedback verdict"
CUT_CALL = "answer cut by length inside a tool call"
BAD_CALL = "a tool call the engine could not form"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"  # the Hermes markup engines parse


@dataclass(frozen=True, slots=True)
class Opened:
    """A session as the store holds it when a turn arrives."""

    key: SessionKey
    state: SessionState | None
    signal: str | None  # a failure after the last turn, not yet acted on
    replica: tuple[str, str] | None  # (tier, replica) that served its last turn
    trouble: str | None = None  # the store could not be read: the turn is routed alone


class SessionWatch:
    """What a turn's stream shows about it: a tool call begun and cut, or malformed."""

    __slots__ = ("calls", "closed", "opened", "started", "tools")

    def __init__(self, tools: bool) -> None:
        self.tools = tools  # the request offered tools
        self.started = False  # tool-call fragments streamed
        self.opened = self.closed = 0  # call markup in the text (a parser that missed it)
        self.calls: Sequence[Mapping[str, Any]] = ()

    def saw(self, chunk: Chunk) -> None:
        if chunk.tool_call_deltas:
            self.started = True
        text = chunk.text
        if text and self.tools and "tool_call>" in text:
            self.opened += text.count(CALL_OPEN)
            self.closed += text.count(CALL_CLOSE)
        if chunk.tool_calls:
            self.calls = chunk.tool_calls

    def signal(self, finish_reason: str | None) -> str | None:
        """The failure this turn shows (None: none)."""
        if finish_reason == "length" and (self.started or self.opened > self.closed):
            return CUT_CALL
        if any(not _formed(call) for call in self.calls):
            return BAD_CALL
        if self.tools and not self.calls and self.opened:
            return BAD_CALL  # call markup the engine's parser did not turn into a call
        return None


def _formed(call: Mapping[str, Any]) -> bool:
    """A call with a name and arguments that are a JSON object."""
    function = call.get("function")
    if not isinstance(function, Mapping) or not function.get("name"):
        return False
    arguments = function.get("arguments")
    if isinstance(arguments, Mapping):
        return True
    try:
        return isinstance(orjson.loads(arguments or "{}"), dict)
    except (orjson.JSONDecodeError, TypeError):
        return False


class Sessions:
    def __init__(
        self,
        store: SessionStore,
        pools: Mapping[str, EnginePool],
        background: set[asyncio.Task[None]],
    ) -> None:
        self.store = store
        self.pools = pools
        self.background = background

    async def open(self, key: SessionKey) -> Opened:
        try:
            fields = await self.store.read(key.id)
        except StoreUnavailable as exc:  # deliberately fail open: routed alone
            log.warning("session store unreachable, turn routed alone: %s", exc)
            return Opened(key, None, None, None, f"session store unreachable ({exc})")
        raw_signal, raw_replica = fields.get(SIGNAL), fields.get(REPLICA)
        replica = None
        if raw_replica is not None:
            tier, _, name = raw_replica.decode().partition("\0")
            replica = (tier, name)
        signal = None if raw_signal is None else raw_signal.decode()
        return Opened(key, SessionState.decode(fields.get(STATE)), signal, replica)

    def cached_chars(
        self,
        spec: SessionsConfig,
        opened: Opened,
        tier: str,
        generation: GenerationRequest,
        chars: int,
        now: float,
    ) -> int:
        """How much of this turn's conversation ``tier`` already caches: what this
        replica's pool knows a replica holds (prefix affinity sends the turn there), else
        the last turn's context if it ran on ``tier`` within ``cache_ttl_s`` (a provider's
        prompt cache, or another gateway replica's pick). Other tiers: nothing."""
        state = opened.state
        if state is None or state.tier != tier or now - state.at > spec.cache_ttl_s:
            return 0
        pool = self.pools.get(tier)
        local = 0
        if pool is not None and pool.replicas:
            block = pool.settings.prefix_block_chars
            keys = block_keys(canonical_prompt(generation), block)
            held = max(pool.index.matched_blocks(keys, r.key) for r in pool.replicas)
            local = held * block
        return min(chars, local or state.chars)

    async def record(
        self,
        spec: SessionsConfig,
        opened: Opened,
        state: SessionState,
        request_id: str,
    ) -> None:
        """Keep the turn's state (the signal it acted on is cleared)."""
        consumed = None if opened.signal is None else opened.signal.encode()
        try:
            await self.store.write(
                opened.key.id,
                state.encode(),
                request_id,
                consumed,
                spec.ttl_s,
                spec.max_sessions,
            )
        except StoreUnavailable as exc:
            log.warning("session %s not kept: %s", opened.key.short, exc)

    def finished(
        self,
        turn: SessionTurn,
        tier: str,
        finish_reason: str | None,
        watch: SessionWatch | None,
        replica: str | None,
    ) -> None:
        """The turn ended on ``tier``: its failure signal and the replica that served,
        written in the background (the answer is already with the client)."""
        notes: list[tuple[str, bytes]] = []
        signal = None if watch is None else watch.signal(finish_reason)
        if signal is not None:
            notes.append((SIGNAL, signal.encode()))
        if replica is not None and replica != turn.replica and self._several(tier):
            notes.append((REPLICA, f"{tier}\0{replica}".encode()))
        if notes:
            task = asyncio.create_task(self._note(turn.key, notes))
            self.background.add(task)
            task.add_done_callback(self.background.discard)

    def _several(self, tier: str) -> bool:
        """Whether ``tier``'s replica is a choice worth remembering: a pool of one replica
        has none (a pool this process does not run: assume it has)."""
        pool = self.pools.get(tier)
        return pool is None or len(pool.replicas) > 1

    async def _note(self, key: SessionKey, notes: list[tuple[str, bytes]]) -> None:
        for field, value in notes:
            try:
                await self.store.note(key.id, field, value)
            except StoreUnavailable as exc:
                log.warning("session %s: %s not noted: %s", key.short, field, exc)

    async def bad_verdict(self, request_id: str) -> bool:
        """A client called a request's answer bad: its session escalates on its next turn
        (False: the request belongs to no session still kept). Raises ``StoreUnavailable``."""
        session = await self.store.session_of(request_id)
        if session is None:
            return False
        return await self.store.note(session, SIGNAL, BAD_VERDICT.encode())
