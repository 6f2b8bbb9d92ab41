"""Admin API request models (``PUT /admin/api/budgets``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class BudgetUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scope: Literal["global", "tenant", "key"] = "tenant"
    tenant: str | None = None
    key_id: str | None = None
    limit_usd: float | None = Field(None, ge=0)  # null: uncapped
    window: Literal["daily", "monthly", "total"] = "daily"
    reset: bool = False

    @model_validator(mode="after")
    def _names(self) -> BudgetUpdate:
        if self.scope != "global" and not self.tenant:
            raise ValueError("tenant is required unless scope is global")
        if self.scope == "key" and not self.key_id:
            raise ValueError("key_id is required when scope is key")
        return self
