"""Jobs count the bytes of the results they stored (``jobs.result_bytes``): a workspace's storage quota
(``max_dataset_bytes``) counts them beside its datasets without reading ``job_results``. Existing jobs
are counted once, here.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("result_bytes", sa.BigInteger(), nullable=False, server_default="0"))
    size = "octet_length(result)" if op.get_bind().dialect.name == "postgresql" else "length(CAST(result AS BLOB))"
    op.execute(
        "UPDATE jobs SET result_bytes = "
        f"(SELECT coalesce(sum({size}), 0) FROM job_results WHERE job_results.job_id = jobs.id)"
    )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("result_bytes")
