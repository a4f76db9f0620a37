"""The one Settings object (environment prefix ``EVALUATOR_HOST_``), its fields in three modules by concept.

Here the service's own (address, data, keys, limits, workers, jobs, queue, telemetry); online evaluation's
(the OTLP receivers, forwarding, scoring, backfills, budgets, sinks) in :mod:`.online`; the sandbox's and the
builds' (isolation, images, egress, package builds) in :mod:`.sandbox`. :class:`Settings` is one class made of
the three (pydantic collects the fields of its bases), so every reader still takes one ``Settings``.

Nothing else in the package reads the environment; components receive a
:class:`Settings` instance.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from evaluator_host.settings.online import OnlineSettings
from evaluator_host.settings.sandbox import SandboxSettings

__all__ = ["DATABASE_FILE", "Settings", "default_data_dir", "otlp_traces_endpoint"]

DATABASE_FILE = "evaluator-host.db"  # the data dir's SQLite database when no database_url is given


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/evaluator-host`` (``~/.local/share/evaluator-host``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "evaluator-host"


def otlp_traces_endpoint() -> str | None:
    """The OpenTelemetry SDK's own variables: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (the traces URL),
    else ``OTEL_EXPORTER_OTLP_ENDPOINT`` (a base URL: ``/v1/traces`` is appended); none when
    ``OTEL_SDK_DISABLED=true``, ``OTEL_TRACES_EXPORTER=none`` or the protocol they name is gRPC
    (the service speaks OTLP/HTTP only)."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true" or env.get("OTEL_TRACES_EXPORTER") == "none":
        return None
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
    if protocol.strip().lower() == "grpc":
        return None
    if url := env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip():
        return url
    if base := env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip():
        return base.rstrip("/") + "/v1/traces"
    return None


