"""The compatibility policy: what happens to a request field the gateway does not honour.

Real clients (Codex CLI, Claude Code, agent SDKs) send more than any tier can honour.
Each route family keeps a table of its fields, and this module applies it:

- ``honoured``: the route does what the field asks.
- ``refused``: the field changes the output and the tier cannot honour it (``background:
  true``, ``conversation``): a 400 naming it, before anything is dispatched or charged.
  A field the table does not list is refused too.
- ``hint``: the field changes nothing the gateway must guarantee (``prompt_cache_key``,
  ``client_metadata``, ``include`` of encrypted reasoning, a reasoning summary on an
  engine with no reasoning mode): accepted, and named in the ``x-tiergate-ignored``
  response header and the request's trace (``tiergate.ignored``).
- hosted tools the gateway cannot run (``web_search``, ``file_search``…): removed from
  what the engine sees and named the same way (``tools:web_search``), unless the
  tenant's policy says ``compat: strict``: then a 400 naming the tool.

The result is one frozen ``Compat``; the route adds its ``headers()`` to the answer and
calls ``record()`` once the request's trace is open.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.errors import InvalidRequest
from gateway.telemetry.tracing import current_trace

FieldKind = Literal["honoured", "hint", "refused"]
Mode = Literal["lenient", "strict"]
HEADER = "x-tiergate-ignored"


@dataclass(frozen=True, slots=True)
class Compat:
    """What the gateway accepted without honouring: hint fields (their paths, e.g.
    ``reasoning`` or ``input[3]``) and the hosted tools it removed (their types)."""

    ignored: tuple[str, ...] = ()
    stripped_tools: tuple[str, ...] = ()

    @property
    def named(self) -> tuple[str, ...]:
        return (*self.ignored, *(f"tools:{t}" for t in self.stripped_tools))

    def merged(self, other: Compat) -> Compat:
        if not (other.ignored or other.stripped_tools):
            return self
        if not (self.ignored or self.stripped_tools):
            return other
        return Compat(
            _unique((*self.ignored, *other.ignored)),
            _unique((*self.stripped_tools, *other.stripped_tools)),
        )

    def headers(self) -> dict[str, str]:
        named = self.named
        return {HEADER: ", ".join(named)} if named else {}

    def record(self) -> None:
        """Name what was ignored on the current request's trace."""
        if self.named:
            current_trace().set({"tiergate.ignored": self.named})


def _unique(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def unsupported(param: str, why: str) -> InvalidRequest:
    """The 400 for a field the gateway cannot honour."""
    return InvalidRequest(
        f"`{param}` is not supported by this gateway: {why}",
        param=param,
        code="unsupported_parameter",
    )


def review(present: Iterable[str], kinds: Mapping[str, FieldKind]) -> Compat:
    """The hints among the fields ``present`` (set to something other than their
    default); a refused field, or one ``kinds`` does not list, is a 400 naming it."""
    hints = []
    for name in sorted(present):
        kind = kinds.get(name, "refused")
        if kind == "refused":
            listed = "it changes the answer and no tier can honour it"
            raise unsupported(name, listed if name in kinds else "unknown field")
        if kind == "hint":
            hints.append(name)
    return Compat(ignored=tuple(hints))


def hosted_tools(
    types: Sequence[str], runnable: frozenset[str], mode: Mode, param: str = "tools"
) -> tuple[list[int], Compat]:
    """Of the tools whose ``types`` are given, the indices of those the client runs
    (``runnable``), and the others as stripped; under ``strict`` a hosted tool is a 400."""
    kept: list[int] = []
    stripped: list[str] = []
    for index, kind in enumerate(types):
        if kind in runnable:
            kept.append(index)
            continue
        if mode == "strict":
            raise InvalidRequest(
                f"`{param}[{index}]` is a hosted tool ({kind}) that this gateway cannot run "
                "(the tenant's compat policy is strict)",
                param=f"{param}[{index}]",
                code="unsupported_tool",
            )
        stripped.append(kind)
    return kept, Compat(stripped_tools=_unique(stripped))
