"""Review queues (issue 53): ``review_queues`` — a workspace's queues, each filled from one online rule's
scores or one job's results (its ``selection``, ``sample`` and ``max_items``); ``review_items`` — one row per
(queue, source key): the evaluator's answer as it was scored, and ``snapshot``, the case (a job row's inputs/outputs,
or the trace's case once a verdict is given); ``review_verdicts`` — people's verdicts, one current per item
(``replaced_at`` null), the ones it replaced kept as history.

Revision ID: 0018_review_queues
Revises: 0017_job_sinks
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_review_queues"
down_revision = "0017_job_sinks"
branch_labels = None
depends_on = None


_TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "review_queues",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("workspace_id", sa.String(40), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("evaluator_id", sa.String(40), nullable=False),
        sa.Column("rule_id", sa.String(40), nullable=True),
        sa.Column("job_id", sa.String(40), nullable=True),
        sa.Column("selection", sa.JSON, nullable=True),
        sa.Column("sample", sa.Float, nullable=False),
        sa.Column("max_items", sa.Integer, nullable=False),
        sa.Column("created_at", _TZ, nullable=False),
        sa.Column("updated_at", _TZ, nullable=False),
        sa.Column("deleted_at", _TZ, nullable=True),
    )
    op.create_index("ix_review_queues_workspace_id", "review_queues", ["workspace_id"])
    op.create_index("ix_review_queues_rule_id", "review_queues", ["rule_id"])
    op.create_table(
        "review_items",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("queue_id", sa.String(40), nullable=False),
        sa.Column("workspace_id", sa.String(40), nullable=False),
        sa.Column("evaluator_id", sa.String(40), nullable=False),
        sa.Column("source_key", sa.String(200), nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=True),
        sa.Column("span_id", sa.String(16), nullable=True),
        sa.Column("job_index", sa.BigInteger, nullable=True),
        sa.Column("revision", sa.Integer, nullable=True),
        sa.Column("status", sa.String(20), nullable=True),
        sa.Column("score", sa.Float, nullable=True),
        sa.Column("passed", sa.Boolean, nullable=True),
        sa.Column("label", sa.String(200), nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("snapshot", sa.JSON, nullable=True),
        sa.Column("added_at", _TZ, nullable=False),
        sa.Column("reviewed_at", _TZ, nullable=True),
        sa.UniqueConstraint("queue_id", "source_key", name="uq_review_items_queue_source"),
    )
    op.create_index("ix_review_items_queue_added", "review_items", ["queue_id", "added_at", "id"])
    op.create_index("ix_review_items_evaluator", "review_items", ["workspace_id", "evaluator_id"])
    op.create_table(
        "review_verdicts",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("item_id", sa.String(40), nullable=False),
        sa.Column("queue_id", sa.String(40), nullable=False),
        sa.Column("workspace_id", sa.String(40), nullable=False),
        sa.Column("passed", sa.Boolean, nullable=False),
        sa.Column("score", sa.Float, nullable=True),
        sa.Column("label", sa.String(200), nullable=True),
        sa.Column("note", sa.Text, nullable=True),
        sa.Column("reviewer", sa.String(40), nullable=True),
        sa.Column("created_at", _TZ, nullable=False),
        sa.Column("replaced_at", _TZ, nullable=True),
    )
    op.create_index("ix_review_verdicts_item", "review_verdicts", ["item_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_review_verdicts_item", "review_verdicts")
    op.drop_table("review_verdicts")
    op.drop_index("ix_review_items_evaluator", "review_items")
    op.drop_index("ix_review_items_queue_added", "review_items")
    op.drop_table("review_items")
    op.drop_index("ix_review_queues_rule_id", "review_queues")
    op.drop_index("ix_review_queues_workspace_id", "review_queues")
    op.drop_table("review_queues")
