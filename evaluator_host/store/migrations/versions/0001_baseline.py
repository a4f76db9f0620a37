"""Baseline: the schema as ``create_all`` made it before migrations (main at 08a8d8f).

A fresh database gets every table. A database made before migrations existed (tables, no
``alembic_version``) is adopted: only what an older release may not have made is added — a
missing table (``idempotency_keys`` came late), the ``evaluator_revisions.capabilities``
column, a missing index. Nothing that exists is changed, so no data moves.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_TZ = sa.DateTime(timezone=True)


def _tables() -> list[sa.Table]:
    meta = sa.MetaData()
    return [
        sa.Table(
            "evaluators",
            meta,
            sa.Column("id", sa.String(40), primary_key=True),
            sa.Column("latest_revision", sa.Integer, nullable=False),
            sa.Column("created_at", _TZ, nullable=False),
            sa.Column("updated_at", _TZ, nullable=False),
            sa.Column("deleted_at", _TZ, nullable=True),
        ),
        sa.Table(
            "evaluator_revisions",
            meta,
            sa.Column("evaluator_id", sa.String(40), sa.ForeignKey("evaluators.id"), primary_key=True),
            sa.Column("revision", sa.Integer, primary_key=True),
            sa.Column("name", sa.String(200), nullable=False),
            sa.Column("description", sa.Text, nullable=False),
            sa.Column("language", sa.String(20), nullable=False),
            sa.Column("interface", sa.String(20), nullable=False),
            sa.Column("code", sa.Text, nullable=False),
            sa.Column("packages", sa.JSON, nullable=False),
            sa.Column("settings", sa.JSON, nullable=False),
            sa.Column("runtime_id", sa.String(80), nullable=False),
            sa.Column("created_at", _TZ, nullable=False),
            sa.Column("capabilities", sa.JSON, nullable=True),
        ),
        sa.Table(
            "datasets",
            meta,
            sa.Column("id", sa.String(40), primary_key=True),
            sa.Column("name", sa.String(200), nullable=False),
            sa.Column("format", sa.String(10), nullable=False),
            sa.Column("row_count", sa.BigInteger, nullable=False),
            sa.Column("columns", sa.JSON, nullable=False),
            sa.Column("bytes", sa.BigInteger, nullable=False),
            sa.Column("inline", sa.Boolean, nullable=False),
            sa.Column("created_at", _TZ, nullable=False),
        ),
        sa.Table(
            "jobs",
            meta,
            sa.Column("id", sa.String(40), primary_key=True),
            sa.Column("evaluator_id", sa.String(40), nullable=False, index=True),
            sa.Column("revision", sa.Integer, nullable=False),
            sa.Column("runtime_id", sa.String(80), nullable=False),
            sa.Column("dataset_id", sa.String(40), sa.ForeignKey("datasets.id"), nullable=False),
            sa.Column("field_mapping", sa.JSON, nullable=False),
            sa.Column("parallelism", sa.Integer, nullable=False),
            sa.Column("status", sa.String(20), nullable=False, index=True),
            sa.Column("total", sa.BigInteger, nullable=False),
            sa.Column("done", sa.BigInteger, nullable=False),
            sa.Column("failed", sa.BigInteger, nullable=False),
            sa.Column("acc_state", sa.JSON, nullable=True),
            sa.Column("active_s", sa.Float, nullable=False),
            sa.Column("error", sa.JSON, nullable=True),
            sa.Column("warnings", sa.JSON, nullable=False),
            sa.Column("created_at", _TZ, nullable=False, index=True),
            sa.Column("started_at", _TZ, nullable=True),
            sa.Column("finished_at", _TZ, nullable=True),
        ),
        sa.Table(
            "job_results",
            meta,
            sa.Column("job_id", sa.String(40), sa.ForeignKey("jobs.id"), primary_key=True),
            sa.Column("idx", sa.BigInteger, primary_key=True),
            sa.Column("status", sa.String(20), nullable=False),
            sa.Column("revision", sa.Integer, nullable=False),
            sa.Column("runtime_id", sa.String(80), nullable=False),
            sa.Column("result", sa.Text, nullable=False),
            sqlite_with_rowid=False,
        ),
        sa.Table(
            "idempotency_keys",
            meta,
            sa.Column("route", sa.String(80), primary_key=True),
            sa.Column("key", sa.String(255), primary_key=True),
            sa.Column("request_hash", sa.String(64), nullable=False),
            sa.Column("status_code", sa.Integer, nullable=True),
            sa.Column("answer", sa.Text, nullable=True),
            sa.Column("created_at", _TZ, nullable=False, index=True),
        ),
    ]


def upgrade() -> None:
    bind = op.get_bind()
    for table in _tables():  # in foreign-key order
        inspector = sa.inspect(bind)
        if not inspector.has_table(table.name):
            table.create(bind)
            continue
        present = {column["name"] for column in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name not in present:  # only nullable columns were ever added after the fact
                op.add_column(table.name, sa.Column(column.name, column.type, nullable=True))
        indexes = {index["name"] for index in inspector.get_indexes(table.name)}
        for index in table.indexes:
            if index.name not in indexes:
                index.create(bind)


def downgrade() -> None:
    for table in reversed(_tables()):
        op.drop_table(table.name)
