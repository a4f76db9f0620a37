"""A backfill's case key carries its trace's generation (issue 50): ``online_case_hashes`` gets ``first_seen_at``,
the trace's as the page that scored it read it; a re-run answers a trace only from a key of its own generation
(``store/online/case_hashes.py``). A key a page stored while retention deleted its trace in the same instant (on
PostgreSQL neither transaction sees the other's row), or built from a trace swept and sent again before its page
was stored, so never answers a new trace under that id.

The table is made again, empty: the keys stored before this revision carry no generation, and which of them a
trace sent again under their id would wrongly match cannot be told — as when ``0025_backfill_case_hashes`` made it,
a target scored before is assembled once more, then looked up in the result cache (its answer still ``cached``).

Revision ID: 0027_case_hashes_generation
Revises: 0026_case_hashes_sweep
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027_case_hashes_generation"
down_revision = "0026_case_hashes_sweep"
branch_labels = None
depends_on = None


def _table(generation: bool) -> None:
    """``online_case_hashes`` as 0025 and 0026 made it, with ``first_seen_at`` when ``generation``."""
    op.create_table(
        "online_case_hashes",
        sa.Column("workspace_id", sa.String(40), primary_key=True),
        sa.Column("scope", sa.LargeBinary(32), primary_key=True),
        sa.Column("target_id", sa.String(200), primary_key=True),
        sa.Column("span_id", sa.String(16), nullable=True),
        sa.Column("span_count", sa.Integer, nullable=False),
        *([sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False)] if generation else []),
        sa.Column("case_key", sa.LargeBinary(32), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("score", sa.Float, nullable=True),
        sa.Column("passed", sa.Boolean, nullable=True),
        sa.Column("label", sa.String(200), nullable=True),
        sa.Column("runtime_id", sa.String(80), nullable=True),
        sa.Column("duration_ms", sa.Float, nullable=True),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_online_case_hashes_target", "online_case_hashes", ["workspace_id", "target_id"])


def upgrade() -> None:
    op.drop_table("online_case_hashes")  # its index with it
    _table(generation=True)


def downgrade() -> None:
    op.drop_table("online_case_hashes")
    _table(generation=False)
