"""Where replicas share agent sessions: each session's state, signal and replica.

A session (``routers/session.py``) is one hash of three fields: ``state`` (what routing
decided on its last turn, written once per turn), ``signal`` (a failure seen after a turn
or a bad verdict on it, read and cleared by the next turn) and ``replica`` (the engine
replica that served its last turn, for prefix affinity on every replica). Separate fields,
so a turn's write never overwrites the signal that arrived while it ran. Each session
expires ``ttl_s`` after its last turn, and at most ``max_sessions`` are kept (the least
recently used beyond that are dropped). A request id maps to its session for as long,
so ``/v1/feedback`` finds the session of the request it judges: the latest
``max_sessions x REQUESTS_PER_SESSION`` requests, the older ones forgotten first.

``MemorySessionStore`` here (one process); ``RedisSessionStore`` in
``policies/stores/sessions_redis.py`` (keys in docs/redis-keys.md).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Protocol

STATE, SIGNAL, REPLICA = "state", "signal", "replica"
FIELDS = (STATE, SIGNAL, REPLICA)
REQUESTS_PER_SESSION = 16  # the request index: this many per kept session, at most


class SessionStore(Protocol):
    async def read(self, session: str) -> dict[str, bytes]:
        """The session's fields (empty: no such session, or it expired)."""
        ...

    async def write(
        self,
        session: str,
        state: bytes,
        request_id: str,
        consumed: bytes | None,
        ttl_s: float,
        max_sessions: int,
    ) -> None:
        """Keep the state after a turn, clear the signal it ``consumed`` (a newer one
        stays), map ``request_id`` to the session, and drop the least recently used
        sessions beyond ``max_sessions``."""
        ...

    async def note(self, session: str, field: str, value: bytes) -> bool:
        """Set ``signal`` or ``replica`` on a session that exists (False: it does not)."""
        ...

    async def session_of(self, request_id: str) -> str | None: ...


class MemorySessionStore:
    """One process: least recently used first out, expiry checked when read."""

    def __init__(self) -> None:
        self._sessions: OrderedDict[str, tuple[float, dict[str, bytes]]] = OrderedDict()
        self._requests: OrderedDict[str, tuple[float, str]] = OrderedDict()

    async def read(self, session: str) -> dict[str, bytes]:
        held = self._sessions.get(session)
        if held is None or held[0] <= time.monotonic():
            self._sessions.pop(session, None)
            return {}
        return dict(held[1])

    async def write(
        self,
        session: str,
        state: bytes,
        request_id: str,
        consumed: bytes | None,
        ttl_s: float,
        max_sessions: int,
    ) -> None:
        now = time.monotonic()
        _, fields = self._sessions.pop(session, (0.0, {}))
        fields[STATE] = state
        if consumed is not None and fields.get(SIGNAL) == consumed:
            del fields[SIGNAL]
        self._sessions[session] = (now + ttl_s, fields)
        while len(self._sessions) > max_sessions:
            self._sessions.popitem(last=False)
        self._requests.pop(request_id, None)
        self._requests[request_id] = (now + ttl_s, session)
        while len(self._requests) > max_sessions * REQUESTS_PER_SESSION:
            self._requests.popitem(last=False)

    async def note(self, session: str, field: str, value: bytes) -> bool:
        held = self._sessions.get(session)
        if held is None or held[0] <= time.monotonic():
            return False
        held[1][field] = value
        return True

    async def session_of(self, request_id: str) -> str | None:
        held = self._requests.get(request_id)
        if held is None or held[0] <= time.monotonic():
            return None
        return held[1]
