"""``POST /v1/chat/completions``, the request side: the wire models and their translation
to the engine's ``GenerationRequest`` (the answer side: ``gateway.chat.render``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from backends.base import GenerationRequest, SamplingParams
from backends.messages import PART_MODALITIES
from gateway.types import IdShape
from gateway.wire.common import SamplingFields

CHAT_IDS = IdShape("chatcmpl-")


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    @field_validator("content")
    @classmethod
    def _known_parts(cls, content: Any) -> Any:
        for j, part in enumerate(content if isinstance(content, list) else ()):
            kind = part.get("type")
            if kind not in PART_MODALITIES:
                known = ", ".join(PART_MODALITIES)
                raise ValueError(f"part {j} has type {kind!r}; known types: {known}")
            if kind == "text" and not isinstance(part.get("text"), str):
                raise ValueError(f"text part {j} needs a string `text`")
        return content

    @model_validator(mode="after")
    def _has_content(self) -> ChatMessage:
        if self.content is None and self.role != "assistant":
            raise ValueError(f"a {self.role} message needs content")
        return self

    def as_dict(self) -> dict[str, Any]:
        """``model_dump(exclude_none=True)``, built by hand: this runs for every message."""
        out: dict[str, Any] = {"role": self.role}
        if self.content is not None:
            out["content"] = self.content
        if self.name is not None:
            out["name"] = self.name
        if self.tool_calls is not None:
            out["tool_calls"] = self.tool_calls
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.model_extra:
            out.update((k, v) for k, v in self.model_extra.items() if v is not None)
        return out

    def text(self) -> str:
        """The message's text; multi-part content keeps its text parts only."""
        if isinstance(self.content, str):
            return self.content
        if not self.content:
            return ""
        return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["function"]
    function: FunctionSpec


class NamedFunction(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type json_schema needs `json_schema`")
        return self


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    tools: list[ToolSpec] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)

    @model_validator(mode="after")
    def _consistent(self) -> ChatCompletionRequest:
        names = {t.function.name for t in self.tools or ()}
        if (
            isinstance(self.tool_choice, NamedToolChoice)
            and self.tool_choice.function.name not in names
        ):
            raise ValueError(f"tool_choice names {self.tool_choice.function.name!r}, not in tools")
        if self.tool_choice is not None and not names:
            raise ValueError("tool_choice is only allowed when tools are given")
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        return self

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def tool_dicts(self) -> tuple[dict[str, Any], ...] | None:
        if not self.tools:
            return None
        return tuple(t.model_dump(exclude_none=True) for t in self.tools)

    def tool_choice_value(self) -> str | dict[str, Any] | None:
        choice = self.tool_choice
        return choice.model_dump() if isinstance(choice, NamedToolChoice) else choice

    def response_format_dict(self) -> dict[str, Any] | None:
        if self.response_format is None:
            return None
        return self.response_format.model_dump(exclude_none=True, by_alias=True)


def to_generation(body: ChatCompletionRequest) -> GenerationRequest:
    """The engine request: the messages, tools and sampling of the body."""
    return GenerationRequest(
        request_id=CHAT_IDS.new(),
        model=body.model,
        sampling=SamplingParams(
            max_tokens=body.token_limit,
            temperature=body.temperature,
            top_p=body.top_p,
            seed=body.seed,
            stop=body.stop_tuple(),
            frequency_penalty=body.frequency_penalty,
            presence_penalty=body.presence_penalty,
        ),
        messages=tuple(m.as_dict() for m in body.messages),
        tools=body.tool_dicts(),
        tool_choice=body.tool_choice_value(),
        response_format=body.response_format_dict(),
        parallel_tool_calls=body.parallel_tool_calls,
        logprobs=bool(body.logprobs),
        top_logprobs=body.top_logprobs,
        passthrough=body.passthrough(),
    )
