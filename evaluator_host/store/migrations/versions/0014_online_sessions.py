"""Session-level online rules (issue 50): a conversation's traces scored together once it is quiet.

* ``online_sessions`` — one row per (workspace, session id): when it was first seen, the last span of
  its traces (as routed), how many traces it has (``num_traces``: its *generation*, which grows by one
  per trace routed into it).
* ``online_session_traces`` — which traces a session has (and each one's first start, for the order).
* ``online_session_rules`` — which session-level rule targets which session (a trace of it matched the
  rule's filter and the session is in its sample), the generation last queued for it, and when it is
  ready next (``ready_at``: its last span + the rule's ``quiet_s``; null: nothing to queue) — the
  index a routing pass reads ready sessions by.
* ``online_scores`` gains ``session_id`` and ``generation`` (a session score's; null otherwise) and
  ``superseded_by`` (the target id of a later generation's score of the same (rule, session); null: the
  score is current). Existing rows are trace or span scores: current, no session.
* Backfill (issue 50): ``online_backfills`` — a rule's stored traces in a time range scored on demand
  (planned page by page from ``cursor_at``/``cursor_id``, claimed by one service at a time), and
  ``online_scores.backfill_id`` — the backfill that queued a row. A backfill that scores a target again
  with another revision gives its row the target id ``<target id>@r<revision>``.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "online_sessions",
        sa.Column("workspace_id", sa.String(40), primary_key=True),
        sa.Column("session_id", sa.String(128), primary_key=True),
        sa.Column("first_seen_at", _TZ, nullable=False),
        sa.Column("last_span_at", _TZ, nullable=False),
        sa.Column("num_traces", sa.Integer, nullable=False),
    )
    op.create_index(
        "ix_online_sessions_workspace_seen", "online_sessions", ["workspace_id", "first_seen_at", "session_id"]
    )
    op.create_index("ix_online_sessions_last", "online_sessions", ["last_span_at"])
    op.create_table(
        "online_session_traces",
        sa.Column("workspace_id", sa.String(40), primary_key=True),
        sa.Column("session_id", sa.String(128), primary_key=True),
        sa.Column("trace_id", sa.String(32), primary_key=True),
        sa.Column("start_ns", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "online_session_rules",
        sa.Column("rule_id", sa.String(40), primary_key=True),
        sa.Column("session_id", sa.String(128), primary_key=True),
        sa.Column("workspace_id", sa.String(40), nullable=False),
        sa.Column("queued_generation", sa.Integer, nullable=False),
        sa.Column("quiet_s", sa.Integer, nullable=False),
        sa.Column("ready_at", _TZ, nullable=True),
    )
    op.create_index("ix_online_session_rules_session", "online_session_rules", ["workspace_id", "session_id"])
    op.create_index("ix_online_session_rules_ready", "online_session_rules", ["ready_at"])
    with op.batch_alter_table("online_scores") as batch:
        batch.add_column(sa.Column("session_id", sa.String(128), nullable=True))
        batch.add_column(sa.Column("generation", sa.Integer, nullable=True))
        batch.add_column(sa.Column("superseded_by", sa.String(200), nullable=True))
        batch.add_column(sa.Column("backfill_id", sa.String(40), nullable=True))
    op.create_index("ix_online_scores_session", "online_scores", ["workspace_id", "session_id"])
    op.create_index("ix_online_scores_backfill", "online_scores", ["backfill_id", "state"])
    op.create_table(
        "online_backfills",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("rule_id", sa.String(40), nullable=False, index=True),
        sa.Column("workspace_id", sa.String(40), nullable=False),
        sa.Column("since", _TZ, nullable=True),
        sa.Column("until", _TZ, nullable=True),
        sa.Column("max_targets", sa.Integer, nullable=False),
        sa.Column("revision", sa.Integer, nullable=True),
        sa.Column("status", sa.String(12), nullable=False),
        sa.Column("cursor_at", _TZ, nullable=True),
        sa.Column("cursor_id", sa.String(32), nullable=True),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("queued", sa.Integer, nullable=False),
        sa.Column("skipped", sa.Integer, nullable=False),
        sa.Column("claimed_by", sa.String(80), nullable=True),
        sa.Column("claimed_until", _TZ, nullable=True),
        sa.Column("created_at", _TZ, nullable=False),
        sa.Column("updated_at", _TZ, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("online_backfills")
    op.drop_index("ix_online_scores_backfill", table_name="online_scores")
    op.drop_index("ix_online_scores_session", table_name="online_scores")
    op.execute("DELETE FROM online_scores WHERE session_id IS NOT NULL OR target_id LIKE '%@r%'")
    with op.batch_alter_table("online_scores") as batch:
        batch.drop_column("backfill_id")
        batch.drop_column("superseded_by")
        batch.drop_column("generation")
        batch.drop_column("session_id")
    op.drop_index("ix_online_session_rules_ready", table_name="online_session_rules")
    op.drop_index("ix_online_session_rules_session", table_name="online_session_rules")
    op.drop_table("online_session_rules")
    op.drop_table("online_session_traces")
    op.drop_index("ix_online_sessions_last", table_name="online_sessions")
    op.drop_index("ix_online_sessions_workspace_seen", table_name="online_sessions")
    op.drop_table("online_sessions")
