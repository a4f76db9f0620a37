"""Job results record the worker host that ran them (``job_results.worker``) when a queue runs the job;
rows the service ran itself (and every existing row) have none.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job_results") as batch:
        batch.add_column(sa.Column("worker", sa.String(80), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_results") as batch:
        batch.drop_column("worker")
