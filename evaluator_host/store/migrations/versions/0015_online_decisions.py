"""Why each (rule, trace) was or wasn't scored (issue 51): ``online_decisions`` keeps the decisions routing
makes that leave no score row — ``not_matched`` (with the first filter condition that failed),
``sampled_out``, ``dropped`` (the rule was paused) — one small row per (workspace, trace, rule), deleted
by the span retention sweep (by ``at``, through the (rule_id, at) index the stats also read).
``online_traces.routed_at`` says when a trace was routed (a rule created later says ``not_routed``);
``online_rules.limits`` holds a rule's budgets (JSON, null: none);
``online_scores.last_error`` keeps a retried row's last infrastructure error and ``delayed_by`` the
budget that put a row back in the queue (``retrying`` and ``delayed`` decisions). Existing rows keep
nulls: a trace routed before this revision has its decisions recomputed when read.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "online_decisions",
        sa.Column("workspace_id", sa.String(40), primary_key=True),
        sa.Column("trace_id", sa.String(32), primary_key=True),
        sa.Column("rule_id", sa.String(40), primary_key=True),
        sa.Column("decision", sa.String(12), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("at", _TZ, nullable=False),
        sqlite_with_rowid=False,  # small rows: the key's B-tree is the table (no second copy of the key)
    )
    op.create_index("ix_online_decisions_rule_at", "online_decisions", ["rule_id", "at"])
    with op.batch_alter_table("online_traces") as batch:
        batch.add_column(sa.Column("routed_at", _TZ, nullable=True))
    with op.batch_alter_table("online_rules") as batch:
        batch.add_column(sa.Column("limits", sa.JSON, nullable=True))
    with op.batch_alter_table("online_scores") as batch:
        batch.add_column(sa.Column("last_error", sa.Text, nullable=True))
        batch.add_column(sa.Column("delayed_by", sa.String(40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("online_scores") as batch:
        batch.drop_column("delayed_by")
        batch.drop_column("last_error")
    with op.batch_alter_table("online_rules") as batch:
        batch.drop_column("limits")
    with op.batch_alter_table("online_traces") as batch:
        batch.drop_column("routed_at")
    op.drop_index("ix_online_decisions_rule_at", table_name="online_decisions")
    op.drop_table("online_decisions")
