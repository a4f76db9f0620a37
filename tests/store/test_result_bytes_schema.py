"""Migration 0005 (issue 28, item 4): a database at 0004 with stored results gains ``jobs.result_bytes``,
each job counted once from what it stored (UTF-8 bytes), on SQLite and on PostgreSQL; the workspace's
storage usage then counts them beside its datasets."""

from __future__ import annotations

from alembic import command
from sqlalchemy import create_engine, text

from evaluator_host.store import schema
from evaluator_host.store.db import DEFAULT_WORKSPACE, make_engine
from evaluator_host.store.jobs.repository import JobStore

RESULT = '{"status": "ok", "details": {"text": "é' + "x" * 1000 + '"}}'  # one two-byte character


def test_a_database_at_0004_with_results_counts_each_jobs_result_bytes(database_url: str) -> None:
    url = schema.normalized_url(database_url)
    old = create_engine(url)
    with old.begin() as conn:
        command.upgrade(schema._config(conn), "0004")
        conn.execute(
            text(
                "INSERT INTO datasets (id, name, format, row_count, columns, bytes, inline, created_at) "
                "VALUES ('ds_old', 'd', 'jsonl', 2, '[]', 300, false, CURRENT_TIMESTAMP)"
            )
        )
        for job in ("job_a", "job_b"):
            conn.execute(
                text(
                    "INSERT INTO jobs (id, evaluator_id, revision, runtime_id, dataset_id, field_mapping, "
                    "parallelism, status, total, done, failed, active_s, warnings, created_at) VALUES "
                    f"('{job}', 'ev_1', 1, 'python-bare', 'ds_old', '{{}}', 1, 'succeeded', 2, 2, 0, 0.1, '[]', "
                    "CURRENT_TIMESTAMP)"
                )
            )
        for idx in (0, 1):  # job_a stored two rows, job_b none
            conn.execute(
                text(
                    "INSERT INTO job_results (job_id, idx, status, revision, runtime_id, result) "
                    "VALUES ('job_a', :i, 'ok', 1, 'python-bare', :r)"
                ),
                {"i": idx, "r": RESULT},
            )
    old.dispose()
    engine = make_engine(database_url)
    assert schema.state(engine).up_to_date
    store = JobStore(engine)
    size = len(RESULT.encode())
    assert (store.get_job("job_a").result_bytes, store.get_job("job_b").result_bytes) == (2 * size, 0)
    assert store.storage_bytes(DEFAULT_WORKSPACE) == 300 + 2 * size
    store.delete_job("job_a")  # deleting a job frees what it stored
    assert store.storage_bytes(DEFAULT_WORKSPACE) == 300
    engine.dispose()
