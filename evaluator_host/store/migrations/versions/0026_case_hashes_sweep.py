"""Retention sweeps the backfills' case keys (issue 50): ``online_case_hashes`` gets the index
``(workspace_id, target_id)``, by which the span retention sweep deletes the rows of the traces it deletes, in its
transaction (``store/online/case_hashes.py``, ``forget``); the rows whose trace is gone already (swept before this
revision) are deleted here — a trace id sent again is a new trace, never answered with a swept one's result.

Revision ID: 0026_case_hashes_sweep
Revises: 0025_backfill_case_hashes
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026_case_hashes_sweep"
down_revision = "0025_backfill_case_hashes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_online_case_hashes_target", "online_case_hashes", ["workspace_id", "target_id"])
    op.execute(
        sa.text(
            "DELETE FROM online_case_hashes WHERE NOT EXISTS (SELECT 1 FROM online_traces t WHERE "
            "t.workspace_id = online_case_hashes.workspace_id AND t.trace_id = online_case_hashes.target_id)"
        )
    )


def downgrade() -> None:
    op.drop_index("ix_online_case_hashes_target", table_name="online_case_hashes")
