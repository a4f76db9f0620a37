"""Workspaces: the ``workspaces``, ``api_keys``, ``secrets`` and ``workspace_runtimes`` tables, a
``workspace_id`` on evaluators, datasets and jobs, and an evaluator revision's ``secrets`` and
``network``.

Every row stored before belongs to the default workspace: ``workspace_id`` is added NOT NULL with
the server default ``'ws_default'`` (so existing rows get it without a data move, and a release
that predates workspaces, still running against a shared database during a rolling upgrade,
inserts into it), and the default workspace's own row is inserted here, once, under the
migration's lock (a check-then-insert at start-up would race between services starting together).
The revisions' new columns are nullable: null is "none" (no secrets, no network).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

DEFAULT_WORKSPACE = "ws_default"  # evaluator_host.tenancy.models.DEFAULT_WORKSPACE, frozen here
_TZ = sa.DateTime(timezone=True)
_SCOPED = ("evaluators", "datasets", "jobs")


def upgrade() -> None:
    workspaces = op.create_table(
        "workspaces",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("quotas", sa.JSON, nullable=False),
        sa.Column("network_allow", sa.JSON, nullable=False),
        sa.Column("created_at", _TZ, nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("workspace_id", sa.String(40), sa.ForeignKey("workspaces.id"), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("prefix", sa.String(20), nullable=False),
        sa.Column("created_at", _TZ, nullable=False),
        sa.Column("last_used_at", _TZ, nullable=True),
        sa.Column("revoked_at", _TZ, nullable=True),
    )
    op.create_index("ix_api_keys_workspace_id", "api_keys", ["workspace_id"])
    op.create_table(
        "secrets",
        sa.Column("workspace_id", sa.String(40), sa.ForeignKey("workspaces.id"), primary_key=True),
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("ciphertext", sa.Text, nullable=False),
        sa.Column("created_at", _TZ, nullable=False),
        sa.Column("updated_at", _TZ, nullable=False),
    )
    op.create_table(
        "workspace_runtimes",
        sa.Column("workspace_id", sa.String(40), sa.ForeignKey("workspaces.id"), primary_key=True),
        sa.Column("runtime_id", sa.String(80), primary_key=True),
        sa.Column("created_at", _TZ, nullable=False),
    )
    op.bulk_insert(
        workspaces,
        [
            {
                "id": DEFAULT_WORKSPACE,
                "name": "default",
                "quotas": {},
                "network_allow": [],
                "created_at": datetime.now(UTC),
            }
        ],
    )
    for table in _SCOPED:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("workspace_id", sa.String(40), nullable=False, server_default=DEFAULT_WORKSPACE))
        op.create_index(f"ix_{table}_workspace_id", table, ["workspace_id"])
    with op.batch_alter_table("evaluator_revisions") as batch:
        batch.add_column(sa.Column("secrets", sa.JSON, nullable=True))
        batch.add_column(sa.Column("network", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evaluator_revisions") as batch:
        batch.drop_column("network")
        batch.drop_column("secrets")
    for table in reversed(_SCOPED):
        op.drop_index(f"ix_{table}_workspace_id", table_name=table)
        with op.batch_alter_table(table) as batch:
            batch.drop_column("workspace_id")
    for table in ("workspace_runtimes", "secrets", "api_keys", "workspaces"):
        op.drop_table(table)
