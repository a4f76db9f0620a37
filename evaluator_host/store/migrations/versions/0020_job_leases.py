"""Job leases (issue 54): ``jobs.lease_until`` (Unix seconds by the database's clock, null: not leased) — until
when a job's owner holds it; the owner renews it while it runs, and an unfinished job past it is adopted by
another service sharing the database (``store/jobs/leases.py``). Existing jobs come unleased: a service that
resumes its own sets the lease, and one nobody resumes is adoptable.

Revision ID: 0020_job_leases
Revises: 0019_model_call_budget
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020_job_leases"
down_revision = "0019_model_call_budget"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("lease_until", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("lease_until")
