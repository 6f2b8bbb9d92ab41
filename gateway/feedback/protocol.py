"""``POST /v1/feedback``: a client's verdict on one of its answers."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    request_id: str = Field(min_length=1, max_length=200)  # the answer's x-request-id / id
    verdict: Literal["good", "bad"]
