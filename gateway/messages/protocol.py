"""``POST /v1/messages`` (Anthropic Messages) wire models: the request body, its tools and
tool choice, and the table of every other field under the compatibility policy
(``gateway.wire.compat``).

The models check shapes only; content blocks stay dicts, checked one by one where they
are translated (``gateway.messages.translate``), so a bad block's 400 names its place
(``messages[2].content[1]``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.wire.compat import Compat, FieldKind, review, unsupported

ToolName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")]
Block = dict[str, Any]


class MessageParam(BaseModel):
    """One turn: ``content`` as a string or a list of blocks. ``system`` turns inside
    ``messages`` are what Claude Code 2.1 sends for mid-conversation instructions."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    role: Literal["user", "assistant", "system"]
    content: str | list[Block]


class ToolParam(BaseModel):
    """A tool: a custom one (``type`` absent or ``custom``) the client runs; any other
    ``type`` (``web_search_20250305``, ``bash_20250124``…) is a tool whose definition
    Anthropic holds, which the gateway cannot give an engine."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: ToolName
    type: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    strict: bool | None = None


CUSTOM_TOOLS = frozenset({"custom"})


class ToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["auto", "any", "tool", "none"]
    name: ToolName | None = None
    disable_parallel_tool_use: bool | None = None


class Metadata(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    user_id: Annotated[str, Field(max_length=512)] | None = None


# Fields beyond the modelled ones (``gateway.wire.compat.review``: unlisted means refused).
MESSAGES_FIELDS: dict[str, FieldKind] = {
    "thinking": "hint",  # no tier here has a reasoning mode: the answer has no thinking blocks
    "context_management": "hint",  # edits of earlier thinking and tool results: none kept
    "service_tier": "hint",
    "inference_geo": "hint",
    "cache_control": "hint",  # automatic prompt caching: the engines cache prefixes anyway
    "speed": "hint",
    "container": "refused",  # the code-execution container is not served
    "mcp_servers": "refused",  # the gateway runs no MCP connector
}


class MessagesRequest(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    model: str = Field(min_length=1)
    messages: list[MessageParam] = Field(min_length=1)
    max_tokens: int = Field(ge=1)  # required, as Anthropic requires it
    system: str | list[Block] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(None, ge=0.0, le=1.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoice | None = None
    metadata: Metadata | None = None

    @property
    def include_usage(self) -> bool:
        return True  # ``message_delta`` always carries the usage

    def annotations(self) -> dict[str, str] | None:
        """``metadata.user_id``, for the ledger event and the trace."""
        user = self.metadata.user_id if self.metadata is not None else None
        return {"user_id": user} if user is not None else None

    def compat(self) -> Compat:
        """The hints this body carries; a field no tier can honour is a 400 naming it."""
        extra = self.model_extra or {}
        present = {name for name, value in extra.items() if value is not None}
        present.discard("output_config")
        found = review(present, MESSAGES_FIELDS)
        config = extra.get("output_config")
        if isinstance(config, dict):
            for key in sorted(set(config) - {"format"}):
                if key != "effort":  # how hard to think: no tier here has a reasoning mode
                    raise unsupported(f"output_config.{key}", "unknown field")
                found = found.merged(Compat(ignored=("output_config.effort",)))
        elif config is not None:
            raise unsupported("output_config", "it must be an object")
        if self.metadata is not None:
            found = found.merged(Compat(ignored=("metadata",)))
        return found

    def output_format(self) -> dict[str, Any] | None:
        """``output_config.format`` (structured outputs) as chat's ``response_format``."""
        config = (self.model_extra or {}).get("output_config")
        if not isinstance(config, dict) or config.get("format") is None:
            return None
        form = config["format"]
        if not isinstance(form, dict) or form.get("type") != "json_schema":
            raise unsupported("output_config.format", "only type json_schema is served")
        schema = form.get("schema")
        if not isinstance(schema, dict):
            raise unsupported("output_config.format.schema", "a json_schema needs a `schema`")
        return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}


class CountTokensRequest(BaseModel):
    """``POST /v1/messages/count_tokens``: the request without ``max_tokens``/``stream``."""

    model_config = ConfigDict(extra="allow", frozen=True)

    model: str = Field(min_length=1)
    messages: list[MessageParam] = Field(min_length=1)
    system: str | list[Block] | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoice | None = None

    def as_request(self) -> MessagesRequest:
        """The same fields as a Messages body (its hints reviewed the same way)."""
        fields = self.model_dump(exclude_none=True)
        fields.update(self.model_extra or {})
        return MessagesRequest.model_validate({**fields, "max_tokens": 1})
