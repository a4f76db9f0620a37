"""Tables and engine set-up (SQLite or PostgreSQL; the schema is Alembic's, see ``store/schema.py``).

The models below describe the schema at the newest migration; the migrations in
``store/migrations/versions`` create it. Change one, add the other (docs/database.md).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    Select,
    String,
    Text,
    and_,
    create_engine,
    event,
    false,
    or_,
)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import DeclarativeBase, InstrumentedAttribute, Mapped, mapped_column

from evaluator_host.storage import translate_database_errors
from evaluator_host.tenancy.reserved import DEFAULT_WORKSPACE  # data made before workspaces, the admin key's

__all__ = [
    "DEFAULT_WORKSPACE",
    "newest_first",
    "ApiKeyRow",
    "Base",
    "DatasetChunkRow",
    "DatasetRow",
    "EvaluatorRow",
    "IdempotencyRow",
    "JobResultRow",
    "JobRow",
    "RevisionRow",
    "SecretRow",
    "WorkspaceRow",
    "WorkspaceRuntimeRow",
    "as_utc",
    "make_engine",
    "utcnow",
]


def utcnow() -> datetime:
    """Timezone-aware now (UTC)."""
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """A stored timestamp as an aware UTC datetime, whatever the database gave back.

    SQLite keeps no zone (the value was written in UTC); PostgreSQL answers in the session's
    zone. Either way the API shows the same instant the same way.
    """
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    """Declarative base."""


class WorkspaceRow(Base):
    """A workspace: the owner of evaluators, datasets, jobs and secrets; its quotas and egress allowlist."""

    __tablename__ = "workspaces"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    quotas: Mapped[dict[str, Any]] = mapped_column(JSON)  # name -> limit (absent: unlimited)
    network_allow: Mapped[list[str]] = mapped_column(JSON)  # "host:port" entries an evaluator may declare
    forwarding: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)  # 0016: OTLP forward targets
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ApiKeyRow(Base):
    """A workspace's API key: only its SHA-256 is stored (keys are 256-bit random, shown once)."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(20))  # the key's first characters, to recognise it in lists
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class SecretRow(Base):
    """A workspace's secret: its value Fernet-encrypted (never stored or logged in clear)."""

    __tablename__ = "secrets"

    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id"), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    ciphertext: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class WorkspaceRuntimeRow(Base):
    """A runtime a workspace asked for with ``POST /v1/runtimes`` (the runtimes it lists, with those
    its evaluators run on; the runtime itself is shared, see docs/security.md)."""

    __tablename__ = "workspace_runtimes"

    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id"), primary_key=True)
    runtime_id: Mapped[str] = mapped_column(String(80), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class EvaluatorRow(Base):
    """An evaluator: its identity and latest revision number; soft-deleted."""

    __tablename__ = "evaluators"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    workspace_id: Mapped[str] = mapped_column(
        String(40), index=True, default=DEFAULT_WORKSPACE, server_default=DEFAULT_WORKSPACE
    )
    latest_revision: Mapped[int] = mapped_column(Integer)  # the revision calls by id run (0: only drafts)
    # the newest revision, drafts included (null: latest_revision; stored before drafts existed)
    head_revision: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class RevisionRow(Base):
    """One immutable revision of an evaluator."""

    __tablename__ = "evaluator_revisions"

    evaluator_id: Mapped[str] = mapped_column(ForeignKey("evaluators.id"), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text)
    language: Mapped[str] = mapped_column(String(20))
    interface: Mapped[str] = mapped_column(String(20))
    code: Mapped[str] = mapped_column(Text)
    packages: Mapped[dict[str, Any]] = mapped_column(JSON)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)
    runtime_id: Mapped[str] = mapped_column(String(80))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # the static capability report at save time (null: stored before reports existed)
    capabilities: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # the workspace secrets its workers get as environment variables (null: none)
    secrets: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    # the "host:port" pairs its workers may reach through the egress proxy (null: no network); an entry
    # whose requests get headers from the proxy is {"host": "host:port", "headers": {name: template}}
    network: Mapped[list[str | dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    # its fixtures ([{name, inputs, outputs, trace, expect}]; null: none) and what running them on save found
    fixtures: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    fixture_report: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # fixtures failed and the save was not forced: runnable by number, never the latest (0010)
    draft: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class DatasetRow(Base):
    """A dataset's metadata; its rows are a JSON-lines file in the data dir."""

    __tablename__ = "datasets"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    workspace_id: Mapped[str] = mapped_column(
        String(40), index=True, default=DEFAULT_WORKSPACE, server_default=DEFAULT_WORKSPACE
    )
    name: Mapped[str] = mapped_column(String(200))
    format: Mapped[str] = mapped_column(String(10))
    row_count: Mapped[int] = mapped_column(BigInteger)
    columns: Mapped[list[str]] = mapped_column(JSON)
    bytes: Mapped[int] = mapped_column(BigInteger)
    inline: Mapped[bool] = mapped_column(Boolean, default=False)  # a job's inline rows, not an upload
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class DatasetChunkRow(Base):
    """A chunk of a dataset's rows, stored in the database when it is PostgreSQL (``store/jobs/dataset_chunks.py``):
    zlib-compressed JSON lines from ``first_row``; ``first_row = -1`` is the header (the column fill counts).
    No foreign key: the chunks are stored before the dataset's record (a dataset that exists is complete)."""

    __tablename__ = "dataset_chunks"

    dataset_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    first_row: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    row_count: Mapped[int] = mapped_column(Integer)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    stored_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class BlobStoreRow(Base):
    """This database's mark (one row, ``id = 1``, made on first use: ``store/jobs/dataset_objects.py``, migration
    ``0024_blob_store``): a datasets' bucket prefix holding another database's mark is refused, so one
    deployment never writes or sweeps another's datasets' rows."""

    __tablename__ = "blob_store"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    mark: Mapped[str] = mapped_column(String(64))


class JobRow(Base):
    """A job: what it runs on, its status, and its progress and aggregate *as committed*.

    ``done``/``failed``/``acc_state`` change in the same transaction as the result rows
    they count, so they never disagree with ``job_results`` (the resume invariant).
    """

    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    workspace_id: Mapped[str] = mapped_column(
        String(40), index=True, default=DEFAULT_WORKSPACE, server_default=DEFAULT_WORKSPACE
    )
    evaluator_id: Mapped[str] = mapped_column(String(40), index=True)
    revision: Mapped[int] = mapped_column(Integer)
    runtime_id: Mapped[str] = mapped_column(String(80))
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"))
    field_mapping: Mapped[dict[str, Any]] = mapped_column(JSON)
    parallelism: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20), index=True)
    total: Mapped[int] = mapped_column(BigInteger)
    done: Mapped[int] = mapped_column(BigInteger, default=0)
    failed: Mapped[int] = mapped_column(BigInteger, default=0)
    acc_state: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    active_s: Mapped[float] = mapped_column(Float, default=0.0)  # running time, summed over restarts
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    warnings: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # the service (data dir) that runs it: only it commits rows (null: made before owners existed)
    owner: Mapped[str | None] = mapped_column(String(80), nullable=True)
    # bytes of the results stored for it (UTF-8), grown in the transaction that stores them: what the job
    # adds to its workspace's storage quota (``max_dataset_bytes``), known without reading ``job_results``
    result_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # the model target it generates outputs with (jobs/models.py Target, no secret value); null: none
    target: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # rows answered from the result cache (evaluation/caching/cache.py), of ``done``
    cached: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # issue 52: the sinks its results are written to (sinks/models.py Sink, secrets as references); null: none
    sinks: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    # every result of the finished job has its delivery rows (the enqueue pass looks at it no more)
    sinks_enqueued: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # until when its owner holds it (Unix seconds by the database's clock; renewed while the owner runs): a job
    # unfinished past it is adopted by another service (store/jobs/leases.py); null: never leased (adoptable)
    lease_until: Mapped[float | None] = mapped_column(Float, nullable=True)


