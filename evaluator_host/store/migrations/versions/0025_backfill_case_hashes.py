"""Backfills re-run from the result cache in one statement (issue 50): ``online_case_hashes`` — for a (workspace,
scope, target) the case's result-cache key and the trace's ``span_count`` when it was built — and a backfill's
``cached`` count. The index ``online_scores (backfill_id, state)`` gets ``status``: a backfill's failures are
counted without reading its rows, and each score has one index fewer to write. Starts empty (a target scored
before it is assembled once more, then looked up).

Revision ID: 0025_backfill_case_hashes
Revises: 0024_blob_store
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025_backfill_case_hashes"
down_revision = "0024_blob_store"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "online_case_hashes",
        sa.Column("workspace_id", sa.String(40), primary_key=True),
        sa.Column("scope", sa.LargeBinary(32), primary_key=True),
        sa.Column("target_id", sa.String(200), primary_key=True),
        sa.Column("span_id", sa.String(16), nullable=True),
        sa.Column("span_count", sa.Integer, nullable=False),
        sa.Column("case_key", sa.LargeBinary(32), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("score", sa.Float, nullable=True),
        sa.Column("passed", sa.Boolean, nullable=True),
        sa.Column("label", sa.String(200), nullable=True),
        sa.Column("runtime_id", sa.String(80), nullable=True),
        sa.Column("duration_ms", sa.Float, nullable=True),
        sqlite_with_rowid=False,
    )
    with op.batch_alter_table("online_backfills") as batch:
        batch.add_column(sa.Column("cached", sa.Integer, nullable=False, server_default="0"))
    op.create_index("ix_online_scores_backfill_status", "online_scores", ["backfill_id", "state", "status"])
    op.drop_index("ix_online_scores_backfill", table_name="online_scores")


def downgrade() -> None:
    op.create_index("ix_online_scores_backfill", "online_scores", ["backfill_id", "state"])
    op.drop_index("ix_online_scores_backfill_status", table_name="online_scores")
    with op.batch_alter_table("online_backfills") as batch:
        batch.drop_column("cached")
    op.drop_table("online_case_hashes")
