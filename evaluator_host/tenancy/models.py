"""API models of workspaces, keys, quotas, secrets and the egress allowlist."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from datetime import datetime
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evaluator_host.shared.bounds import INT64_MAX
from evaluator_host.shared.text import StoredText
from evaluator_host.tenancy.reserved import DEFAULT_WORKSPACE

__all__ = [
    "DEFAULT_WORKSPACE",
    "ApiKey",
    "ApiKeyCreated",
    "ApiKeyList",
    "ForwardEndpoint",
    "KeyCreate",
    "Quotas",
    "Secret",
    "SecretList",
    "SecretPut",
    "Workspace",
    "WorkspaceCreate",
    "WorkspaceList",
    "WorkspacePatch",
    "check_headers",
    "destination",
    "NetworkEntry",
    "destinations",
    "header_templates",
    "injected_secrets",
    "network_entries",
    "HEADER_VALUE",
    "SECRET_REF",
]

_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")


def destination(entry: str) -> str:
    """A ``host:port`` egress destination, normalized (lower case); ``ValueError`` when it is not one:
    the host must be a DNS name (no IP literal, no wildcard) and the port 1-65535."""
    host, sep, port = entry.strip().lower().rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{entry[:100]!r} is not host:port (e.g. api.openai.com:443)")
    host = host.rstrip(".")
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    else:
        raise ValueError(f"{entry[:100]!r}: IP literals are refused; name the host")
    labels = host.split(".")
    if len(host) > 253 or len(labels) < 2 or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"{entry[:100]!r}: {host!r} is not a fully qualified DNS name")
    return f"{host}:{int(port)}"


# ``{{secret:NAME}}`` in a header value: the workspace secret the egress proxy puts there
SECRET_REF = re.compile(r"\{\{secret:([A-Za-z_][A-Za-z0-9_]{0,99})\}\}")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")
# headers that frame or route a request, or speak to the proxy: the proxy sets them itself
_FRAMING = frozenset(
    {"host", "connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "content-length", "expect"}
)
MAX_HEADER_TEMPLATE = 8192
HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")  # one line of printable ASCII (what every server reads alike)


def check_headers(value: dict[str, str]) -> dict[str, str]:
    """``value`` when every header is a token name, not a framing or proxy header, given once, and its value
    one line of printable ASCII where ``{{`` only starts a ``{{secret:NAME}}`` reference; else ``ValueError``."""
    seen: set[str] = set()
    for name, template in value.items():
        lower = name.lower()
        if not _TOKEN.fullmatch(name):
            raise ValueError(f"{name[:100]!r} is not a header name")
        if lower in _FRAMING or lower.startswith("proxy-"):
            raise ValueError(f"header {name!r} is set by the proxy itself")
        if lower in seen:
            raise ValueError(f"header {name!r} is given twice")
        seen.add(lower)
        if len(template) > MAX_HEADER_TEMPLATE or not HEADER_VALUE.fullmatch(template):
            raise ValueError(
                f"header {name!r}: a value is one line of printable ASCII, at most {MAX_HEADER_TEMPLATE} characters"
            )
        if "{{" in SECRET_REF.sub("", template):
            raise ValueError(f"header {name!r}: '{{{{' starts only a '{{{{secret:NAME}}}}' reference")
    return value


class NetworkEntry(BaseModel):
    """A ``network`` destination whose requests the egress proxy completes with headers the code never
    sees: ``{"host": "api.openai.com:443", "headers": {"Authorization": "Bearer {{secret:OPENAI_API_KEY}}"}}``.

    Each ``{{secret:NAME}}`` is replaced by the workspace secret ``NAME`` on the host, in the proxy, for
    requests to that destination only (HTTPS: the proxy ends the sandbox's TLS and makes its own to the
    host); the secret need not be (and should not be) in ``secrets``, which hands values to the code."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field(description="'host:port', as a plain entry of `network`.")
    headers: dict[str, str] = Field(
        min_length=1,
        max_length=10,
        description="Header name -> value the proxy sets on every request to `host` (replacing the code's own); "
        "'{{secret:NAME}}' in a value is the workspace secret NAME.",
    )

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        return destination(value)

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        return check_headers(value)


def network_entries(value: list[str | NetworkEntry]) -> list[str | NetworkEntry]:
    """``network`` normalized: plain ``host:port`` entries and :class:`NetworkEntry` ones, sorted by
    destination; ``ValueError`` for a destination given twice."""
    normal: dict[str, str | NetworkEntry] = {}
    for item in value:
        dest = destination(item) if isinstance(item, str) else item.host
        if dest in normal and not (isinstance(item, str) and isinstance(normal[dest], str)):
            raise ValueError(f"{dest} is given twice")
        normal[dest] = dest if isinstance(item, str) else item
    return [normal[d] for d in sorted(normal)]


def _entry(item: str | NetworkEntry | dict[str, object]) -> str | NetworkEntry:
    return NetworkEntry.model_validate(item) if isinstance(item, dict) else item


def destinations(network: Sequence[str | NetworkEntry | dict[str, object]]) -> list[str]:
    """The ``host:port`` of every entry (stored entries may be plain dicts)."""
    return [e if isinstance(e, str) else e.host for e in map(_entry, network)]


def header_templates(
    network: Sequence[str | NetworkEntry | dict[str, object]],
) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """(destination, ((header, template), ...)) for every entry that sets headers."""
    return tuple((e.host, tuple(e.headers.items())) for e in map(_entry, network) if isinstance(e, NetworkEntry))


def injected_secrets(templates: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]) -> list[str]:
    """The secret names the header templates refer to, each once."""
    names = [m for _dest, headers in templates for _name, t in headers for m in SECRET_REF.findall(t)]
    return list(dict.fromkeys(names))


class Quotas(BaseModel):
    """A workspace's limits; null (or absent) is unlimited. Past one, calls answer 429 with Retry-After."""

    model_config = ConfigDict(extra="forbid")

    max_concurrent_jobs: int | None = Field(None, ge=0, le=INT64_MAX, description="Jobs queued or running at once.")
    max_warm_workers: int | None = Field(
        None, ge=1, le=INT64_MAX, description="Workers its evaluators hold at once (calls beyond wait for one of them)."
    )
    max_dataset_bytes: int | None = Field(
        None,
        ge=0,
        le=INT64_MAX,
        description="Stored bytes: datasets (uploads, inline rows), jobs' stored results, OTLP spans.",
    )
    max_evaluations_per_s: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Cases evaluated per second through /v1/evaluate and .../evaluate (bursts of 1 s).",
    )


