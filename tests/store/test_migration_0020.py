"""Migration 0020_job_leases (issue 54), on SQLite and PostgreSQL: an unfinished job from before leases comes
unleased — its owner resumes it as before (and leases it), and another service may adopt it; down (the column
goes, the job stays) and up again."""

from __future__ import annotations

from alembic import command
from sqlalchemy import create_engine, text

from evaluator_host.store import schema
from evaluator_host.store.db import make_engine
from evaluator_host.store.jobs.repository import JobStore

_DATASET = (
    "INSERT INTO datasets (id, workspace_id, name, format, row_count, columns, bytes, inline, created_at) "
    "VALUES ('ds_1', 'default', 'd', 'jsonl', 3, '[\"a\"]', 42, false, '2026-11-25 12:00:00')"
)
_JOB = (
    "INSERT INTO jobs (id, workspace_id, evaluator_id, revision, runtime_id, dataset_id, field_mapping, parallelism, "
    "status, total, done, failed, active_s, warnings, created_at, owner, result_bytes, cached) VALUES "
    "(:id, 'default', 'ev_1', 1, 'python-1', 'ds_1', '{}', 1, 'running', 3, 0, 0, 0.0, '[]', "
    "'2026-11-25 12:00:00', :owner, 0, 0)"
)


def test_0020_leaves_old_jobs_unleased_resumable_by_their_owner_and_adoptable(database_url: str) -> None:
    engine = create_engine(database_url)
    with engine.begin() as conn:
        command.upgrade(schema._config(conn), "0019_model_call_budget")
        conn.execute(text(_DATASET))
        conn.execute(text(_JOB), {"id": "job_a", "owner": "service-a"})
        conn.execute(text(_JOB), {"id": "job_b", "owner": "service-b"})
    engine.dispose()
    engine = make_engine(database_url)  # migrates to the newest
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT id, lease_until FROM jobs ORDER BY id")).all() == [
                ("job_a", None),
                ("job_b", None),
            ]
        a = JobStore(engine, owner="service-a")
        assert [j.id for j in a.unfinished()] == ["job_a"]  # resumed by its owner, as before: leased now
        assert a.get_job("job_a").lease_until is not None
        assert [j.id for j in a.adopt_expired()] == ["job_b"]  # unleased, its owner gone: adoptable
        with engine.begin() as conn:
            command.downgrade(schema._config(conn), "0019_model_call_budget")
            assert conn.execute(text("SELECT id, owner FROM jobs ORDER BY id")).all() == [
                ("job_a", "service-a"),
                ("job_b", "service-a"),
            ]
            command.upgrade(schema._config(conn), "head")
            assert conn.execute(text("SELECT count(*) FROM jobs WHERE lease_until IS NULL")).scalar() == 2
    finally:
        engine.dispose()
