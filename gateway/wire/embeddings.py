"""``POST /v1/embeddings`` wire models: OpenAI's request and its ``list`` of vectors.

Here, below the core, because the core's embeddings entrance takes the request and writes
the answer (``gateway.core.embedding``) for every caller: the endpoint and a batch line."""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from gateway.types import IdShape
from gateway.wire.fields import passthrough_fields

MAX_INPUTS = 2048  # OpenAI's limit on inputs per request
MAX_TOKEN_IDS = 8192  # per token array (OpenAI's context for its embedding models)
EMBEDDING_IDS = IdShape("emb-")

Text = Annotated[str, StringConstraints(min_length=1)]
TokenId = Annotated[int, Field(ge=0)]
TokenIds = Annotated[list[TokenId], Field(min_length=1, max_length=MAX_TOKEN_IDS)]
EmbeddingInput = (
    Text
    | Annotated[list[Text], Field(min_length=1, max_length=MAX_INPUTS)]
    | TokenIds
    | Annotated[list[TokenIds], Field(min_length=1, max_length=MAX_INPUTS)]
)


def _is_id(value: Any) -> bool:
    return type(value) is int and value >= 0  # bools and floats are not token ids


def _input_problem(value: Any) -> str | None:
    """What is wrong with ``input`` (checked by hand: a union's errors name its members)."""
    if isinstance(value, str):
        return None if value else "must not be an empty string"
    if not isinstance(value, list) or not value:
        return "must be a non-empty string, list of strings, or token array(s)"
    if len(value) > MAX_INPUTS:
        return f"at most {MAX_INPUTS} inputs per request"
    if all(isinstance(v, str) for v in value):
        empty = next((i for i, v in enumerate(value) if not v), None)
        return None if empty is None else f"input[{empty}] must not be an empty string"
    if all(_is_id(v) for v in value):
        return None if len(value) <= MAX_TOKEN_IDS else f"at most {MAX_TOKEN_IDS} token ids"
    for i, ids in enumerate(value):
        if not isinstance(ids, list) or not ids or not all(_is_id(v) for v in ids):
            return (
                f"input[{i}]: every item must be of one kind: non-empty strings, "
                "token ids (integers >= 0), or non-empty arrays of token ids"
            )
        if len(ids) > MAX_TOKEN_IDS:
            return f"input[{i}]: at most {MAX_TOKEN_IDS} token ids"
    return None


class EmbeddingRequest(BaseModel):
    """Fields beyond these go to remote backends (``passthrough``) and get a 400 naming
    them on the in-process model."""

    model_config = ConfigDict(extra="allow", frozen=True)

    model: str = Field(min_length=1)
    input: EmbeddingInput
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _check_input(cls, value: Any) -> Any:
        problem = _input_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    def texts(self) -> list[str] | None:
        """The inputs as strings; None when they are token arrays."""
        if isinstance(self.input, str):
            return [self.input]
        if isinstance(self.input[0], str):
            return [str(t) for t in self.input]
        return None

    def token_arrays(self) -> list[list[int]]:
        items: list[Any] = [self.input] if isinstance(self.input, str) else list(self.input)
        if items and isinstance(items[0], int):
            return [[int(i) for i in items]]
        return [[int(i) for i in ids] for ids in items]

    def passthrough(self) -> dict[str, Any]:
        return passthrough_fields(self.model_extra)

    def upstream_body(self) -> dict[str, Any]:
        """What a remote backend forwards (its own ``model`` id is set there)."""
        body: dict[str, Any] = {"input": self.input, "encoding_format": self.encoding_format}
        for name in ("dimensions", "user"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        return {**body, **self.passthrough()}


def encode_vector(vector: npt.NDArray[np.float32], encoding_format: str) -> Any:
    if encoding_format == "base64":  # little-endian float32, as OpenAI sends it
        return base64.b64encode(vector.astype("<f4").tobytes()).decode()
    return vector.astype(np.float32)


def embeddings_body(
    model: str, vectors: npt.NDArray[np.float32], encoding_format: str, prompt_tokens: int
) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": encode_vector(v, encoding_format)}
            for i, v in enumerate(vectors)
        ],
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