MAX_FORWARD_ENDPOINTS = 4


class ForwardEndpoint(BaseModel):
    """An OTLP/HTTP endpoint every span the workspace receives is forwarded to, unchanged (issue 52;
    ``online/receive/forwarding.py``): ``{"endpoint": "https://phoenix.example.com/v1/traces", "headers":
    {"Authorization": "Bearer {{secret:PHOENIX_KEY}}"}}``. Its ``host:port`` must be in the workspace's
    ``network_allow`` and resolve to public addresses (or be a name pinned in ``EVALUATOR_HOST_EGRESS_HOSTS``),
    checked when spans are sent, as a job's model target is (docs/security.md)."""

    model_config = ConfigDict(extra="forbid")

    endpoint: str = Field(
        min_length=1,
        max_length=2000,
        description="The OTLP/HTTP traces URL, e.g. https://host/v1/traces (`/v1/traces` is appended to a URL "
        "without a path).",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        max_length=10,
        description="Header name -> value on every forwarded request; '{{secret:NAME}}' in a value is the "
        "workspace secret NAME (filled in when sending, never shown or logged).",
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value[:100]!r} is not an http:// or https:// URL (OTLP/HTTP)")
        if parts.username or parts.password:
            raise ValueError("credentials go in `headers` ({{secret:NAME}}), not in the URL")
        return value.strip()

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        return check_headers(value)


class Workspace(BaseModel):
    """A workspace."""

    id: str
    name: str
    created_at: datetime
    quotas: Quotas
    network_allow: list[str] = Field(description="'host:port' its evaluators may declare in `network`.")
    forwarding: list[ForwardEndpoint] = Field(
        default_factory=list,
        description="OTLP/HTTP endpoints every span it receives is forwarded to, unchanged (docs/online.md, "
        "Forwarding).",
    )


class WorkspaceList(BaseModel):
    """``GET /v1/workspaces``."""

    data: list[Workspace]
    count: int


class WorkspaceCreate(BaseModel):
    """``POST /v1/workspaces``."""

    model_config = ConfigDict(extra="forbid")

    name: StoredText = Field(min_length=1, max_length=200)


class WorkspacePatch(BaseModel):
    """``PATCH /v1/workspaces/{id}``: the fields given replace the stored ones (quotas key by key)."""

    model_config = ConfigDict(extra="forbid")

    name: StoredText | None = Field(None, min_length=1, max_length=200)
    quotas: Quotas | None = None
    network_allow: list[str] | None = Field(None, max_length=100, description="'host:port' entries (DNS names).")
    forwarding: list[ForwardEndpoint] | None = Field(
        None,
        max_length=MAX_FORWARD_ENDPOINTS,
        description="OTLP/HTTP endpoints every span is forwarded to (replaced; [] stops forwarding).",
    )

    @field_validator("network_allow")
    @classmethod
    def _destinations(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else sorted({destination(v) for v in value})


class KeyCreate(BaseModel):
    """``POST /v1/workspaces/{id}/keys``."""

    model_config = ConfigDict(extra="forbid")

    name: StoredText = Field(min_length=1, max_length=200)


class ApiKey(BaseModel):
    """A key's metadata: never the key."""

    id: str
    workspace_id: str
    name: str
    prefix: str = Field(description="The key's first characters, to recognise it.")
    created_at: datetime
    last_used_at: datetime | None = Field(description="Last request with it (written within 30 s).")
    revoked_at: datetime | None


class ApiKeyCreated(ApiKey):
    """A new key: ``key`` is shown this once (only its hash is stored)."""

    key: str


class ApiKeyList(BaseModel):
    """``GET /v1/keys``."""

    data: list[ApiKey]
    count: int


class SecretPut(BaseModel):
    """``PUT /v1/secrets/{name}``."""

    model_config = ConfigDict(extra="forbid")

    value: str = Field(description="Stored encrypted; never shown again.")


class Secret(BaseModel):
    """A secret as listed: its name and times, never its value."""

    name: str
    created_at: datetime
    updated_at: datetime


class SecretList(BaseModel):
    """``GET /v1/secrets``."""

    data: list[Secret]
    count: int
