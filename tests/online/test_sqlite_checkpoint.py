"""WAL checkpoints beside the span writer (store/sqlite_checkpoint.py): the writer's commits copy no WAL
back, the pragma is restored whatever happens, and the writers run a checkpoint every 4 MB, never two at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from evaluator_host.store.db import make_engine, utcnow
from evaluator_host.store.online.spans import OnlineSpanStore
from evaluator_host.store.sqlite_checkpoint import DEFAULT_PAGES, Checkpointer, no_autocheckpoint
from tests.support.otlp_bodies import new_span_id, new_trace_id


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    yield engine
    engine.dispose()


def test_the_writers_block_has_no_autocheckpoint_and_restores_it_even_after_an_error(engine: Engine) -> None:
    with engine.connect() as conn:
        pages = lambda: conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one()  # noqa: E731
        assert pages() == DEFAULT_PAGES
        conn.rollback()
        with no_autocheckpoint(conn):
            assert pages() == 0
            conn.rollback()
        assert pages() == DEFAULT_PAGES
        conn.rollback()
        with pytest.raises(RuntimeError), no_autocheckpoint(conn):
            raise RuntimeError("the write failed")
        assert pages() == DEFAULT_PAGES


def test_a_checkpoint_runs_once_the_bytes_pass_its_period_and_never_two_at_once(engine: Engine) -> None:
    checkpoints = Checkpointer(engine, every_bytes=1000)
    checkpoints.wrote(600)
    assert checkpoints.done == 0
    checkpoints.wrote(600)  # 1,200 bytes since the start: due
    assert checkpoints.done == 1
    checkpoints.wrote(999)
    assert checkpoints.done == 1
    with checkpoints._running:  # another thread checkpoints now: a due write goes on without waiting
        checkpoints.wrote(5000)
    assert checkpoints.done == 1
    checkpoints.wrote(1)  # still due (nothing was copied for those bytes): this one runs it
    assert checkpoints.done == 2


def test_span_writes_are_checkpointed_in_the_background_and_every_span_reads_back(engine: Engine) -> None:
    store = OnlineSpanStore(engine)
    assert store._checkpoints is not None
    body = "{" + '"a":"' + "x" * 4000 + '"}'  # ~4 KB a span: the writes pass SQLite's 1000-page autocheckpoint
    for _ in range(10):
        trace = new_trace_id()
        rows = [{"trace_id": trace, "span_id": new_span_id(), "parent_span_id": None, "name": "s",
                 "service_name": "svc", "start_ns": 1, "end_ns": 2, "body": body, "root_ended_at": utcnow()}
                for _ in range(200)]  # fmt: skip
        assert store.write("ws_a", rows, utcnow()) == 200
    assert store._checkpoints.done >= 1  # ~8 MB written: checkpointed after the writer's lock, by the writers
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM online_spans")).scalar_one() == 2000
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one() == DEFAULT_PAGES  # others keep theirs
