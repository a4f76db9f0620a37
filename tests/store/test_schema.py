"""The schema's migrations (evaluator_host/store/schema.py, store/migrations).

A fresh database migrates to exactly the models' schema (SQLite and PostgreSQL); a database
made by main before migrations existed (``fixtures/pre_alembic_08a8d8f.sql``, made through
that code's own API) upgrades in place with every row kept and a service then serves it; an
older one still (no ``capabilities`` column, no ``idempotency_keys`` table) too; a database a
newer release migrated is refused untouched; concurrent starters on PostgreSQL, and processes
sharing one SQLite file, migrate once.
"""

from __future__ import annotations

import array
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from fastapi.testclient import TestClient
from sqlalchemy import Connection, Engine, create_engine, inspect, text

from evaluator_host.api import create_app
from evaluator_host.errors import DatabaseSchemaError
from evaluator_host.store import EvaluatorStore, schema
from evaluator_host.store.db import DEFAULT_WORKSPACE, Base, make_engine, utcnow
from evaluator_host.store.jobs.repository import DatasetRecord, JobStore
from tests.support.backends import postgres_only
from tests.support.pg import Cluster
from tests.support.service import make_settings

FIXTURES = Path(__file__).with_name("fixtures")
LEGACY = {  # what the fixture holds
    "evaluator": "ev_ad8c9f41596a473886b3",
    "deleted": "ev_6617bb30f3b147a58fd1",
    "dataset": "ds_4274c5e04d4f4812a05d",
    "inline": "ds_12d973d298864cfaafa2",
    "job": "job_c504e97466684393a900",
    "inline_job": "job_800e3d1cb2244e279fb4",
}
TABLES = ["datasets", "evaluator_revisions", "evaluators", "idempotency_keys", "job_results", "jobs"]


def legacy_database(path: Path, *, older: bool = False) -> Path:
    """The pre-Alembic database of the fixture at ``path`` (``older``: as a release before capabilities
    and idempotency keys made it)."""
    sql = (FIXTURES / "pre_alembic_08a8d8f.sql").read_text()
    with sqlite3.connect(path) as db:
        db.executescript(sql)
        if older:
            db.executescript("DROP TABLE idempotency_keys; ALTER TABLE evaluator_revisions DROP COLUMN capabilities;")
    return path


def counts(url: str) -> dict[str, int]:
    engine = create_engine(url)
    with engine.connect() as conn:
        found = {t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one() for t in TABLES if has(conn, t)}
    engine.dispose()
    return found


def has(conn: Connection, table: str) -> bool:
    return inspect(conn).has_table(table)


def test_a_fresh_database_migrates_to_exactly_the_models_schema(database_url: str) -> None:
    engine = make_engine(database_url)
    assert schema.state(engine).up_to_date and schema.state(engine).current == schema.head()
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    engine.dispose()


def test_starting_again_on_a_current_database_changes_nothing(database_url: str) -> None:
    first = make_engine(database_url)
    EvaluatorStore(first).create(
        DEFAULT_WORKSPACE, name="n", description="", language="python", interface="evaluate", code="x",
        packages={}, settings={}, runtime_id="python-1",
    )  # fmt: skip
    first.dispose()
    again = make_engine(database_url)
    assert schema.upgrade(again).up_to_date  # nothing was left to do
    assert len(EvaluatorStore(again).list_all(DEFAULT_WORKSPACE)) == 1
    again.dispose()


def test_a_pre_alembic_database_made_by_main_upgrades_in_place_keeping_every_row(tmp_path: Path) -> None:
    url = f"sqlite:///{legacy_database(tmp_path / 'evaluator-host.db')}"
    before = counts(url)
    assert before == {
        "datasets": 2, "evaluator_revisions": 3, "evaluators": 2, "idempotency_keys": 1, "job_results": 52, "jobs": 2,
    }  # fmt: skip
    engine = make_engine(url)
    assert schema.state(engine).up_to_date
    assert counts(url) == before
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    evaluators, jobs = EvaluatorStore(engine), JobStore(engine)
    [live] = evaluators.list_all(DEFAULT_WORKSPACE)  # every row stored before workspaces is the default's
    assert (live.id, live.revision, live.name) == (LEGACY["evaluator"], 2, "exact ✓")
    assert live.description == "second revision" and (live.secrets, live.network) == ([], [])
    assert evaluators.get_revision(DEFAULT_WORKSPACE, LEGACY["deleted"], 1).language == "javascript"  # deleted
    job = jobs.get_job(LEGACY["job"], DEFAULT_WORKSPACE)
    assert (job.status, job.total, job.done, job.failed) == ("succeeded", 50, 50, 0)
    assert len(jobs.results(LEGACY["job"], 0, 100)) == 50 and job.created_at.tzinfo is not None
    engine.dispose()


