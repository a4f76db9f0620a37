"""Online evaluation's settings (``EVALUATOR_HOST_ONLINE_*``, ``EVALUATOR_HOST_OTLP_*``, ``SINK_RETRY_S``): the OTLP
receivers and their bounds, forwarding, assembly, scoring, backfills, budgets and score sinks.

Fields only: :class:`~evaluator_host.settings.Settings` is made of this class, which reads the environment;
its validators check these fields too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field
from pydantic_settings import NoDecode

__all__ = ["OnlineSettings"]


class OnlineSettings(BaseModel):
    """The online fields of :class:`~evaluator_host.settings.Settings`."""

    online_max_trace_spans: int = Field(
        10_000,
        ge=1,
        le=1_000_000,
        description="Online evaluation: most spans of one trace read for its evaluators (the first by start "
        "time and the root; a trace cut so says `truncated`). docs/online.md.",
    )
    online_export_endpoint: str | None = Field(
        None,
        description="Online evaluation: an OTLP/HTTP endpoint (e.g. http://127.0.0.1:4318; `/v1/traces` is appended "
        "to a URL without a path) each score is sent to as a `gen_ai.evaluation.result` span parented to the "
        "evaluated span; unset: scores are not sent. docs/online.md, Scores back into your tracing backend.",
    )
    online_export_headers: str | None = Field(
        None,
        description="Headers of the score export's requests, `key=value,key2=value2` (the form of "
        "OTEL_EXPORTER_OTLP_HEADERS, values URL-encoded), e.g. `Authorization=Bearer%20...`.",
    )
    online_export_signals: Literal["both", "spans", "logs"] = Field(
        "both",
        description="What each exported score is sent as: `spans` (a `gen_ai.evaluation.result` span, to "
        "`/v1/traces`), `logs` (an OTLP log record, event `gen_ai.evaluation.result`, to `/v1/logs`) or `both`.",
    )
    otlp_forward_endpoint: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Online evaluation: OTLP/HTTP endpoints (comma-separated; `/v1/traces` is appended to a URL "
        "without a path) every span the default workspace receives is forwarded to, unchanged, as OTLP/HTTP "
        "protobuf (a workspace's own: PATCH /v1/workspaces/{id} `forwarding`). docs/online.md, Forwarding.",
    )
    otlp_forward_headers: str | None = Field(
        None,
        description="Headers of the forwarded requests, `key=value,key2=value2` as OTEL_EXPORTER_OTLP_HEADERS "
        "writes them (values URL-encoded); `{{secret:NAME}}` in a value is the default workspace's secret NAME.",
    )
    online_forward_max_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description="Most span bytes held for forwarding (every endpoint, this process); what does not fit is "
        'dropped and counted (evaluator_host_online_forwarded_spans_total{outcome="dropped"}), never waited for.',
    )
    otlp_grpc_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="Online evaluation: the port of the OTLP/gRPC trace receiver (`TraceService/Export`, on "
        "`host`; the image and compose file use 4317); unset: gRPC is not served. Same keys, bounds and answers "
        "as POST /v1/traces.",
    )
    otlp_grpc_tls_cert: Path | None = Field(
        None,
        description="PEM certificate (chain) of the OTLP/gRPC receiver; with `otlp_grpc_tls_key` it serves TLS, "
        "else plaintext.",
    )
    otlp_grpc_tls_key: Path | None = Field(None, description="PEM private key of `otlp_grpc_tls_cert`.")
    online_backlog_max: int = Field(
        100_000,
        ge=1,
        description="Online scores queued (not yet scored) at most, all workspaces; a trace routed while the "
        "backlog is full gets its score rows stored as 'dropped' (counted, never scored).",
    )
    online_scoring_concurrency: int = Field(
        4, ge=1, le=256, description="Online scoring batches (each one evaluator's rows) run at once per service."
    )
    online_scoring_batch: int = Field(
        64,
        ge=1,
        le=4096,
        description="Most queued online scores one service claims at a time, and one evaluator call runs, for "
        "rules whose rows are slow or not measured yet.",
    )
    online_scoring_batch_max: int = Field(
        256,
        ge=1,
        le=4096,
        description="Most rows a claim and one evaluator call grow to for a rule whose rows are fast: as many as "
        "its last call's pace runs in a quarter second (at least online_scoring_batch).",
    )
    online_claim_s: float = Field(
        120.0,
        gt=0,
        description="How long a claimed online score is held; a claim past it (its service died) is claimed again.",
    )
    online_poll_s: float = Field(
        0.2, gt=0, description="How often the online router and scorer look for ready traces and queued scores."
    )
    idle_poll_max_s: float = Field(
        2.0,
        gt=0,
        le=60.0,
        description="Longest wait of a background loop (assembly, routing, scoring, backfill planning, sink "
        "delivery) that keeps finding nothing: its period doubles up to this while idle, back to its own at any "
        "local event (spans received, a backfill created); another service's work on a shared database is found "
        "within it.",
    )
    online_backfill_max_targets: int = Field(
        100_000,
        ge=1,
        description="Most targets one online backfill (POST /v1/online-rules/{id}/backfill) scores; a larger "
        "limit is refused (422).",
    )
    online_backfill_direct: bool = Field(
        True,
        description="A fast rule's backfill (its rows under 5 ms each, no budgets, not session level) is scored page "
        "by page by its planner, in bulk; false: every page is queued for the scorer, row by row (slower).",
    )
    sink_retry_s: float = Field(
        2.0,
        ge=0.1,
        le=300.0,
        description="A score sink delivery refused for a reason worth retrying (connection refused, 429, 5xx) is "
        "tried again after this long, doubling each time up to 5 min (jittered), until 20 attempts.",
    )
    online_budget_minute_s: float = Field(
        60.0,
        ge=1.0,
        le=60.0,
        description="The minute of the online rules' per-minute budgets (limits.scores_per_minute, "
        "model_calls_per_minute): the span their scores and calls are counted over and age out of. A minute "
        "unless shortened (at most 60 s), e.g. to watch a budget's whole cycle in a drill or a test in seconds.",
    )
    online_max_attempts: int = Field(
        5,
        ge=1,
        description="Attempts of one online score after infrastructure failures (the sandbox unavailable); "
        "the last one stores a sandbox_error result.",
    )
    online_max_body_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024,
        description="POST /v1/traces (OTLP): most bytes of a body, both as sent and after gzip (inflating stops "
        "there: 413).",
    )
    online_max_json_bytes: int = Field(
        4 * 1024 * 1024,
        ge=1024,
        description="POST /v1/traces: most bytes of an OTLP/JSON body after gzip, and at most this / 16 objects and "
        "arrays in it (413 above; protobuf bodies have ONLINE_MAX_BODY_BYTES): a JSON parse peaks under 24 times "
        "this.",
    )
    online_decode_concurrency: int = Field(
        2,
        ge=1,
        description="POST /v1/traces: bodies inflated and parsed at once (others wait their turn); with the body "
        "bounds it bounds the receiver's memory (docs/security.md).",
    )
    online_max_spans: int = Field(10_000, ge=1, description="POST /v1/traces: most spans in one request (400 above).")
    online_max_attributes: int = Field(
        256,
        ge=1,
        description="Most attributes of one span (and of its resource, and of each event) and most events per span; "
        "a span over it is rejected (OTLP partial success), the others of the request are stored.",
    )
    online_max_attribute_bytes: int = Field(
        256 * 1024,
        ge=16,
        description="Most bytes of one attribute's value (a string's UTF-8; arrays and maps: all their values); "
        "a span with a larger value is rejected (OTLP partial success).",
    )
    online_max_name_chars: int = Field(
        1024, ge=1, description="Longest span name and attribute key; a span with a longer one is rejected."
    )
    online_max_stored_spans: int = Field(
        5_000_000,
        ge=1,
        description="Raw spans stored at most, shared equally by the workspaces: a workspace holding this / the "
        "number of workspaces gets 503 with Retry-After from POST /v1/traces (OTLP exporters retry) until "
        "retention makes room, the others are not refused (counted in /metrics).",
    )
    online_store_spans: bool = Field(
        True,
        description="Off: POST /v1/traces decodes, checks and answers but stores nothing (the receive-and-drop "
        "floor `make bench` compares with; never for real use).",
    )
    online_quiet_period_s: float = Field(
        2.0,
        gt=0,
        description="A trace is ready once its root span has ended and no span came for this long (a complete "
        "trace sooner: ONLINE_SETTLE_S).",
    )
    online_settle_s: float = Field(
        0.25,
        gt=0,
        description="A trace whose root span has ended and whose every span's parent is among its spans (no "
        "orphan) is ready once no span came for this long, not the whole quiet period (equal to "
        "ONLINE_QUIET_PERIOD_S or above: off, every trace waits the quiet period).",
    )
    online_trace_timeout_s: float = Field(
        300.0,
        gt=0,
        description="A trace whose root span never arrives ended is made ready anyway this long after its "
        "last span (scored with the spans it has).",
    )
    online_span_retention_s: float = Field(
        7 * 86400.0,
        gt=0,
        description="Raw spans older than this are deleted, with their traces once routed (or as old).",
    )
    online_assembly_s: float = Field(
        0.1,
        gt=0,
        description="How often assembly marks quiet traces ready (up to this much is added to a trace's "
        "scoring lag; retention sweeps every 10 s).",
    )
