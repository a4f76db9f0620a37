"""Migration 0003 (workspaces): a database made before workspaces — at revision 0002 on SQLite and
PostgreSQL, or before migrations — upgrades in place, every row belongs to the default workspace,
and the result is exactly the models' schema.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from evaluator_host.errors import NotFoundError
from evaluator_host.store import EvaluatorStore, schema
from evaluator_host.store.db import DEFAULT_WORKSPACE, Base, make_engine
from evaluator_host.store.jobs.repository import JobStore
from evaluator_host.store.workspaces import WorkspaceStore

# Rows as the release before workspaces stored them (portable SQL, columns named).
ROWS = [
    """INSERT INTO evaluators (id, latest_revision, created_at, updated_at, deleted_at)
       VALUES ('ev_old', 1, '2026-01-01 00:00:00', '2026-01-01 00:00:00', NULL)""",
    """INSERT INTO evaluator_revisions (evaluator_id, revision, name, description, language, interface, code,
       packages, settings, runtime_id, created_at, capabilities)
       VALUES ('ev_old', 1, 'old', '', 'python', 'evaluate', 'x', '{}', '{}', 'python-bare', '2026-01-01 00:00:00',
       NULL)""",
    """INSERT INTO datasets (id, name, format, row_count, columns, bytes, inline, created_at)
       VALUES ('ds_old', 'd', 'jsonl', 1, '["a"]', 10, false, '2026-01-01 00:00:00')""",
    """INSERT INTO jobs (id, evaluator_id, revision, runtime_id, dataset_id, field_mapping, parallelism, status,
       total, done, failed, acc_state, active_s, error, warnings, created_at, started_at, finished_at)
       VALUES ('job_old', 'ev_old', 1, 'python-bare', 'ds_old', '{}', 1, 'succeeded', 1, 1, 0, NULL, 0.1, NULL,
       '[]', '2026-01-01 00:00:00', NULL, NULL)""",
]
# The tables as the release before migrations created them (SQLite DDL of its models), with ROWS.
BEFORE_WORKSPACES = [
    """CREATE TABLE evaluators (id VARCHAR(40) NOT NULL, latest_revision INTEGER NOT NULL,
       created_at DATETIME NOT NULL, updated_at DATETIME NOT NULL, deleted_at DATETIME, PRIMARY KEY (id))""",
    """CREATE TABLE evaluator_revisions (evaluator_id VARCHAR(40) NOT NULL, revision INTEGER NOT NULL,
       name VARCHAR(200) NOT NULL, description TEXT NOT NULL, language VARCHAR(20) NOT NULL,
       interface VARCHAR(20) NOT NULL, code TEXT NOT NULL, packages JSON NOT NULL, settings JSON NOT NULL,
       runtime_id VARCHAR(80) NOT NULL, created_at DATETIME NOT NULL, capabilities JSON,
       PRIMARY KEY (evaluator_id, revision), FOREIGN KEY(evaluator_id) REFERENCES evaluators (id))""",
    """CREATE TABLE datasets (id VARCHAR(40) NOT NULL, name VARCHAR(200) NOT NULL, format VARCHAR(10) NOT NULL,
       row_count BIGINT NOT NULL, columns JSON NOT NULL, bytes BIGINT NOT NULL, inline BOOLEAN NOT NULL,
       created_at DATETIME NOT NULL, PRIMARY KEY (id))""",
    """CREATE TABLE jobs (id VARCHAR(40) NOT NULL, evaluator_id VARCHAR(40) NOT NULL, revision INTEGER NOT NULL,
       runtime_id VARCHAR(80) NOT NULL, dataset_id VARCHAR(40) NOT NULL, field_mapping JSON NOT NULL,
       parallelism INTEGER NOT NULL, status VARCHAR(20) NOT NULL, total BIGINT NOT NULL, done BIGINT NOT NULL,
       failed BIGINT NOT NULL, acc_state JSON, active_s FLOAT NOT NULL, error JSON, warnings JSON NOT NULL,
       created_at DATETIME NOT NULL, started_at DATETIME, finished_at DATETIME, PRIMARY KEY (id),
       FOREIGN KEY(dataset_id) REFERENCES datasets (id))""",
    *ROWS,
]


def test_an_old_database_gets_the_new_columns_and_its_rows_go_to_the_default_workspace(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/old.db"
    old = create_engine(url)
    with old.begin() as conn:
        for statement in BEFORE_WORKSPACES:
            conn.execute(text(statement))
    old.dispose()
    engine = make_engine(url)
    columns = {t: {c["name"] for c in inspect(engine).get_columns(t)} for t in ("evaluators", "datasets", "jobs")}
    assert all("workspace_id" in names for names in columns.values())
    assert {"secrets", "network"} <= {c["name"] for c in inspect(engine).get_columns("evaluator_revisions")}
    assert "ix_evaluators_workspace_id" in {i["name"] for i in inspect(engine).get_indexes("evaluators")}
    assert WorkspaceStore(engine).get(DEFAULT_WORKSPACE).name == "default"  # the migration made it
    evaluators, jobs = EvaluatorStore(engine), JobStore(engine)
    record = evaluators.get(DEFAULT_WORKSPACE, "ev_old")
    assert (record.workspace_id, record.secrets, record.network) == (DEFAULT_WORKSPACE, [], [])
    assert [d.id for d in jobs.list_datasets(DEFAULT_WORKSPACE)] == ["ds_old"]
    assert [j.id for j in jobs.list_jobs(DEFAULT_WORKSPACE)] == ["job_old"]
    with pytest.raises(NotFoundError):
        evaluators.get("ws_other", "ev_old")
    with pytest.raises(NotFoundError):
        jobs.get_job("job_old", "ws_other")
    make_engine(url)  # a second start changes nothing


def test_a_database_at_0002_with_rows_upgrades_to_workspaces_on_either_database(database_url: str) -> None:
    url = schema.normalized_url(database_url)
    old = create_engine(url)
    with old.begin() as conn:  # the schema main's release made, with its rows (no NOT NULL column lacks a value)
        config = schema._config(conn)
        command.upgrade(config, "0002")
        for statement in ROWS:
            conn.execute(text(statement))
    old.dispose()
    engine = make_engine(database_url)
    assert schema.state(engine).up_to_date  # at the head: 0003 (workspaces) and every later revision ran
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        scoped = {
            t: conn.execute(text(f"SELECT workspace_id FROM {t}")).scalars().all()
            for t in ("evaluators", "datasets", "jobs")
        }
    assert scoped == {"evaluators": [DEFAULT_WORKSPACE], "datasets": [DEFAULT_WORKSPACE], "jobs": [DEFAULT_WORKSPACE]}
    assert [w.id for w in WorkspaceStore(engine).list_all()] == [DEFAULT_WORKSPACE]
    record = EvaluatorStore(engine).get(DEFAULT_WORKSPACE, "ev_old")
    assert (record.secrets, record.network) == ([], [])
    with engine.begin() as conn:  # an older release, still running on a shared database, inserts without one
        conn.execute(
            text(
                "INSERT INTO datasets (id, name, format, row_count, columns, bytes, inline, created_at) "
                "VALUES ('ds_older', 'd', 'jsonl', 1, '[]', 1, false, CURRENT_TIMESTAMP)"
            )
        )
    assert JobStore(engine).get_dataset("ds_older", DEFAULT_WORKSPACE).workspace_id == DEFAULT_WORKSPACE
    engine.dispose()
