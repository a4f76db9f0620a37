"""Workspaces' ``max_evaluations_per_s`` buckets in the database (``rate_buckets``, issue 54): services on one
PostgreSQL database share a workspace's rate instead of each granting all of it. Starts empty (every bucket
starts full, as a service's in-memory one did).

Revision ID: 0023_rate_buckets
Revises: 0022_dataset_chunks
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023_rate_buckets"
down_revision = "0022_dataset_chunks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rate_buckets",
        sa.Column("workspace_id", sa.String(40), primary_key=True),
        sa.Column("rate", sa.Float, nullable=False),
        sa.Column("tokens", sa.Float, nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("booked", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("rate_buckets")
