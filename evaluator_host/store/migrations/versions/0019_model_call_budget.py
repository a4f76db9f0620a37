"""A rule's calls to its judges (issue 51, ``model_calls_per_minute``): ``online_model_calls``, one row per
scoring round of a rule whose cases made connections through the egress proxy — when, how many rows ran,
how many calls the proxy counted for them (``store/online/calls.py``); kept 10 minutes.

Revision ID: 0019_model_call_budget
Revises: 0018_review_queues
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019_model_call_budget"
down_revision = "0018_review_queues"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "online_model_calls",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("rule_id", sa.String(40), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rows", sa.Integer, nullable=False),
        sa.Column("calls", sa.Integer, nullable=False),
    )
    op.create_index("ix_online_model_calls_rule_at", "online_model_calls", ["rule_id", "at"])


def downgrade() -> None:
    op.drop_index("ix_online_model_calls_rule_at", "online_model_calls")
    op.drop_table("online_model_calls")
