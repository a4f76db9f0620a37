"""This database's mark for the datasets' bucket (``blob_store``, issue 54): one row, made on first use by a
service with ``EVALUATOR_HOST_BLOB_URL`` set and written to the bucket's prefix (``owner.json``); a prefix holding
another database's mark is refused (``store/jobs/dataset_objects.py``), so one deployment never writes into or sweeps
another's rows. Starts empty.

Revision ID: 0024_blob_store
Revises: 0023_rate_buckets
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024_blob_store"
down_revision = "0023_rate_buckets"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "blob_store",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("mark", sa.String(64), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("blob_store")
