"""Model-target jobs: ``jobs.target`` (the target a job generates its outputs with; null: a job over
outputs already in its rows) and the ``job_generations`` table (store/jobs/generations.py: one row's
model call per (job, row index), stored before the row is scored). Existing rows keep a null target.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("target", sa.JSON, nullable=True))
    op.create_table(
        "job_generations",
        sa.Column("job_id", sa.String(40), sa.ForeignKey("jobs.id"), primary_key=True),
        sa.Column("idx", sa.BigInteger, primary_key=True),
        sa.Column("messages", sa.Text, nullable=False),
        sa.Column("text", sa.Text, nullable=True),
        sa.Column("finish_reason", sa.String(40), nullable=True),
        sa.Column("prompt_tokens", sa.BigInteger, nullable=False),
        sa.Column("completion_tokens", sa.BigInteger, nullable=False),
        sa.Column("total_tokens", sa.BigInteger, nullable=False),
        sa.Column("latency_ms", sa.Float, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("start_ns", sa.BigInteger, nullable=False),
        sa.Column("end_ns", sa.BigInteger, nullable=False),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("job_generations")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("target")
