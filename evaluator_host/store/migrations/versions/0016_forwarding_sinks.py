"""Forwarding and score sinks (issue 52): ``workspaces.forwarding`` (JSON, null: none) — the OTLP/HTTP
endpoints every span a workspace receives is forwarded to, unchanged (``online/forwarding.py``).

Revision ID: 0016
Revises: 0013 (the coordinator re-chains it after 0014/0015 of other branches)
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workspaces") as batch:
        batch.add_column(sa.Column("forwarding", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workspaces") as batch:
        batch.drop_column("forwarding")
