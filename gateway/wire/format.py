"""What a wire format implements to be served over the serving core: the whole contract.

A format (``WireFormat``) is its request model, its error shape, the shape of its
request ids (``gateway.types.IdShape``: a batch line's stable id takes it) and two steps
(``gateway.edge.respond.serve`` runs them):

- ``parse(raw) -> body``: the body, validated (400 naming the field otherwise);
- ``prepare(body, caller) -> Exchange``: the request translated for the core, by the
  caller's tenant (its compatibility mode) and, where the format keeps state, with it
  (Responses loads the stored conversation ``previous_response_id`` continues).

An ``Exchange`` is one request in its format: its ``Turn`` (what the core is asked:
the model, the engine request, stream or not, the client's metadata, the hints it
carries: ``gateway.wire.compat``), and how the answer is written:

- ``whole(run, text, final) -> event``: the whole answer, from the text the run
  produced and its final ``Chunk`` (finish reason, usage, tool calls, logprobs);
- ``events(run, chunks) -> AsyncIterator[event]``: the stream, from the run's chunks;
- ``framing`` (``gateway.wire.sse``): how each event is written, the stream's last
  bytes, and the body of an error event after the first byte.

``run`` is a ``RunView``: the request's id, ``created``, the answering ``model`` (known
once the run has opened) and whether the client asked for usage in the stream. A format
without state of its own is a ``SimpleFormat``: four functions and a framing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from pydantic import BaseModel

from backends.base import Chunk, GenerationRequest
from gateway.types import IdShape
from gateway.wire.common import parse_body
from gateway.wire.compat import Compat
from gateway.wire.errors import ErrorShape, openai_error
from gateway.wire.sse import OPENAI_SSE, Event, Framing
from policies.schema import GatewayConfig
from policies.stores.responses import ResponseStore
from policies.tenants import Principal
from routers.session import SessionHint


class RunView(Protocol):
    @property
    def request_id(self) -> str: ...
    @property
    def created(self) -> int: ...
    @property
    def model(self) -> str: ...
    @property
    def include_usage(self) -> bool: ...
    @property
    def session_id(self) -> str | None:
        """The session routing put the request in (``routing.sessions``), if any."""
        ...


@dataclass(frozen=True, slots=True)
class Turn:
    """A request as its format hands it to the core."""

    model: str
    generation: GenerationRequest
    stream: bool
    include_usage: bool
    metadata: Mapping[str, str] | None  # the client's annotation: ledger and trace
    compat: Compat  # the hints it carries (``x-tiergate-ignored``)
    session: SessionHint | None = None  # what the body says of its conversation


class PlainBody(Protocol):
    """A body that says all a ``Turn`` needs beside its engine request (OpenAI's chat and
    completions bodies: ``gateway.wire.common.SamplingFields``)."""

    @property
    def model(self) -> str: ...
    @property
    def stream(self) -> bool: ...
    @property
    def include_usage(self) -> bool: ...
    def annotations(self) -> Mapping[str, str] | None: ...
    def compat(self) -> Compat: ...
    def session(self) -> SessionHint | None: ...


def plain_turn(body: PlainBody, generation: GenerationRequest) -> Turn:
    return Turn(
        body.model,
        generation,
        body.stream,
        body.include_usage,
        body.annotations(),
        body.compat(),
        body.session(),
    )


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks, and what a format may read while preparing: the request's config
    snapshot, its headers (hint flags) and the stored Responses."""

    principal: Principal
    config: GatewayConfig
    headers: Mapping[str, str]
    responses: ResponseStore


class Exchange(Protocol):
    @property
    def turn(self) -> Turn: ...
    @property
    def framing(self) -> Framing: ...
    async def whole(self, run: RunView, text: str, final: Chunk) -> Event: ...
    def events(self, run: RunView, chunks: AsyncIterator[Chunk]) -> AsyncIterator[Event]: ...


Body = TypeVar("Body", bound=BaseModel)


class WireFormat(Protocol[Body]):
    @property
    def body_model(self) -> type[Body]: ...
    @property
    def error_shape(self) -> ErrorShape: ...
    @property
    def ids(self) -> IdShape: ...
    def parse(self, raw: bytes) -> Body: ...
    async def prepare(self, body: Body, caller: Caller) -> Exchange: ...


Whole = Callable[[RunView, str, Chunk], Event]
Events = Callable[[RunView, AsyncIterator[Chunk]], AsyncIterator[Event]]


@dataclass(frozen=True, slots=True)
class SimpleExchange:
    turn: Turn
    render: Whole
    stream: Events
    framing: Framing

    async def whole(self, run: RunView, text: str, final: Chunk) -> Event:
        return self.render(run, text, final)

    def events(self, run: RunView, chunks: AsyncIterator[Chunk]) -> AsyncIterator[Event]:
        return self.stream(run, chunks)


@dataclass(frozen=True, slots=True)
class SimpleFormat(Generic[Body]):
    """A format whose answer depends only on its request: translate, render, frame."""

    body_model: type[Body]
    translate: Callable[[Body, Caller], Turn]
    whole: Whole
    events: Events
    ids: IdShape  # what ``translate`` makes its request ids with
    framing: Framing = OPENAI_SSE
    error_shape: ErrorShape = openai_error

    def parse(self, raw: bytes) -> Body:
        return parse_body(self.body_model, raw)

    async def prepare(self, body: Body, caller: Caller) -> Exchange:
        turn = self.translate(body, caller)
        return SimpleExchange(turn, self.whole, self.events, self.framing)
