"""The wire shape of every error answer (docs/api.md): ``{"error": {type, message, line, column, ...}}``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ErrorBody", "ErrorDetail"]


class ErrorDetail(BaseModel):
    """What every error answer carries; some types add fields (``package``, ``runtime_id``, ``details``, …)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="NotFound, ValidationError, SyntaxError, BuildError, SandboxError, …")
    message: str
    line: int | None = None
    column: int | None = None


class ErrorBody(BaseModel):
    """Every error answer: ``{"error": {...}}``."""

    error: ErrorDetail
