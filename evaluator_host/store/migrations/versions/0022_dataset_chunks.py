"""Datasets' rows in the database (issue 54): ``dataset_chunks`` — a dataset's rows as zlib-compressed chunks
of JSON lines (``store/jobs/dataset_chunks.py``), used when the database is PostgreSQL so that every service reads
every dataset without a shared folder. The rows of datasets stored as files before are moved in by the next
service start-up on the data dir that holds them (``DatasetCatalog.move_files_in``); on SQLite the table
stays empty (the rows stay files in the data dir).

Revision ID: 0022_dataset_chunks
Revises: 0021_shadow_revisions
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022_dataset_chunks"
down_revision = "0021_shadow_revisions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dataset_chunks",
        sa.Column("dataset_id", sa.String(40), primary_key=True),
        sa.Column("first_row", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("row_count", sa.Integer, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("stored_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    """Refused while the table holds any dataset's rows (dropping it would lose them; nothing moves them back
    out into files): delete those datasets first, or restore the backup taken before the upgrade."""
    if op.get_bind().execute(sa.text("SELECT 1 FROM dataset_chunks LIMIT 1")).first() is not None:
        raise RuntimeError(
            "dataset_chunks holds datasets' rows; going below 0022_dataset_chunks would lose them "
            "(restore the backup taken before the upgrade instead: docs/operations.md, Upgrades)"
        )
    op.drop_table("dataset_chunks")
