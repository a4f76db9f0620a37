"""The result cache (evaluation/caching/cache.py, store/result_cache.py): ``result_cache`` (one row's stored result
per (workspace, key), with its size and last use), ``result_cache_usage`` (what each workspace's entries
add up to, kept in the transactions that add or evict them) and ``jobs.cached`` (a job's rows answered
from the cache). Existing jobs count 0.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("cached", sa.BigInteger, nullable=False, server_default="0"))
    op.create_table(
        "result_cache",
        sa.Column("workspace_id", sa.String(40), primary_key=True),
        sa.Column("key", sa.LargeBinary(32), primary_key=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("result", sa.Text, nullable=False),
        sa.Column("bytes", sa.Integer, nullable=False),
        sa.Column("used_at", sa.Float, nullable=False),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_result_cache_used", "result_cache", ["workspace_id", "used_at"])
    op.create_table(
        "result_cache_usage",
        sa.Column("workspace_id", sa.String(40), primary_key=True),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("entries", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("result_cache_usage")
    op.drop_index("ix_result_cache_used", table_name="result_cache")
    op.drop_table("result_cache")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("cached")
