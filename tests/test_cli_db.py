"""``evaluator-host db status | upgrade`` and ``serve``'s database checks, as a user runs them.

Also the data dir's lock: a second service (or a ``db upgrade`` of the data dir's SQLite file)
next to a live service on the same data dir is refused with a clear message, exit code 2,
and the live one goes on serving.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from pathlib import Path

import pytest

from evaluator_host.errors import DataDirInUse
from evaluator_host.services import Services
from evaluator_host.store import schema
from tests.support import REPO, zygote
from tests.support.backends import postgres_only
from tests.support.pg import Cluster
from tests.support.service import free_port, make_settings, serving


def cli(data_dir: Path, *argv: str, database_url: str | None = None, timeout: float = 60) -> tuple[int, str, str]:
    env = {**os.environ, "EVALUATOR_HOST_DATA_DIR": str(data_dir)}
    env.pop("EVALUATOR_HOST_DATABASE_URL", None)
    if database_url is not None:
        env["EVALUATOR_HOST_DATABASE_URL"] = database_url
    done = zygote.run(
        [sys.executable, "-m", "evaluator_host.cli", *argv], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def test_db_status_and_upgrade_on_the_data_dirs_sqlite_file(tmp_path: Path) -> None:
    code, out, _ = cli(tmp_path, "db", "status")
    assert code == 1 and "none (empty)" in out and "a migration is due" in out
    code, out, _ = cli(tmp_path, "db", "upgrade")
    assert code == 0 and f"from none (empty) to {schema.head()}" in out
    code, out, _ = cli(tmp_path, "db", "status")
    assert (code, out.splitlines()[-1]) == (0, "up to date")


def test_serve_refuses_a_database_a_newer_release_migrated(tmp_path: Path) -> None:
    assert cli(tmp_path, "db", "upgrade")[0] == 0
    with sqlite3.connect(tmp_path / "evaluator-host.db") as db:
        db.execute("UPDATE alembic_version SET version_num = 'f00d'")
    code, _, err = cli(tmp_path, "serve", "--port", str(free_port()))
    assert code == 2 and "revision 'f00d'" in err and "newer release" in err
    assert cli(tmp_path, "db", "status")[0] == 2


def test_serve_refuses_an_unreachable_database_in_one_line_without_its_password(tmp_path: Path) -> None:
    url = "postgresql://evaluator:s3cret@127.0.0.1:1/evaluator"  # nothing listens there, ever
    code, _, err = cli(tmp_path, "serve", "--port", str(free_port()), database_url=url)
    assert code == 2 and "cannot use the database postgresql+psycopg://evaluator:***@127.0.0.1" in err
    assert "s3cret" not in err and len(err.strip().splitlines()) == 1


@postgres_only
def test_db_status_and_upgrade_on_postgresql_with_a_plain_url(tmp_path: Path, postgres: Cluster) -> None:
    url = postgres.database(driver="postgresql")
    assert cli(tmp_path, "db", "status", database_url=url)[0] == 1
    assert cli(tmp_path, "db", "upgrade", database_url=url)[0] == 0
    code, out, _ = cli(tmp_path, "db", "status", database_url=url)
    assert code == 0 and out.startswith("database: postgresql+psycopg://postgres@/tests")


def test_a_second_service_on_a_live_services_data_dir_is_refused_and_the_first_serves_on(tmp_path: Path) -> None:
    with serving(tmp_path, "process") as (client, proc):
        code, _, err = cli(tmp_path, "serve", "--port", str(free_port()), "--backend", "process")
        assert code == 2
        assert f"another evaluator-host process (pid {proc.pid}) is using the data dir {tmp_path}" in err
        code, _, err = cli(tmp_path, "db", "upgrade")
        assert code == 2 and "another evaluator-host process" in err
        assert client.get("/healthz").status_code == 200


def test_services_refuse_a_data_dir_another_live_instance_holds(tmp_path: Path) -> None:
    first = Services.start(make_settings(tmp_path, backend="process"))
    try:
        with pytest.raises(DataDirInUse, match=f"pid {os.getpid()}"):
            Services.start(make_settings(tmp_path, backend="process"))
    finally:
        asyncio.run(first.close())
    again = Services.start(make_settings(tmp_path, backend="process"))  # free once the first has closed
    asyncio.run(again.close())
