"""Online evaluation: the ``online_spans``, ``online_traces``, ``online_rules`` and ``online_scores``
tables (store/online/rows.py says what each holds; docs/online.md how they are used). New tables
only: nothing existing changes.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "online_spans",
        sa.Column("workspace_id", sa.String(40), primary_key=True),
        sa.Column("trace_id", sa.String(32), primary_key=True),
        sa.Column("span_id", sa.String(16), primary_key=True),
        sa.Column("parent_span_id", sa.String(16), nullable=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("service_name", sa.String(200), nullable=True),
        sa.Column("start_ns", sa.BigInteger, nullable=False),
        sa.Column("end_ns", sa.BigInteger, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("received_at", _TZ, nullable=False),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_online_spans_received_at", "online_spans", ["received_at"])
    op.create_table(
        "online_traces",
        sa.Column("workspace_id", sa.String(40), primary_key=True),
        sa.Column("trace_id", sa.String(32), primary_key=True),
        sa.Column("service_name", sa.String(200), nullable=True),
        sa.Column("root_span_id", sa.String(16), nullable=True),
        sa.Column("root_name", sa.Text, nullable=True),
        sa.Column("span_count", sa.Integer, nullable=False),
        sa.Column("first_seen_at", _TZ, nullable=False),
        sa.Column("last_span_at", _TZ, nullable=False),
        sa.Column("root_ended_at", _TZ, nullable=True),
        sa.Column("state", sa.String(12), nullable=False),
        sa.Column("ready_at", _TZ, nullable=True),
    )
    op.create_index("ix_online_traces_state_last", "online_traces", ["state", "last_span_at"])
    op.create_table(
        "online_rules",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("workspace_id", sa.String(40), nullable=False),
        sa.Column("name", sa.String(200), nullable=True),
        sa.Column("evaluator_id", sa.String(40), nullable=False),
        sa.Column("revision", sa.Integer, nullable=True),
        sa.Column("filter", sa.JSON, nullable=False),
        sa.Column("sampling_rate", sa.Float, nullable=False),
        sa.Column("mapping", sa.JSON, nullable=True),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("created_at", _TZ, nullable=False),
        sa.Column("updated_at", _TZ, nullable=False),
        sa.Column("deleted_at", _TZ, nullable=True),
    )
    op.create_index("ix_online_rules_workspace_id", "online_rules", ["workspace_id"])
    op.create_index("ix_online_rules_evaluator_id", "online_rules", ["evaluator_id"])
    op.create_table(
        "online_scores",
        sa.Column("rule_id", sa.String(40), primary_key=True),
        sa.Column("trace_id", sa.String(32), primary_key=True),
        sa.Column("workspace_id", sa.String(40), nullable=False),
        sa.Column("span_id", sa.String(16), nullable=True),
        sa.Column("state", sa.String(12), nullable=False),
        sa.Column("claimed_by", sa.String(80), nullable=True),
        sa.Column("claimed_until", _TZ, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("enqueued_at", _TZ, nullable=False),
        sa.Column("scored_at", _TZ, nullable=True),
        sa.Column("evaluator_id", sa.String(40), nullable=False),
        sa.Column("revision", sa.Integer, nullable=True),
        sa.Column("runtime_id", sa.String(80), nullable=True),
        sa.Column("status", sa.String(20), nullable=True),
        sa.Column("score", sa.Float, nullable=True),
        sa.Column("passed", sa.Boolean, nullable=True),
        sa.Column("label", sa.String(200), nullable=True),
        sa.Column("duration_ms", sa.Float, nullable=True),
        sa.Column("result", sa.Text, nullable=True),
    )
    op.create_index("ix_online_scores_state", "online_scores", ["state", "claimed_until"])
    op.create_index("ix_online_scores_rule_scored", "online_scores", ["rule_id", "scored_at"])
    op.create_index("ix_online_scores_trace", "online_scores", ["workspace_id", "trace_id"])


def downgrade() -> None:
    for table in ("online_scores", "online_rules", "online_traces", "online_spans"):
        op.drop_table(table)
