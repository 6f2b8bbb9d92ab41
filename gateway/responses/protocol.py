"""``POST /v1/responses`` wire models: the request body, its input items and tools, and
the table of every field under the compatibility policy (``gateway.wire.compat``).

The models check shapes only; ``gateway.responses.translate`` turns a body into a
``GenerationRequest`` and decides what the gateway does with each item and tool.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from gateway.wire.common import Metadata
from gateway.wire.compat import Compat, FieldKind, review, unsupported

FunctionName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
ItemStatus = Literal["in_progress", "completed", "incomplete"]


class _Item(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class MessageItem(_Item):
    """A message: ``content`` as a string or a list of parts (``input_text``,
    ``input_image``, ``input_file``; an assistant's ``output_text`` and ``refusal``)."""

    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[dict[str, Any]]
    id: str | None = None
    status: ItemStatus | None = None


class FunctionCallItem(_Item):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: FunctionName
    arguments: str
    id: str | None = None
    namespace: str | None = None
    status: ItemStatus | None = None


class FunctionCallOutputItem(_Item):
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[dict[str, Any]]
    id: str | None = None
    status: ItemStatus | None = None


class ReasoningItem(_Item):
    """A reasoning model's earlier thoughts: no tier here reads them (a hint)."""

    type: Literal["reasoning"]


class OtherItem(_Item):
    """Any other item type (``item_reference``, hosted tools' calls…): a 400 naming it."""

    type: str


def _item_kind(value: Any) -> str:
    kind = value.get("type", "message") if isinstance(value, dict) else getattr(value, "type", "")
    return kind if kind in _ITEM_KINDS else "other"


_ITEM_KINDS = {"message", "function_call", "function_call_output", "reasoning"}
InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[OtherItem, Tag("other")],
    Discriminator(_item_kind),
]


class FunctionTool(BaseModel):
    """Responses' flat function tool (no ``function`` wrapper)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["function"]
    name: FunctionName
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class NamespaceTool(BaseModel):
    """A named group of function tools (Codex sends one); the engine sees them flattened."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["namespace"]
    name: Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9_-]+$")]
    description: str | None = None
    tools: list[FunctionTool] = Field(min_length=1)


class HostedTool(BaseModel):
    """A tool the provider runs (``web_search``, ``file_search``, ``mcp``…)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    type: str


def _tool_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in ("function", "namespace") else "hosted"


Tool = Annotated[
    Annotated[FunctionTool, Tag("function")]
    | Annotated[NamespaceTool, Tag("namespace")]
    | Annotated[HostedTool, Tag("hosted")],
    Discriminator(_tool_kind),
]
RUNNABLE_TOOLS = frozenset({"function", "namespace"})


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(None, min_length=1, max_length=64)
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    description: str | None = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> TextFormat:
        if self.type == "json_schema" and (self.schema_ is None or self.name is None):
            raise ValueError("type json_schema needs `name` and `schema`")
        return self


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


# Every top-level field beyond the modelled ones, by what the gateway does with it.
RESPONSES_FIELDS: dict[str, FieldKind] = {
    "include": "hint",  # beyond REFUSED_INCLUDES: outputs of what never runs here
    "reasoning": "hint",  # no engine here has a reasoning mode: effort and summary change nothing
    "prompt_cache_key": "hint",
    "prompt_cache_retention": "hint",
    "prompt_cache_options": "hint",
    "client_metadata": "hint",  # Codex CLI's session ids
    "safety_identifier": "hint",
    "service_tier": "hint",
    "truncation": "hint",  # too long a conversation is a 400 either way, never cut
    "context_management": "hint",
    "stream_options": "hint",  # include_obfuscation: padding, no content
    "access_programs": "hint",
    "image": "hint",
    "conversation": "refused",  # the Conversations API is not served
    "prompt": "refused",  # stored prompt templates are not served
    "top_logprobs": "refused",
    "max_tool_calls": "refused",
    "moderation": "refused",
    "background_options": "refused",
}
# Values that ask for nothing beyond the default.
_DEFAULTS: dict[str, Any] = {"service_tier": ("auto", "default"), "truncation": ("disabled",)}
# ``include`` entries that add output the gateway does not produce.
REFUSED_INCLUDES = frozenset({"message.output_text.logprobs"})


class CreateResponse(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    model: str = Field(min_length=1)
    input: str | list[InputItem] = Field(min_length=1)
    instructions: str | None = None
    stream: bool = False
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    metadata: Metadata | None = None
    store: bool = True
    previous_response_id: str | None = None
    background: bool | None = None
    include: list[str] | None = None
    user: str | None = None

    @property
    def include_usage(self) -> bool:
        return True  # a Response always carries its usage

    def compat(self) -> Compat:
        """The hints this body carries; a field no tier can honour is a 400 naming it."""
        present = {
            name
            for name, value in (self.model_extra or {}).items()
            if value is not None and value not in _DEFAULTS.get(name, ())
        }
        if self.background:
            raise unsupported("background", "responses run in the request, not in the background")
        for index, entry in enumerate(self.include or ()):
            if entry in REFUSED_INCLUDES:
                raise unsupported(f"include[{index}]", f"{entry} is not produced")
        if self.include:  # encrypted reasoning, hosted tools' results: none are produced
            present.add("include")
        found = review(present, RESPONSES_FIELDS)
        if self.text is not None and self.text.verbosity not in (None, "medium"):
            found = found.merged(Compat(ignored=("text.verbosity",)))
        return found
