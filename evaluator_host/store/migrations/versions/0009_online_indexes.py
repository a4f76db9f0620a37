"""Indexes for the two online listings that sorted on unindexed columns.

* ``GET /v1/traces`` pages a workspace's traces newest first: ``WHERE workspace_id = ? ORDER BY
  first_seen_at DESC, trace_id DESC`` (keyset ``before``) — ``ix_online_traces_workspace_seen``
  (workspace_id, first_seen_at, trace_id) answers it in index order instead of sorting every trace of
  the workspace.
* ``GET /v1/online-rules/{id}/scores`` pages a rule's scores: ``WHERE rule_id = ? ORDER BY enqueued_at
  DESC, trace_id DESC`` (time range on ``enqueued_at``) — ``ix_online_scores_rule_enqueued``
  (rule_id, enqueued_at, trace_id).

Both databases; no data change.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_online_traces_workspace_seen", "online_traces", ["workspace_id", "first_seen_at", "trace_id"])
    op.create_index("ix_online_scores_rule_enqueued", "online_scores", ["rule_id", "enqueued_at", "trace_id"])


def downgrade() -> None:
    op.drop_index("ix_online_scores_rule_enqueued", table_name="online_scores")
    op.drop_index("ix_online_traces_workspace_seen", table_name="online_traces")
