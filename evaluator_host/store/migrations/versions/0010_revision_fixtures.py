"""Fixtures with each evaluator revision, and draft revisions (issue 35).

* ``evaluator_revisions.fixtures``: the revision's fixtures as saved (``[{name, inputs, outputs, trace,
  expect}]``; null: none).
* ``evaluator_revisions.fixture_report``: what running them on save found (``{passed, failed, results}``;
  null: no fixtures).
* ``evaluator_revisions.draft``: a revision whose fixtures failed and that was not forced: stored, runnable
  by its number, never the evaluator's latest. Existing rows: false.
* ``evaluators.head_revision``: the newest revision number, drafts included (the next one is this + 1);
  ``latest_revision`` stays the revision calls by id run, 0 when every revision is a draft. Existing rows:
  null, read as ``latest_revision``.

Both databases; no data change.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("evaluator_revisions") as batch:
        batch.add_column(sa.Column("fixtures", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("fixture_report", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("draft", sa.Boolean(), nullable=False, server_default=sa.false()))
    with op.batch_alter_table("evaluators") as batch:
        batch.add_column(sa.Column("head_revision", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evaluators") as batch:
        batch.drop_column("head_revision")
    with op.batch_alter_table("evaluator_revisions") as batch:
        batch.drop_column("draft")
        batch.drop_column("fixture_report")
        batch.drop_column("fixtures")
