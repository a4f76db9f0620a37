"""Shadow revisions on a rule (issue 53): ``online_rules.candidate_revision`` (null: none) — a revision of the
rule's evaluator scored beside the live one on every target the rule scores; ``online_shadow_scores`` — the
candidate's scores, one per (rule, target, candidate revision), each with the live answer of the same target
beside it. Apart from ``online_scores`` on purpose: no read of the rule's scores, stats, decisions, review
queues, exports or sinks sees them. Down drops both (the candidate's scores go; the live ones stay).

Revision ID: 0021_shadow_revisions
Revises: 0020_job_leases
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021_shadow_revisions"
down_revision = "0020_job_leases"
branch_labels = None
depends_on = None

_TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("online_rules") as batch:
        batch.add_column(sa.Column("candidate_revision", sa.Integer, nullable=True))
    op.create_table(
        "online_shadow_scores",
        sa.Column("rule_id", sa.String(40), primary_key=True),
        sa.Column("target_id", sa.String(200), primary_key=True),
        sa.Column("revision", sa.Integer, primary_key=True),
        sa.Column("workspace_id", sa.String(40), nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("span_id", sa.String(16), nullable=True),
        sa.Column("session_id", sa.String(128), nullable=True),
        sa.Column("evaluator_id", sa.String(40), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("score", sa.Float, nullable=True),
        sa.Column("passed", sa.Boolean, nullable=True),
        sa.Column("label", sa.String(200), nullable=True),
        sa.Column("duration_ms", sa.Float, nullable=True),
        sa.Column("result", sa.Text, nullable=False),
        sa.Column("live_revision", sa.Integer, nullable=True),
        sa.Column("live_status", sa.String(20), nullable=True),
        sa.Column("live_score", sa.Float, nullable=True),
        sa.Column("live_passed", sa.Boolean, nullable=True),
        sa.Column("live_label", sa.String(200), nullable=True),
        sa.Column("scored_at", _TZ, nullable=False),
    )
    op.create_index("ix_online_shadow_scores_rule", "online_shadow_scores", ["rule_id", "revision", "scored_at"])


def downgrade() -> None:
    op.drop_index("ix_online_shadow_scores_rule", table_name="online_shadow_scores")
    op.drop_table("online_shadow_scores")
    with op.batch_alter_table("online_rules") as batch:
        batch.drop_column("candidate_revision")
