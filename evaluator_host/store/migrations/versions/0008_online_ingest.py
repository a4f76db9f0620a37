"""``online_spans`` on SQLite becomes a rowid table (its primary key a unique index beside the rows).

A span's row carries its JSON body (a kilobyte or more). As a ``WITHOUT ROWID`` table SQLite keeps
whole rows in the primary key's B-tree, interior pages included, so every insert at a random trace
id rewrote pages full of bodies: ~260 µs per span and growing with the table, against ~40 µs as a
rowid table (rows appended, the key in a small index) — the receiver's 10,000 spans/s goal needs
the latter (docs/benchmarks.md, "Online ingestion"). Same columns, same key, same index; rows copied.
PostgreSQL (heap tables: the key is always an index) is not touched.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_TZ = sa.DateTime(timezone=True)
_COLUMNS = "workspace_id, trace_id, span_id, parent_span_id, name, service_name, start_ns, end_ns, body, received_at"


def _rebuild(with_rowid: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.create_table(
        "online_spans_0008",
        sa.Column("workspace_id", sa.String(40), primary_key=True),
        sa.Column("trace_id", sa.String(32), primary_key=True),
        sa.Column("span_id", sa.String(16), primary_key=True),
        sa.Column("parent_span_id", sa.String(16), nullable=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("service_name", sa.String(200), nullable=True),
        sa.Column("start_ns", sa.BigInteger, nullable=False),
        sa.Column("end_ns", sa.BigInteger, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("received_at", _TZ, nullable=False),
        sqlite_with_rowid=with_rowid,
    )
    op.execute(f"INSERT INTO online_spans_0008 ({_COLUMNS}) SELECT {_COLUMNS} FROM online_spans")
    op.drop_table("online_spans")  # its index with it
    op.rename_table("online_spans_0008", "online_spans")
    op.create_index("ix_online_spans_received_at", "online_spans", ["received_at"])


def upgrade() -> None:
    _rebuild(with_rowid=True)


def downgrade() -> None:
    _rebuild(with_rowid=False)