def test_an_older_pre_alembic_database_gains_what_it_lacked(tmp_path: Path) -> None:
    url = f"sqlite:///{legacy_database(tmp_path / 'old.db', older=True)}"
    before = counts(url)
    assert "idempotency_keys" not in before
    engine = make_engine(url)
    assert counts(url) == {**before, "idempotency_keys": 0}
    assert EvaluatorStore(engine).get(DEFAULT_WORKSPACE, LEGACY["evaluator"]).capabilities is None  # before reports
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    engine.dispose()


def test_a_service_started_on_a_pre_alembic_data_dir_serves_what_it_held(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    (data_dir / "datasets").mkdir(parents=True)
    legacy_database(data_dir / "evaluator-host.db")
    for dataset in (LEGACY["dataset"], LEGACY["inline"]):
        shutil.copy(FIXTURES / f"{dataset}.jsonl", data_dir / "datasets")
        (data_dir / "datasets" / f"{dataset}.idx").write_bytes(array.array("Q", [0]).tobytes())
    with TestClient(create_app(make_settings(data_dir, backend="process", spare_workers=0))) as client:
        listed = client.get("/v1/evaluators").json()["data"]
        assert [(e["id"], e["revision"]) for e in listed] == [(LEGACY["evaluator"], 2)]
        job = client.get(f"/v1/jobs/{LEGACY['job']}").json()
        assert job["status"] == "succeeded" and job["progress"] == {"total": 50, "done": 50, "failed": 0, "cached": 0}
        results = client.get(f"/v1/jobs/{LEGACY['job']}/results", params={"limit": 100}).json()
        assert [r["index"] for r in results["data"]] == list(range(50))
        assert all(r["result"]["evaluator_id"] == LEGACY["evaluator"] for r in results["data"])
        assert [d["id"] for d in client.get("/v1/datasets").json()["data"]] == [LEGACY["dataset"]]
        rerun = client.post("/v1/jobs", json={"evaluator_id": LEGACY["evaluator"], "dataset_id": LEGACY["dataset"]})
        assert rerun.status_code == 202, rerun.text


def test_a_database_a_newer_release_migrated_is_refused_untouched(database_url: str) -> None:
    make_engine(database_url).dispose()
    engine = create_engine(schema.normalized_url(database_url))
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(DatabaseSchemaError, match="revision '9999'.*newer release"):
        make_engine(database_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == "9999"
    engine.dispose()


def test_a_plain_postgresql_url_gets_the_projects_driver() -> None:
    assert schema.normalized_url("postgresql://u:p@db:5432/x") == "postgresql+psycopg://u:p@db:5432/x"
    assert schema.normalized_url("postgres://u@db/x") == "postgresql+psycopg://u@db/x"
    assert schema.normalized_url("sqlite:////var/x.db") == "sqlite:////var/x.db"


@postgres_only
def test_services_starting_together_on_postgresql_migrate_once(postgres: Cluster) -> None:
    url = postgres.database(driver="postgresql")  # the plain form a user writes
    engines: list[Engine] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            engines.append(make_engine(url))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [] and len(engines) == 4
    for engine in engines:
        assert schema.state(engine).up_to_date
        engine.dispose()


def test_a_database_made_by_create_all_before_migrations_is_adopted_on_either_database(database_url: str) -> None:
    engine = make_engine(database_url)
    jobs = JobStore(engine)
    jobs.add_dataset(DatasetRecord("ds_1", "d", "jsonl", 1, ["a"], 2, False, utcnow()))
    jobs.create_job(
        id="job_1", evaluator_id="ev_1", revision=1, runtime_id="python-1", dataset_id="ds_1",
        field_mapping={}, parallelism=1, total=1, warnings=[],
    )  # fmt: skip
    with engine.begin() as conn:  # what main's create_all made: no version table, nothing of 0002 to 0010
        conn.execute(text("DROP TABLE alembic_version"))
        conn.execute(text("DROP TABLE job_generations"))
        conn.execute(text("DROP TABLE result_cache"))  # 0011
        conn.execute(text("DROP TABLE result_cache_usage"))
        conn.execute(text("DROP TABLE online_usage"))  # 0012
        conn.execute(text("DROP TABLE online_decisions"))  # 0015
        conn.execute(text("DROP TABLE online_sink_deliveries"))  # 0016
        conn.execute(text("DROP TABLE online_shadow_scores"))  # 0021_shadow_revisions
        for table in ("review_verdicts", "review_items", "review_queues"):  # 0018_review_queues
            conn.execute(text(f"DROP TABLE {table}"))
        conn.execute(text("DROP TABLE online_model_calls"))  # 0019_model_call_budget
        for table in ("online_session_rules", "online_session_traces", "online_sessions", "online_backfills"):  # 0014
            conn.execute(text(f"DROP TABLE {table}"))
        conn.execute(text("ALTER TABLE jobs DROP COLUMN sinks"))  # 0017
        conn.execute(text("ALTER TABLE jobs DROP COLUMN sinks_enqueued"))
        conn.execute(text("ALTER TABLE jobs DROP COLUMN lease_until"))  # 0020_job_leases
        conn.execute(text("DROP TABLE dataset_chunks"))  # 0022_dataset_chunks
        conn.execute(text("DROP TABLE rate_buckets"))  # 0023_rate_buckets
        conn.execute(text("DROP TABLE blob_store"))  # 0024_blob_store
        conn.execute(text("DROP TABLE online_case_hashes"))  # 0025_backfill_case_hashes
        conn.execute(text("ALTER TABLE jobs DROP COLUMN cached"))
        conn.execute(text("ALTER TABLE jobs DROP COLUMN target"))
        for table in ("online_scores", "online_rules", "online_traces", "online_spans"):
            conn.execute(text(f"DROP TABLE {table}"))
        conn.execute(text("ALTER TABLE jobs DROP COLUMN owner"))
        conn.execute(text("ALTER TABLE jobs DROP COLUMN result_bytes"))
        conn.execute(text("ALTER TABLE job_results DROP COLUMN worker"))
        for table in ("workspace_runtimes", "secrets", "api_keys", "workspaces"):
            conn.execute(text(f"DROP TABLE {table}"))
        for table in ("evaluators", "datasets", "jobs"):
            conn.execute(text(f"DROP INDEX ix_{table}_workspace_id"))
            conn.execute(text(f"ALTER TABLE {table} DROP COLUMN workspace_id"))
        for column in ("secrets", "network", "fixtures", "fixture_report", "draft"):  # 0003, 0010
            conn.execute(text(f"ALTER TABLE evaluator_revisions DROP COLUMN {column}"))
        conn.execute(text("ALTER TABLE evaluators DROP COLUMN head_revision"))  # 0010
    engine.dispose()
    assert schema.state(again := create_engine(schema.normalized_url(database_url))).legacy
    again.dispose()
    engine = make_engine(database_url)
    assert schema.state(engine).up_to_date
    assert [j.id for j in JobStore(engine, owner="resumer").unfinished()] == ["job_1"]  # ownerless: claimed
    engine.dispose()


def test_processes_starting_together_on_one_sqlite_file_migrate_once(tmp_path: Path) -> None:
    # a service and its queue's worker hosts on one machine share the file and start at once
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    code = "import sys; from evaluator_host.store.db import make_engine; make_engine(sys.argv[1]).dispose()"
    starters = [subprocess.Popen([sys.executable, "-c", code, url], stderr=subprocess.PIPE) for _ in range(6)]
    failed = [p.stderr.read().decode()[-300:] for p in starters if p.wait(timeout=120) != 0]  # type: ignore[union-attr]
    assert failed == []
    engine = create_engine(url)
    try:
        assert schema.state(engine).up_to_date
    finally:
        engine.dispose()
