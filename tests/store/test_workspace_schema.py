"""A database made before workspaces: opened by this version, every row belongs to the default workspace."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from evaluator_host.errors import NotFoundError
from evaluator_host.store import EvaluatorStore
from evaluator_host.store.db import DEFAULT_WORKSPACE, make_engine
from evaluator_host.store.jobs import JobStore
from evaluator_host.store.workspaces import WorkspaceStore

# The tables as the release before workspaces created them (SQLite DDL of its models).
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
    "INSERT INTO evaluators VALUES ('ev_old', 1, '2026-01-01 00:00:00', '2026-01-01 00:00:00', NULL)",
    """INSERT INTO evaluator_revisions VALUES ('ev_old', 1, 'old', '', 'python', 'evaluate', 'x', '{}', '{}',
       'python-bare', '2026-01-01 00:00:00', NULL)""",
    "INSERT INTO datasets VALUES ('ds_old', 'd', 'jsonl', 1, '[\"a\"]', 10, 0, '2026-01-01 00:00:00')",
    """INSERT INTO jobs VALUES ('job_old', 'ev_old', 1, 'python-bare', 'ds_old', '{}', 1, 'succeeded', 1, 1, 0,
       NULL, 0.1, NULL, '[]', '2026-01-01 00:00:00', NULL, NULL)""",
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
    WorkspaceStore(engine)  # the default workspace exists from the first start
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
