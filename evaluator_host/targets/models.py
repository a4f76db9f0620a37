"""The API models of a job's model target (docs/api.md, "Model targets"): what ``POST /v1/jobs`` takes
as ``target``, what a row's ``generation`` and a job's ``usage`` look like."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evaluator_host.shared.bounds import INT64_MAX

__all__ = ["MAX_TEMPLATE_CHARS", "Generation", "Target", "TargetUsage", "TokenUsage"]

MAX_TEMPLATE_CHARS = 64 * 1024  # a prompt template's or system prompt's source, at most


class Target(BaseModel):
    """An OpenAI-compatible chat-completions endpoint that generates each row's ``outputs``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(
        max_length=2000,
        description="Up to the API's version, e.g. https://api.openai.com/v1 (POST {base_url}/chat/completions).",
    )
    model: str = Field(min_length=1, max_length=200)
    api_key_secret: str | None = Field(
        None,
        max_length=100,
        description="The NAME of a workspace secret (PUT /v1/secrets/{name}) whose value is sent as "
        "`Authorization: Bearer`; the value is never stored, logged or answered.",
    )
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1, le=1_000_000, description="Per call (the API's max_tokens).")
    prompt: str | None = Field(
        None,
        max_length=MAX_TEMPLATE_CHARS,
        description="A Jinja2 template rendered from the row (sandboxed; a missing column is a row error): "
        "the user message.",
    )
    messages_column: str | None = Field(
        None, min_length=1, max_length=200, description="A column holding an OpenAI messages list (instead of prompt)."
    )
    system: str | None = Field(None, max_length=MAX_TEMPLATE_CHARS, description="A system message put first.")
    concurrency: int = Field(16, ge=1, le=1024, description="Calls in flight at once (bounded by the workspace's cap).")
    timeout_s: float = Field(60.0, gt=0, le=600, description="Per call.")
    max_retries: int = Field(
        4, ge=0, le=10, description="Retries of a call after 429, 5xx, a timeout or a lost connection."
    )
    max_calls: int | None = Field(
        None, ge=1, le=INT64_MAX, description="Budget: model calls (retries count); the job stops at it."
    )
    max_tokens_total: int | None = Field(
        None, ge=1, le=INT64_MAX, description="Budget: total tokens; the job stops once reached."
    )

    @field_validator("base_url")
    @classmethod
    def _http(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value[:200]!r} is not an http:// or https:// URL")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ValueError("base_url takes no credentials, query or fragment (the key is a workspace secret)")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _one_prompt(self) -> Target:
        if (self.prompt is None) == (self.messages_column is None):
            raise ValueError("give exactly one of target.prompt / target.messages_column")
        return self


class TokenUsage(BaseModel):
    """Tokens of one call, as the endpoint reported them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class Generation(BaseModel):
    """A row's model call: what was sent, what came back, what it cost."""

    messages: list[dict[str, Any]] = Field(description="The messages sent (the rendered prompt).")
    text: str | None = Field(description="The answer's text (the row's outputs); null when it failed.")
    finish_reason: str | None = None
    usage: TokenUsage
    latency_ms: float = Field(description="Of the call that answered (retries' waits excluded).")
    attempts: int = Field(description="Calls sent for this row (1 + retries).")
    error: str | None = Field(None, description="Why no text: the row's result is an error with this message.")


class TargetUsage(BaseModel):
    """What a model-target job has used so far (generations stored)."""

    calls: int
    rows: int = Field(description="Rows with a stored generation.")
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cost_estimate: float | None = Field(
        None,
        description="From the operator's prices (EVALUATOR_HOST_TARGET_PRICES); null when none is set for the model.",
    )
