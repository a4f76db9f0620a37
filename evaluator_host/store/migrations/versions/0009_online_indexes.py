"""Indexes for the online queries that read and sorted every row of a state or a workspace.

* ``GET /v1/traces`` pages a workspace's traces newest first: ``WHERE workspace_id = ? ORDER BY
  first_seen_at DESC, trace_id DESC`` (keyset ``before``) — ``ix_online_traces_workspace_seen``
  (workspace_id, first_seen_at, trace_id) answers it in index order instead of sorting every trace of
  the workspace.
* ``GET /v1/online-rules/{id}/scores`` pages a rule's scores: ``WHERE rule_id = ? ORDER BY enqueued_at
  DESC, trace_id DESC`` (time range on ``enqueued_at``) — ``ix_online_scores_rule_enqueued``
  (rule_id, enqueued_at, trace_id).
* The router takes the oldest ``ready`` traces (``WHERE state = 'ready' ORDER BY ready_at, trace_id
  LIMIT 500``) — ``ix_online_traces_state_ready`` (state, ready_at, trace_id).
* The scorer claims the oldest claimable scores (``ORDER BY enqueued_at LIMIT n``): on SQLite it read
  every ``queued`` row and sorted them per claim, a cost growing with the backlog it is draining —
  ``ix_online_scores_state_enqueued`` (state, enqueued_at) gives them in order.

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
    op.create_index("ix_online_traces_state_ready", "online_traces", ["state", "ready_at", "trace_id"])
    op.create_index("ix_online_scores_state_enqueued", "online_scores", ["state", "enqueued_at"])


def downgrade() -> None:
    op.drop_index("ix_online_scores_state_enqueued", table_name="online_scores")
    op.drop_index("ix_online_traces_state_ready", table_name="online_traces")
    op.drop_index("ix_online_scores_rule_enqueued", table_name="online_scores")
    op.drop_index("ix_online_traces_workspace_seen", table_name="online_traces")
