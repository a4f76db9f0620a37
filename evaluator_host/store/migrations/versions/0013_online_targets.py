"""Online rules score a *target* (issue 50): ``online_rules.target`` (JSON, null: ``{"level": "trace"}``)
and ``online_scores.target_id`` — the queue's key becomes (rule_id, target_id) instead of (rule_id,
trace_id), so a span-level rule holds one row per (rule, span) (``target_id`` = ``<trace id>/<span id>``),
and session level (next) one per (rule, session). Existing rows stay valid: their ``target_id`` is their
``trace_id`` (a trace-level rule's target id), so they keep their uniqueness and their API cursors.

The table is rebuilt on both databases (a primary key cannot change in place on SQLite): same columns
plus ``target_id``, rows copied, indexes made again (the rule's page index ends with ``target_id``: the
scores API pages by it). Downgrade keeps the trace-level rows only (a span's row has no place in a
(rule_id, trace_id) key).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_TZ = sa.DateTime(timezone=True)
_COLUMNS = (
    "rule_id, trace_id, workspace_id, span_id, state, claimed_by, claimed_until, attempts, enqueued_at, "
    "scored_at, evaluator_id, revision, runtime_id, status, score, passed, label, duration_ms, result"
)
_INDEXES = (
    ("ix_online_scores_state", ["state", "claimed_until"]),
    ("ix_online_scores_rule_scored", ["rule_id", "scored_at"]),
    ("ix_online_scores_trace", ["workspace_id", "trace_id"]),
    ("ix_online_scores_state_enqueued", ["state", "enqueued_at"]),
)


def _table(name: str, with_target: bool) -> None:
    key = [sa.Column("rule_id", sa.String(40), primary_key=True)]
    if with_target:
        key += [
            sa.Column("target_id", sa.String(200), primary_key=True),
            sa.Column("trace_id", sa.String(32), nullable=False),
        ]
    else:
        key += [sa.Column("trace_id", sa.String(32), primary_key=True)]
    op.create_table(
        name,
        *key,
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


def _drop_old() -> None:
    for name, _ in _INDEXES:
        op.drop_index(name, table_name="online_scores")
    op.drop_index("ix_online_scores_rule_enqueued", table_name="online_scores")
    op.drop_table("online_scores")


def _rename_key() -> None:
    if op.get_bind().dialect.name == "postgresql":  # the key keeps its table's first name: give it the usual one
        op.execute("ALTER TABLE online_scores RENAME CONSTRAINT online_scores_0013_pkey TO online_scores_pkey")


def _indexes(page_key: str) -> None:
    for name, columns in _INDEXES:
        op.create_index(name, "online_scores", columns)
    op.create_index("ix_online_scores_rule_enqueued", "online_scores", ["rule_id", "enqueued_at", page_key])


def upgrade() -> None:
    with op.batch_alter_table("online_rules") as batch:
        batch.add_column(sa.Column("target", sa.JSON, nullable=True))
    _table("online_scores_0013", with_target=True)
    op.execute(f"INSERT INTO online_scores_0013 (target_id, {_COLUMNS}) SELECT trace_id, {_COLUMNS} FROM online_scores")
    _drop_old()
    op.rename_table("online_scores_0013", "online_scores")
    _rename_key()
    _indexes("target_id")


def downgrade() -> None:
    _table("online_scores_0013", with_target=False)
    op.execute(
        f"INSERT INTO online_scores_0013 ({_COLUMNS}) SELECT {_COLUMNS} FROM online_scores WHERE target_id = trace_id"
    )
    _drop_old()
    op.rename_table("online_scores_0013", "online_scores")
    _rename_key()
    _indexes("trace_id")
    with op.batch_alter_table("online_rules") as batch:
        batch.drop_column("target")
