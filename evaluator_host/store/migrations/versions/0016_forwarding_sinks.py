"""Forwarding and score sinks (issue 52): ``workspaces.forwarding`` (JSON, null: none) — the OTLP/HTTP
endpoints every span a workspace receives is forwarded to, unchanged (``online/receive/forwarding.py``);
``online_rules.sinks`` (JSON, null: none) — where a rule's scores are written besides our own table; and
``online_sink_deliveries``, one row per (rule, target, sink): the delivery's state, attempts, back-off and
claim (``store/sinks/deliveries.py``): its key makes a score recorded once per sink whatever restarts.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


_TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("workspaces") as batch:
        batch.add_column(sa.Column("forwarding", sa.JSON, nullable=True))
    with op.batch_alter_table("online_rules") as batch:
        batch.add_column(sa.Column("sinks", sa.JSON, nullable=True))
    op.create_table(
        "online_sink_deliveries",
        sa.Column("rule_id", sa.String(40), primary_key=True),
        sa.Column("target_id", sa.String(200), primary_key=True),
        sa.Column("sink", sa.Integer, primary_key=True),
        sa.Column("workspace_id", sa.String(40), nullable=False),
        sa.Column("type", sa.String(20), nullable=False),
        sa.Column("key", sa.String(80), nullable=False),
        sa.Column("state", sa.String(12), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("due_at", _TZ, nullable=False),
        sa.Column("claimed_by", sa.String(80), nullable=True),
        sa.Column("claimed_until", _TZ, nullable=True),
        sa.Column("created_at", _TZ, nullable=False),
        sa.Column("delivered_at", _TZ, nullable=True),
    )
    op.create_index("ix_online_sink_deliveries_due", "online_sink_deliveries", ["state", "due_at"])


def downgrade() -> None:
    op.drop_index("ix_online_sink_deliveries_due", "online_sink_deliveries")
    op.drop_table("online_sink_deliveries")
    with op.batch_alter_table("online_rules") as batch:
        batch.drop_column("sinks")
    with op.batch_alter_table("workspaces") as batch:
        batch.drop_column("forwarding")