class JobResultRow(Base):
    """One row's result. The primary key makes a second result for a row impossible."""

    __tablename__ = "job_results"
    __table_args__ = {"sqlite_with_rowid": False}

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    idx: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    status: Mapped[str] = mapped_column(String(20))
    revision: Mapped[int] = mapped_column(Integer)
    runtime_id: Mapped[str] = mapped_column(String(80))
    result: Mapped[str] = mapped_column(Text)  # EvaluationResult JSON without interface/runtime/evaluator
    # the worker host that ran the row (its service id) when a queue ran the job; null: the service itself
    worker: Mapped[str | None] = mapped_column(String(80), nullable=True)


class IdempotencyRow(Base):
    """The first answer to a request sent with an ``Idempotency-Key`` (``answer`` None while it runs)."""

    __tablename__ = "idempotency_keys"

    route: Mapped[str] = mapped_column(String(80), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    answer: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


def make_engine(url: str) -> Engine:
    """An engine on ``url`` whose schema is at the newest migration.

    ``postgresql://`` (or ``postgres://``) URLs get the psycopg 3 driver, the session time zone
    UTC, a liveness check on checkout and the sessions of ``store/pg_sessions.py`` (a frozen service's
    locks end with its session: ``idle_in_transaction_session_timeout``, cursors that never pipeline; a
    URL's own ``options`` come after, and win); SQLite gets WAL, foreign keys, ``synchronous=NORMAL``
    (docs/operations.md: a power loss may roll back the last commits, never corrupt the file; a job
    then runs its last chunks again, each row still stored once) and a busy timeout.
    The schema is upgraded in place first (``store/schema.py``): a database made before
    migrations existed is adopted; one a newer release migrated is refused with
    ``DatabaseSchemaError``.
    """
    from evaluator_host.store import schema

    url = schema.normalized_url(url)
    if url.startswith("sqlite"):
        from evaluator_host.store.sqlite_writer import WriterConnection  # writers queue in the process

        connect = {"check_same_thread": False, "timeout": 30, "factory": WriterConnection}
        engine = create_engine(url, connect_args=connect)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

    elif url.startswith("postgresql"):
        from evaluator_host.store.pg_sessions import StatementAtATime, session_options  # psycopg: PostgreSQL only

        options = session_options(make_url(url).query.get("options"))  # the URL's own options stay, last
        connect = {"options": options, "cursor_factory": StatementAtATime}
        engine = create_engine(url, pool_pre_ping=True, connect_args=connect)
    else:
        engine = create_engine(url)
    translate_database_errors(engine)
    try:
        schema.upgrade(engine)
    except BaseException:
        engine.dispose()
        raise
    return engine


_Q = TypeVar("_Q", bound=Select[*tuple[Any, ...]])


def newest_first(
    query: _Q,
    created: InstrumentedAttribute[datetime],
    key: InstrumentedAttribute[str],
    limit: int | None,
    before: tuple[datetime, str] | None,
) -> _Q:
    """``query`` newest first (by ``created``; ties: greater ``key`` first), after ``before`` (a
    ``(created, key)``) in that order, at most ``limit`` (None: all): the keyset of the API's list cursors
    (``api/paging.py``), so a page reads a page, never the whole list."""
    if before is not None:
        at, last = before
        query = query.where(or_(created < at, and_(created == at, key < last)))
    query = query.order_by(created.desc(), key.desc())
    return query if limit is None else query.limit(limit)
