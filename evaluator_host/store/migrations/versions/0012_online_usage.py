"""What each workspace's stored spans add up to (``online_usage``: spans and UTF-8 bytes of their bodies),
kept in the transactions that store and delete spans: spans count against the workspace's storage quota
and its share of ``online_max_stored_spans`` (issue 47, item 5). Filled from the spans already stored.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "online_usage",
        sa.Column("workspace_id", sa.String(40), primary_key=True),
        sa.Column("spans", sa.BigInteger, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
    )
    size = "octet_length(body)" if op.get_bind().dialect.name == "postgresql" else "length(CAST(body AS BLOB))"
    op.execute(
        "INSERT INTO online_usage (workspace_id, spans, bytes) "
        f"SELECT workspace_id, count(*), coalesce(sum({size}), 0) FROM online_spans GROUP BY workspace_id"
    )


def downgrade() -> None:
    op.drop_table("online_usage")
