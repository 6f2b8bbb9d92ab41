"""Pieces shared by the chat and completions wire models."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from backends.base import TokenLogprob
from gateway.errors import InvalidRequest
from gateway.wire.compat import Compat
from gateway.wire.fields import passthrough_fields
from routers.session import SessionHint

M = TypeVar("M", bound=BaseModel)


# OpenAI's bounds on ``metadata`` (chat, completions, responses): annotation only.
METADATA_KEYS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512


def _bounded(pairs: dict[str, str]) -> dict[str, str]:
    if len(pairs) > METADATA_KEYS:
        raise ValueError(f"at most {METADATA_KEYS} key-value pairs, not {len(pairs)}")
    for key, value in pairs.items():
        if len(key) > METADATA_KEY_CHARS:
            raise ValueError(f"the key {key[:16]!r}… is over {METADATA_KEY_CHARS} characters")
        if len(value) > METADATA_VALUE_CHARS:
            raise ValueError(f"the value of {key!r} is over {METADATA_VALUE_CHARS} characters")
    return pairs


# A request's annotation: string keys and values, within OpenAI's bounds (else a 400
# naming ``metadata``). The gateway records it (ledger event, trace); it changes no output.
Metadata = Annotated[dict[str, str], AfterValidator(_bounded)]


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    include_usage: bool = False


class SamplingFields(BaseModel):
    """Fields both endpoints share; unknown fields are accepted and logged at debug."""

    model_config = ConfigDict(extra="allow", frozen=True)

    model: str = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=1)
    stop: str | list[str] | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    seed: int | None = None
    user: str | None = None
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    metadata: Metadata | None = None

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def stop_tuple(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def passthrough(self) -> dict[str, Any]:
        """The fields beyond the modelled ones, for engines that forward them to an
        OpenAI-compatible server (a 400 naming the first elsewhere). ``metadata`` joins
        them only with ``store: true``, what OpenAI keeps it for; else it is the
        gateway's alone (ledger, trace) and no engine sees it."""
        extra = passthrough_fields(self.model_extra)
        if self.metadata and "store" in extra:
            extra["metadata"] = self.metadata
        return extra

    def annotations(self) -> dict[str, str] | None:
        """The client's ``metadata``, for the ledger event and the trace."""
        return self.metadata or None

    def session(self) -> SessionHint | None:
        """The conversation's name where the body gives one (``prompt_cache_key``: OpenAI
        keeps one conversation's prefix together by it), else the person's (``user``),
        which scopes the name derived from the conversation (``routers/session.py``)."""
        return body_session(self.model_extra, self.user)

    def compat(self) -> Compat:
        """``metadata`` that no engine is sent is named as ignored (``x-tiergate-ignored``)."""
        if self.metadata and "store" not in passthrough_fields(self.model_extra):
            return Compat(ignored=("metadata",))
        return Compat()


def body_session(extra: Mapping[str, Any] | None, user: str | None) -> SessionHint | None:
    """``prompt_cache_key`` (a string), else ``user``, as a session hint."""
    key = (extra or {}).get("prompt_cache_key")
    if isinstance(key, str) and key:
        return SessionHint("prompt_cache_key", key)
    return SessionHint("user", user) if user else None


def logprobs_body(entries: tuple[TokenLogprob, ...] | None) -> dict[str, Any] | None:
    """OpenAI's chat ``logprobs``: one entry per token, with its top alternatives."""
    if not entries:
        return None
    return {
        "content": [
            {
                "token": e.token,
                "logprob": e.logprob,
                "bytes": list(e.token_bytes),
                "top_logprobs": [
                    {"token": t, "logprob": lp, "bytes": list(b)} for t, lp, b in e.top
                ],
            }
            for e in entries
        ],
        "refusal": None,
    }


MAX_JSON_DEPTH = 64  # nesting levels of a request body (OpenAI's SDK schemas use under 20)


def too_deep(data: Any, limit: int = MAX_JSON_DEPTH) -> str | None:
    """The path of the first value nested deeper than ``limit`` (None: none is). Every
    request body is checked once, here at parse, so nothing below the edge meets one it
    cannot write back (orjson refuses to serialise past 255 levels)."""
    stack: list[tuple[Any, str, int]] = [(data, "", 1)]
    while stack:
        value, path, depth = stack.pop()
        if depth > limit:
            return path
        if isinstance(value, dict):
            stack.extend(
                (v, f"{path}.{k}" if path else str(k), depth + 1) for k, v in value.items()
            )
        elif isinstance(value, list):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value))
    return None


def load_json(raw: bytes, depth: int | None = MAX_JSON_DEPTH) -> Any:
    """A request body as JSON: 400 when it is not JSON or nests deeper than ``depth``
    levels (None: the caller checks the parts it keeps), naming the top-level field that
    does."""
    try:
        data: Any = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the body is not valid JSON: {exc}") from exc
    path = None if depth is None else too_deep(data, depth)
    if path is not None:
        param = path.split(".", 1)[0].split("[", 1)[0] or None
        shown = path if len(path) <= 120 else path[:117] + "..."
        raise InvalidRequest(
            f"{param or 'body'}: JSON nested deeper than {depth} levels (at {shown})",
            param=param,
            code="invalid_value",
        )
    return data


def parse_body(model: type[M], raw: bytes, depth: int | None = MAX_JSON_DEPTH) -> M:
    """Decode and validate a request body; a failure names the offending ``param``."""
    data = load_json(raw, depth)
    if not isinstance(data, dict):
        raise InvalidRequest("the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = [str(p) for p in first["loc"]]
        param = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc).lstrip(".")
        raise InvalidRequest(
            f"{param or 'body'}: {first['msg']}", param=param or None, code="invalid_value"
        ) from exc
