"""A test's service: its settings, the calls every test makes of a started one, and the real
``evaluator-host serve`` process on a free loopback port."""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from evaluator_host.settings import DATABASE_FILE, Settings
from tests.support import REPO
from tests.support.wait import wait_until
from tests.support.zygote import CLI, Process, popen

_TEMPLATE_LOCK = threading.Lock()


@functools.cache
def _migrated_template() -> Path:
    """A SQLite database file the migrations made, once per test process, whole in its one file.

    Migrating a fresh database costs ~0.2-0.3 s of CPU, paid by every service a test starts on a new data
    dir: hundreds a run, for the migrations' sake only. Their own tests (``tests/store/test_schema.py``,
    ``tests/test_cli_db.py``...) migrate databases of their own. The file is left in rollback-journal mode
    (its WAL copied in and gone: a copy of the file alone is the whole database; a service's connections
    switch it back to WAL) and checked to be at the migrations' head."""
    import sqlite3

    from evaluator_host.store import schema
    from evaluator_host.store.db import make_engine  # (migrates the new file: the product's own path)

    root = Path(tempfile.mkdtemp(prefix="evh-migrated-"))
    maker = os.getpid()

    def remove() -> None:  # when this process exits (not a child forked from it: the copies still to come need it)
        if os.getpid() == maker:
            shutil.rmtree(root, ignore_errors=True)

    atexit.register(remove)
    path = root / DATABASE_FILE
    make_engine(f"sqlite:///{path}").dispose()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode=DELETE").fetchone() == ("delete",)
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(schema.head(),)]
    finally:
        conn.close()
    assert not path.with_name(f"{DATABASE_FILE}-wal").exists()
    return path


def migrated(data_dir: Path) -> Path:
    """``data_dir`` holding a database migrated to the head already (a copy of the template), unless it has
    one: a service started on it finds its schema up to date, as after its first start. Returns ``data_dir``."""
    target = data_dir / DATABASE_FILE
    if not target.exists():
        with _TEMPLATE_LOCK:  # (tests starting services from threads: one template, made once)
            template = _migrated_template()
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # as the service makes it
        partial = data_dir / f".{DATABASE_FILE}.{os.getpid()}.{threading.get_ident()}"
        shutil.copyfile(template, partial)
        os.replace(partial, target)  # whole or not at all
    return data_dir


def make_settings(data_dir: Path, *, fresh_database: bool = False, **overrides: object) -> Settings:
    """Settings for a test service on ``data_dir``; unless ``fresh_database`` (or a ``database_url`` is
    given), the data dir's SQLite database is there already, migrated (:func:`migrated`)."""
    if not fresh_database and overrides.get("database_url") is None:
        migrated(data_dir)
    return Settings(data_dir=data_dir, **overrides)  # type: ignore[arg-type]


def evaluate(client: TestClient, code: str, language: str = "python", **body: object) -> dict:  # type: ignore[type-arg]
    """POST /v1/evaluate and return the JSON body (asserting HTTP 200)."""
    response = client.post("/v1/evaluate", json={"language": language, "code": code, **body})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def assert_healthy(client: TestClient) -> None:
    """The service answers and still evaluates."""
    assert client.get("/healthz").json()["status"] == "ok"
    result = evaluate(client, "def evaluate(inputs, outputs, trace):\n    return 1.0\n")
    assert result["status"] == "ok" and result["score"] == 1.0


def busy_workers(client: TestClient) -> float:
    """The service's workers bound and not idle now (running a lease, or starting: a saved evaluator's
    pre-warm too), as ``/metrics`` counts them."""
    found = re.search(r'^evaluator_host_pool_workers\{state="busy"\} (\S+)$', client.get("/metrics").text, re.M)
    return float(found.group(1)) if found else 0.0


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(
    data_dir: Path,
    backend: str | None = None,
    pass_fds: tuple[int, ...] = (),
    database_url: str | None = None,
    env: dict[str, str] | None = None,
    *,
    fresh_database: bool = False,
) -> Iterator[tuple[httpx.Client, Process]]:
    """The real service (``evaluator-host serve``) on ``data_dir``, healthy; terminated (or reaped) afterwards.

    ``backend`` None leaves the choice to the service (``auto``); ``pass_fds`` are descriptors it
    inherits (as from a shell's ``exec 7<file``); ``database_url`` None is the data dir's SQLite
    file (migrated already, as :func:`make_settings` does, unless ``fresh_database``); ``env`` adds
    environment variables (settings). The caller may kill the process. Started as
    ``python -m evaluator_host.cli serve`` would be, forked from the test process's zygote
    (``tests/support/zygote.py``: the same command without the import).
    """
    env = {**os.environ, "EVALUATOR_HOST_DATA_DIR": str(data_dir), **(env or {})}
    if backend is not None:
        env["EVALUATOR_HOST_BACKEND"] = backend
    if database_url is not None:
        env["EVALUATOR_HOST_DATABASE_URL"] = database_url
    if not fresh_database and not env.get("EVALUATOR_HOST_DATABASE_URL"):
        migrated(data_dir)
    port = free_port()
    proc = popen([*CLI, "serve", "--port", str(port), "--log-level", "warning"], cwd=REPO, env=env, pass_fds=pass_fds)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
    try:

        def healthy() -> bool:
            assert proc.poll() is None, f"the service exited with {proc.returncode}"
            return client.get("/healthz").status_code == 200

        wait_until(healthy, 120, 0.1, what="the service to start", ignoring=(httpx.TransportError,))
        yield client, proc
    finally:
        client.close()
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=60)
