"""What a wire format implements to be served over the serving core.

A format is four functions and a framing (``gateway.core.respond.serve`` runs them):

- ``parse(raw) -> body``: the body, validated (400 naming the field otherwise); the
  body has ``model``, ``stream``, ``include_usage``, ``annotations()`` (the client's
  ``metadata`` pairs, recorded on the ledger event and the trace) and ``compat()`` (the
  hints it carries: ``gateway.wire.compat``, named in ``x-tiergate-ignored``);
- ``to_generation(body) -> GenerationRequest``: what the engine is asked;
- ``whole(run, text, final) -> dict``: the whole answer, from the text the run produced
  and its final ``Chunk`` (finish reason, usage, tool calls, every token's logprobs);
- ``events(run, chunks) -> AsyncIterator[dict]``: the stream, from the run's chunks;
- ``framing`` (``gateway.wire.sse``): how each event is written, the stream's last bytes,
  and the body of an error event after the first byte (``OPENAI_SSE``: ``data:`` lines
  and ``[DONE]``; ``named_events(error)``: ``event: TYPE`` lines and no ``[DONE]``, as
  Responses and Messages send, with the format's own error event).

``run`` is a ``RunView``: the request's id, ``created``, the answering ``model`` (known
once the run has opened) and whether the client asked for usage in the stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from backends.base import Chunk, GenerationRequest
from gateway.wire.compat import Compat
from gateway.wire.sse import OPENAI_SSE, Event, Framing


class WireBody(Protocol):
    @property
    def model(self) -> str: ...
    @property
    def stream(self) -> bool: ...
    @property
    def include_usage(self) -> bool: ...
    def annotations(self) -> Mapping[str, str] | None: ...
    def compat(self) -> Compat: ...


class RunView(Protocol):
    @property
    def request_id(self) -> str: ...
    @property
    def created(self) -> int: ...
    @property
    def model(self) -> str: ...
    @property
    def include_usage(self) -> bool: ...


Body = TypeVar("Body", bound=WireBody)


@dataclass(frozen=True, slots=True)
class WireFormat(Generic[Body]):
    parse: Callable[[bytes], Body]
    to_generation: Callable[[Body], GenerationRequest]
    whole: Callable[[RunView, str, Chunk], Event]
    events: Callable[[RunView, AsyncIterator[Chunk]], AsyncIterator[Event]]
    framing: Framing = OPENAI_SSE
