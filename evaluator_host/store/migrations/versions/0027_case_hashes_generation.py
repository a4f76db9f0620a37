"""A backfill's case key carries its trace's generation (issue 50): ``online_case_hashes`` gets ``first_seen_at``,
the trace's as the page that scored it read it; a re-run answers a trace only from a key of its own generation
(``store/online/case_hashes.py``). A key a page stored while retention deleted its trace in the same instant (on
PostgreSQL neither transaction sees the other's row), or built from a trace swept and sent again before its page
was stored, so never answers a new trace under that id.

The column is added, nullable, to the rows there are (nothing is dropped or rewritten): a key stored before this
revision has no generation (NULL), which equals no trace's, so it answers nothing — the first re-run after it
assembles such a target once more, looks it up in the result cache (its answer still ``cached``) and replaces the
key with one of its generation. Nullable, too, so a service of the release before, still running on the same
database during an upgrade (docs/operations.md: upgrade one, then the others), writes its keys as before: without
a generation, answering nothing here. The add and the drop are each skipped when already done: SQLite runs DDL
outside the migration's transaction, so a service killed between the change and the version's stamp starts again.

Revision ID: 0027_case_hashes_generation
Revises: 0026_case_hashes_sweep
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027_case_hashes_generation"
down_revision = "0026_case_hashes_sweep"
branch_labels = None
depends_on = None


def _columns() -> set[str]:
    return {str(c["name"]) for c in sa.inspect(op.get_bind()).get_columns("online_case_hashes")}


def upgrade() -> None:
    if "first_seen_at" not in _columns():
        op.add_column("online_case_hashes", sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    if "first_seen_at" in _columns():
        op.drop_column("online_case_hashes", "first_seen_at")
