"""Job results to score sinks (issue 52): ``jobs.sinks`` (JSON, null: none) and ``jobs.sinks_enqueued``
(every result of the finished job has its delivery rows); ``online_sink_deliveries`` gains ``source``
(``rule`` | ``job``) in its primary key — a job's row delivery (``rule_id`` the job, ``target_id`` the row
index) never meets an online score's — and ``trace_id``, ``span_id``, ``session_id`` (a job row's ids).

The table is rebuilt (a new one, rows copied as ``source = 'rule'``, the old one dropped, the new renamed):
the one way to change a primary key that SQLite and PostgreSQL share.

Revision ID: 0017_job_sinks
Revises: 0016
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_job_sinks"
down_revision = "0016"
branch_labels = None
depends_on = None


_TZ = sa.DateTime(timezone=True)
_TABLE = "online_sink_deliveries"
_INDEX = "ix_online_sink_deliveries_due"
_COMMON = (
    "rule_id, target_id, sink, workspace_id, type, key, state, attempts, error, due_at, claimed_by, "
    "claimed_until, created_at, delivered_at"
)


def _table(name: str, *, job: bool) -> None:
    key = [sa.Column("source", sa.String(8), primary_key=True, server_default="rule")] if job else []
    ids = [sa.Column(n, sa.String(128), nullable=True) for n in ("trace_id", "span_id", "session_id")] if job else []
    op.create_table(
        name,
        *key,
        sa.Column("rule_id", sa.String(40), primary_key=True),
        sa.Column("target_id", sa.String(200), primary_key=True),
        sa.Column("sink", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("workspace_id", sa.String(40), nullable=False),
        sa.Column("type", sa.String(20), nullable=False),
        sa.Column("key", sa.String(80), nullable=False),
        sa.Column("state", sa.String(12), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("due_at", _TZ, nullable=False),
        sa.Column("claimed_by", sa.String(80), nullable=True),
        sa.Column("claimed_until", _TZ, nullable=True),
        sa.Column("created_at", _TZ, nullable=False),
        sa.Column("delivered_at", _TZ, nullable=True),
        *ids,
    )


def _rebuild(*, job: bool, where: str = "") -> None:
    op.drop_index(_INDEX, _TABLE)
    _table(f"{_TABLE}_new", job=job)
    columns = ("source, " if job else "") + _COMMON
    values = ("'rule', " if job else "") + _COMMON
    op.execute(f"INSERT INTO {_TABLE}_new ({columns}) SELECT {values} FROM {_TABLE}{where}")
    op.drop_table(_TABLE)
    op.rename_table(f"{_TABLE}_new", _TABLE)
    op.create_index(_INDEX, _TABLE, ["state", "due_at"])


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("sinks", sa.JSON, nullable=True))
        # a text default: a SQL expression would make SQLite rebuild jobs (job_results refers to it)
        batch.add_column(sa.Column("sinks_enqueued", sa.Boolean, nullable=False, server_default="0"))
    _rebuild(job=True)


def downgrade() -> None:
    _rebuild(job=False, where=" WHERE source = 'rule'")  # a job's deliveries go with the jobs' sinks
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("sinks_enqueued")
        batch.drop_column("sinks")
