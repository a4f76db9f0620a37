"""A rule's ``sinks`` (the API's shape) and a score's delivery state.

A sink is ``{"type": "phoenix" | "langfuse", "url", "name"?, credentials as secret references}``:

* ``phoenix``: ``url`` is Phoenix's base URL (``http://phoenix:6006``); ``api_key`` (optional,
  ``{{secret:NAME}}``) is sent as ``Authorization: Bearer …`` (Phoenix with auth enabled);
* ``mlflow``: ``url`` is the MLflow 3 tracking server (``http://mlflow:5000``); ``api_key`` (optional) as for
  Phoenix;
* ``otlp``: ``url`` is an OTLP/HTTP endpoint (``/v1/traces`` appended to a URL without a path): the score is
  sent as the ``gen_ai.evaluation.result`` span ``online/scoring/export.py`` sends, per rule; ``headers`` as for
  forwarding (``{{secret:NAME}}`` in a value);
* ``langfuse``: ``url`` is Langfuse's base URL (``https://cloud.langfuse.com``); ``public_key`` and
  ``secret_key`` (``secret_key`` must be a ``{{secret:NAME}}`` reference; ``public_key`` may be one) make
  the Basic authorization.

Credentials are never stored in clear in a rule: a reference is stored and shown, its value is filled in
when a score is sent. ``name`` is the score's name in that tool (default: the rule's name, else its id).
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evaluator_host.tenancy.models import SECRET_REF, check_headers

__all__ = ["MAX_SINKS", "Redeliver", "Redelivered", "Sink", "SinkState", "SINK_TYPES"]

MAX_SINKS = 4
SINK_TYPES = ("phoenix", "langfuse", "mlflow", "otlp")


class Sink(BaseModel):
    """Where a rule's scores are also written (docs/online.md, *Phoenix* and *Langfuse*)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["phoenix", "langfuse", "mlflow", "otlp"]
    url: str = Field(min_length=1, max_length=2000, description="The tool's base URL, e.g. http://phoenix:6006.")
    name: str | None = Field(
        None, min_length=1, max_length=200, description="The score's name there (default: the rule's)."
    )
    api_key: str | None = Field(None, max_length=200, description="phoenix, mlflow: '{{secret:NAME}}', a Bearer token.")
    public_key: str | None = Field(None, max_length=200, description="langfuse: the public key (or '{{secret:NAME}}').")
    secret_key: str | None = Field(None, max_length=200, description="langfuse: '{{secret:NAME}}' of the secret key.")
    headers: dict[str, str] = Field(
        default_factory=dict, max_length=10, description="Extra headers; '{{secret:NAME}}' in a value is a secret."
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value[:100]!r} is not an http:// or https:// URL")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ValueError("a sink's url is a base URL: no credentials, query or fragment")
        return value.strip().rstrip("/")

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        if "content-type" in {k.lower() for k in value}:
            raise ValueError("content-type is set from the sink's type")
        return check_headers(value)

    @model_validator(mode="after")
    def _credentials(self) -> Sink:
        for field, value in (("api_key", self.api_key), ("secret_key", self.secret_key)):
            if value is not None and not SECRET_REF.fullmatch(value):
                raise ValueError(f"{field} is a secret reference, '{{{{secret:NAME}}}}' (PUT /v1/secrets/NAME)")
        if self.public_key is not None and not (SECRET_REF.fullmatch(self.public_key) or "{{" not in self.public_key):
            raise ValueError("public_key is a key or a '{{secret:NAME}}' reference")
        if self.type == "langfuse" and (self.public_key is None or self.secret_key is None):
            raise ValueError("a langfuse sink needs public_key and secret_key ('{{secret:NAME}}')")
        if self.type != "otlp" and "authorization" in {k.lower() for k in self.headers}:
            raise ValueError("authorization is set from the sink's keys")
        if self.type == "otlp" and (self.api_key or self.public_key or self.secret_key):
            raise ValueError("an otlp sink takes headers ('{{secret:NAME}}' in a value), not keys")
        if self.type in ("phoenix", "mlflow") and (self.public_key is not None or self.secret_key is not None):
            raise ValueError(f"a {self.type} sink takes api_key, not public_key/secret_key")
        if self.type == "langfuse" and self.api_key is not None:
            raise ValueError("a langfuse sink takes public_key and secret_key, not api_key")
        return self


class SinkState(BaseModel):
    """A score's delivery to one sink of its rule."""

    type: str
    state: str = Field(description="pending | sending | delivered | failed | skipped")
    attempts: int
    error: str | None = None


RedeliverState = Literal["failed", "skipped"]


class Redeliver(BaseModel):
    """``POST …/sinks/redeliver``: which ended deliveries are sent again."""

    model_config = ConfigDict(extra="forbid")

    states: list[RedeliverState] = Field(
        default_factory=lambda: list[RedeliverState](["failed"]),
        min_length=1,
        max_length=2,
        description="Deliveries in these states are sent again (default: failed only).",
    )


class Redelivered(BaseModel):
    """What ``POST …/sinks/redeliver`` put back: ``requeued`` deliveries, sent again by the delivery loop."""

    requeued: int = Field(description="Deliveries put back to pending (attempts 0, the last error kept).")
    message: str | None = Field(None, description="Set when nothing was requeued: why (nothing was failed).")
