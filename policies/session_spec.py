"""``routing.sessions``: an agent's turns routed as one conversation (docs/classifier.md).

A session is decided on its task and kept on its tier unless a failure signal or an
objective gain larger than the switch cost moves it; the state replicas share lives in
``policies/stores/sessions.py``.
"""

from __future__ import annotations

from pydantic import Field

from policies.frozen import Frozen


class SessionsConfig(Frozen):
    # A session idle this long is forgotten (its next turn starts it again, on its task).
    ttl_s: float = Field(3600.0, gt=0)
    # At most this many sessions are kept; the least recently used beyond it are dropped.
    max_sessions: int = Field(100_000, ge=1)
    # How long a tier is taken to keep a session's prefix cached after its last turn
    # (providers keep a prompt cache about five minutes; an engine's lasts while its KV
    # blocks do): within it the turn's prefix is priced at ``cached_input``.
    cache_ttl_s: float = Field(300.0, ge=0)
    # A failure signal (a retried turn, a bad verdict, a tool call the engine could not
    # form, an answer cut inside a tool call) moves the session one tier up.
    escalate: bool = True