class Settings(OnlineSettings, SandboxSettings, BaseSettings):
    """Service configuration; every field can be set as ``EVALUATOR_HOST_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="EVALUATOR_HOST_", extra="ignore")

    host: str = Field("127.0.0.1", description="Address `serve` binds by default.")
    port: int = Field(8000, description="Port `serve` binds by default.")
    keep_alive_s: int = Field(
        75,
        ge=1,
        description="An idle HTTP connection is closed after this long (`serve`). Longer than clients' and proxies' "
        "own idle expiry (httpx 5 s, Node's fetch 4 s, HAProxy's pool, AWS ALB 60 s), so they drop an idle "
        "connection first: a request sent on a connection the service is closing at that moment fails, unretried. "
        "Behind a proxy that keeps idle connections longer, set it above the proxy's (docs/deploy.md).",
    )
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Names the service answers to besides localhost, 127.0.0.1, ::1 and the address it binds, "
        "comma-separated (a name, an IP address, *.example.com for its subdomains; * turns the check off): a "
        "request with another Host answers 421, one from a web page of another site (Origin) 403 — what "
        "keeps a web page from reaching the service through DNS rebinding. Keys or not.",
    )
    data_dir: Path = Field(default_factory=default_data_dir, description="Database, runtimes, worker dirs.")
    cache_dir: Path | None = Field(
        None,
        description="Build cache (process-backend runtimes, build logs and locks); default: data_dir. "
        "Safe to share between processes.",
    )
    database_url: str | None = Field(
        None,
        description="Database URL, e.g. postgresql://user:password@host:5432/db (PostgreSQL; the driver is "
        "ours); default: SQLite in data_dir. Migrated at start-up (docs/operations.md).",
    )
    blob_url: str | None = Field(
        None,
        description="s3://bucket/prefix: datasets' rows live in this S3-compatible bucket, shared by every replica "
        "(docs/deploy.md); default: in the database when it is PostgreSQL, else in data_dir. A data dir's "
        "datasets (and PostgreSQL's stored rows) move into it at start-up.",
    )
    blob_endpoint_url: str | None = Field(
        None, description="The bucket's S3 endpoint, e.g. https://minio.internal:9000; default: AWS's own."
    )
    blob_region: str | None = Field(None, description="The bucket's region; default: boto3's (AWS_REGION ...).")
    blob_access_key_id: str | None = Field(
        None, description="The bucket's access key id; default: boto3's chain (AWS_ACCESS_KEY_ID, a role ...)."
    )
    blob_secret_access_key: str | None = Field(
        None, description="The secret of blob_access_key_id; default: boto3's chain (AWS_SECRET_ACCESS_KEY ...)."
    )
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Comma-separated bearer keys; when set every /v1 call needs one."
    )
    admin_key: str | None = Field(
        None,
        description="Operator key: manages workspaces, their keys, quotas and network allowlists "
        "(/v1/workspaces, /v1/keys). Once set, every /v1 call needs a key.",
    )
    secrets_key: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Fernet key(s) encrypting stored secrets, comma-separated, newest first (rotation: "
        "put the new key first and restart: stored secrets are re-encrypted with it at start-up; then drop the old); "
        "default: a key generated once in data_dir/secrets.key.",
    )
    backend: Literal["auto", "process", "docker"] = Field(
        "auto", description="Sandbox backend: auto (docker when an engine answers), process or docker."
    )
    default_policy: Literal["auto", "standard", "restricted"] = Field(
        "auto",
        description="The least execution policy evaluators run under where their language offers it: "
        "'auto' is 'restricted' when the process backend can only apply rlimits (no namespaces), else "
        "'standard'; 'standard' opts out; 'restricted' everywhere. An evaluator may always ask for more.",
    )

    max_body_bytes: int = Field(16 * 1024 * 1024, description="Request bodies above answer 413.")
    log_level: str = Field("info", description="debug | info | warning | error (serve's --log-level wins).")
    log_format: Literal["json", "text"] = Field("json", description="Service logs: one JSON object per line, or text.")
    access_log: bool = Field(True, description="One log line per request (with its request id).")
    otel_endpoint: str | None = Field(
        default_factory=otlp_traces_endpoint,
        validate_default=True,
        description="OpenTelemetry tracing: the OTLP/HTTP collector, e.g. http://127.0.0.1:4318 (`/v1/traces` is "
        "appended to a URL without a path); tracing is off unless set (empty: off whatever OTEL_* says). "
        "docs/operations.md, Tracing.",
    )
    otel_service_name: str = Field(
        default_factory=lambda: os.environ.get("OTEL_SERVICE_NAME") or "evaluator-host",  # the SDK's variable
        description="`service.name` of the spans.",
    )
    otel_sample_ratio: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Share of the traces starting here that are kept (a caller's traceparent decides for its own).",
    )
    otel_shutdown_s: float = Field(
        5.0,
        gt=0,
        description="At stop, the longest the service waits for the collector to take the last spans "
        "(one that does not answer by then gets nothing more).",
    )
    fast_path: bool = Field(
        True,
        description="Answer the two evaluate routes without the framework's per-request machinery "
        "(same answers; off only to compare or to rule it out).",
    )
    max_code_bytes: int = Field(256 * 1024, description="Code above answers 422.")
    max_cases: int = Field(10_000, description="Most `cases` in one /evaluate call.")
    output_limit_bytes: int = Field(1024 * 1024, description="Cap on stdout+stderr per evaluation.")
    result_limit_bytes: int = Field(1024 * 1024, description="Cap on the returned value's JSON size.")
    max_response_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description="Cap on what one evaluate call's results add up to (past it: 422 ResponseTooLarge; use a job).",
    )
    max_stored_result_bytes: int = Field(
        64 * 1024,
        ge=1024,
        description="A job row's stored result at most (longer stdout/stderr/details are cut, marked truncated).",
    )
    max_job_result_bytes: int = Field(
        1024**3, ge=1024, description="What one job's stored results may add up to (past it the job fails)."
    )
    results_retention_days: float | None = Field(
        None,
        gt=0,
        description="Finished jobs (their results and inline rows) older than this many days are deleted by a "
        "periodic sweep; uploaded datasets stay. Off (none) by default.",
    )
    retention_sweep_s: float = Field(3600.0, gt=0, description="How often the retention sweep runs (when it is on).")

    max_workers: int = Field(
        16,
        description="Warm workers kept at most (all runtimes, all evaluators); enough for each evaluator in "
        "steady use to keep one: an evaluator without one pays a process or container start per call.",
    )
    max_worker_memory_mb: int | None = Field(
        None,
        gt=0,
        description="Total memory_mb of the workers alive at once (bound, starting, spare); past it idle "
        "workers are evicted, then calls answer 503 Overloaded with Retry-After. Default: 75% of the "
        "machine's memory (the smaller of MemTotal and the limit at the root of the cgroup hierarchy the "
        "service sees: in a container, the container's).",
    )
    idle_ttl_s: float = Field(300.0, description="An idle worker is discarded after this long.")
    worker_ack_timeout_s: float = Field(
        15.0,
        gt=0,
        description="A worker handed an evaluator says 'loading' at once; one silent this long is frozen "
        "(a paused container, a stopped process) and is replaced. Not a bound on the user's import time.",
    )
    max_uses: int = Field(100_000, description="A worker is discarded after this many evaluations.")
    batch_size: int = Field(256, description="Rows sent to a worker in one message (a job's chunk goes whole).")
    max_in_flight: int = Field(
        64,
        ge=1,
        le=1024,
        description="Rows of an async evaluator (async def / async function) one worker runs at once, awaiting "
        "together (an LLM judge's calls); an evaluator's settings.max_in_flight may only lower it.",
    )
    coalesce: bool = Field(
        True,
        description="Single-case calls to one evaluator that wait for a worker together share one message "
        "(each still gets its own row's outcome).",
    )

    admission_wait_factor: float = Field(
        2.0,
        ge=0,
        le=1000,
        description="An interactive call (/v1/evaluate, by id) whose evaluator's queue would keep it waiting "
        "longer than this × its timeout_s is answered at once 429 Overloaded with Retry-After (0: never); "
        "jobs always queue.",
    )

    job_parallelism: int = Field(2, ge=1, le=64, description="Workers a job uses at once unless it asks.")
    job_lease_s: float = Field(
        10.0,
        ge=1.0,
        le=3600.0,
        description="How long a service's hold on its unfinished jobs lasts unless renewed (it renews every quarter of "
        "it); a job whose lease ran out (its service was killed, or lost its host) is adopted and finished by another "
        "service on the same database within about 1.25× this (docs/operations.md, Job leases).",
    )
    idempotency_claim_s: float = Field(
        30.0,
        ge=1.0,
        le=3600.0,
        description="How long a request's claim of its Idempotency-Key lasts unless renewed (the request renews it "
        "every quarter of this while it runs); a retry after a claim ran out (its service died before it answered) "
        "runs the request instead of answering 409 (docs/api.md, Idempotency keys).",
    )
    max_running_jobs: int = Field(4, ge=1, description="Jobs executing at once; later ones stay queued.")
    job_chunk_rows: int = Field(4096, ge=1, description="Most rows a job hands one worker at a time.")
    job_chunk_s: float = Field(0.25, gt=0, description="Target running time of one chunk (sizes adapt to it).")
    job_chunk_bytes: int = Field(8 * 1024 * 1024, ge=1024, description="Most row bytes in one chunk.")
    job_retries: int = Field(3, ge=0, description="Retries of a chunk after an infrastructure failure.")
    job_backoff_max_s: float = Field(
        10.0,
        gt=0,
        description="Longest wait before a job's chunk is tried again (after an infrastructure failure, while the "
        "sandbox backend is away, while the data disk is full): 1 s, doubling, at most this.",
    )
    result_cache_max_bytes: int = Field(
        256 * 1024**2,
        ge=0,
        description="Each workspace's result cache at most (bytes of stored results; least recently used evicted "
        "first); 0 turns the cache off (docs/api.md, Result cache).",
    )
    result_cache_min_row_ms: float = Field(
        0.05,
        ge=0,
        description="A chunk of rows is added to the result cache only when its evaluator took at least this long "
        "a row on average (its harness-measured duration_ms): a cheaper row runs again as fast as it is looked up, "
        "and storing it would slow its first run. settings.cache: true caches whatever it costs; 0 caches every row.",
    )
    target_workspace_concurrency: int = Field(
        64,
        ge=1,
        le=4096,
        description="Model calls in flight at once for one workspace, over all its model-target jobs in this "
        "service (a job's target.concurrency is bounded by it).",
    )
    target_prices: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description='Prices of model-target calls per 1,000 tokens, as JSON {"model": {"input_per_1k": 0.15, '
        '"output_per_1k": 0.6}}: jobs of a priced model show a cost estimate.',
    )
    gc_threshold: int = Field(
        50_000,
        ge=0,
        description="Generation-0 threshold of Python's cyclic GC in the service (0: Python's default). "
        "Jobs allocate millions of short-lived objects; at the default of 700 the collector costs ~25% of throughput.",
    )
    queue_url: str | None = Field(
        None,
        description="Celery broker (Redis) URL, e.g. redis://queue.internal:6379/0: jobs are split into chunk tasks "
        "that `evaluator-host worker` hosts run (docs/operations.md); default: jobs run in the service.",
    )
    queue_name: str = Field("evaluator-host.chunks", description="The broker queue chunk tasks go to.")
    worker_lanes: int = Field(
        2, ge=1, le=64, description="Chunks one `evaluator-host worker` runs at once (its warm workers in use)."
    )
    queue_window: int = Field(
        64, ge=1, description="Chunks of one job queued or running at once (more are sent as these finish)."
    )
    queue_visibility_s: float = Field(
        60.0,
        gt=0,
        description="A chunk a worker host took but never finished (the host died) is given to another after this "
        "long; longer than a chunk ever runs (a first runtime build included).",
    )
    queue_stall_s: float = Field(
        300.0,
        gt=0,
        description="A queued job with chunks out, an empty queue and no row committed for this long has its "
        "rows without a result sent again (lost by the broker).",
    )
    queue_db_retry_s: float = Field(
        120.0, ge=0, description="How long a worker host retries an unreachable database before giving a chunk back."
    )
    max_dataset_bytes: int = Field(4 * 1024**3, description="Largest dataset upload (413 above).")
    max_dataset_rows: int = Field(10_000_000, description="Most rows in one dataset.")
    max_row_bytes: int = Field(4 * 1024 * 1024, description="Largest single dataset row (as JSON).")

    @field_validator("otel_endpoint", "online_export_endpoint")
    @classmethod
    def _otlp_http(cls, value: str | None) -> str | None:
        if value and urlsplit(value).scheme not in ("http", "https"):
            raise ValueError(f"{value!r} is not an http:// or https:// URL (OTLP/HTTP)")
        return value or None

    @field_validator("otlp_forward_endpoint", mode="before")
    @classmethod
    def _forward_endpoints(cls, value: object) -> object:
        urls = [u.strip() for u in value.split(",") if u.strip()] if isinstance(value, str) else value
        for url in urls if isinstance(urls, list) else []:
            if urlsplit(str(url)).scheme not in ("http", "https"):
                raise ValueError(f"{str(url)[:100]!r} is not an http:// or https:// URL (OTLP/HTTP)")
        return urls

    @field_validator("blob_url")
    @classmethod
    def _s3_url(cls, value: str | None) -> str | None:
        if value and (urlsplit(value).scheme != "s3" or not urlsplit(value).netloc):
            raise ValueError(f"{value[:100]!r} is not an s3://bucket/prefix URL")
        return value or None

    @field_validator("container_labels")
    @classmethod
    def _operator_labels(cls, value: dict[str, str]) -> dict[str, str]:
        if taken := sorted(name for name in value if name.startswith("evaluator-host.")):
            raise ValueError(f"{taken[0]!r}: labels named evaluator-host.* are the service's own")
        return value

    @field_validator("api_keys", "secrets_key", "allowed_hosts", "build_allow_hosts", "network_allow", mode="before")
    @classmethod
    def _split_keys(cls, value: object) -> object:
        if isinstance(value, str):
            return [k.strip() for k in value.split(",") if k.strip()]
        return value

    @property
    def resolved_cache_dir(self) -> Path:
        """Where built runtimes and build logs live: :attr:`cache_dir`, else :attr:`data_dir`."""
        return self.cache_dir or self.data_dir

    @property
    def resolved_database_url(self) -> str:
        """The database URL, defaulting to SQLite in :attr:`data_dir`."""
        return self.database_url or f"sqlite:///{self.data_dir / DATABASE_FILE}"
