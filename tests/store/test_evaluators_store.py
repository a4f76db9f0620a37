"""evaluator_host.store.evaluators (and store.db's engine) on an empty SQLite file and PostgreSQL database.

Proves the documented contracts: every create/update writes a new immutable revision
(1..n), ``get`` answers the latest or a given revision, ``list_all`` only the latest of
live evaluators, newest first; ``delete`` is soft (the evaluator disappears from get,
list, update and revisions, but ``get_revision`` still answers for running jobs); unknown
ids and revisions are ``NotFoundError``. Also that ``make_engine`` turns on WAL and
foreign keys and that a second engine on the same file sees the same data.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from evaluator_host.errors import NotFoundError
from evaluator_host.store import EvaluatorStore
from evaluator_host.store.db import DEFAULT_WORKSPACE, make_engine

WS = DEFAULT_WORKSPACE


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def store(engine: Engine) -> EvaluatorStore:
    return EvaluatorStore(engine)


def fields(n: int = 1, **overrides: Any) -> dict[str, Any]:
    """Every column a revision needs, distinct per ``n``."""
    return {
        "name": f"evaluator {n}",
        "description": f"description {n}",
        "language": "python",
        "interface": "evaluate",
        "code": f"def evaluate(output, **kw):\n    return {n}\n",
        "packages": {"numpy": f"1.{n}"},
        "settings": {"timeout_s": float(n)},
        "runtime_id": f"python-{n}",
        **overrides,
    }


def test_make_engine_enables_wal_and_foreign_keys(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/x.db")
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
    engine.dispose()


def test_create_stores_revision_one_with_every_field(store: EvaluatorStore) -> None:
    record = store.create(WS, **fields(1))
    assert record.id.startswith("ev_") and record.revision == 1
    for key, value in fields(1).items():
        assert getattr(record, key) == value
    assert record.created_at.tzinfo is not None and record.updated_at == record.created_at
    assert store.get(WS, record.id) == record


def test_create_gives_every_evaluator_its_own_id(store: EvaluatorStore) -> None:
    ids = {store.create(WS, **fields(n)).id for n in range(5)}
    assert len(ids) == 5


def test_updates_append_revisions_two_to_n_and_keep_earlier_ones_unchanged(store: EvaluatorStore) -> None:
    first = store.create(WS, **fields(1))
    updates = [store.update(WS, first.id, **fields(n)) for n in (2, 3, 4)]
    assert [u.revision for u in updates] == [2, 3, 4]
    assert store.get(WS, first.id, 1) == first
    for n in (1, 2, 3, 4):
        record = store.get(WS, first.id, n)
        assert (record.revision, record.code, record.packages) == (n, fields(n)["code"], fields(n)["packages"])
    assert [r.revision for r in store.revisions(WS, first.id)] == [1, 2, 3, 4]


def test_get_without_revision_answers_the_latest(store: EvaluatorStore) -> None:
    ev = store.create(WS, **fields(1))
    store.update(WS, ev.id, **fields(2))
    latest = store.get(WS, ev.id)
    assert latest.revision == 2 and latest.name == "evaluator 2"
    assert store.get(WS, ev.id, None) == latest


def test_update_keeps_created_at_and_moves_updated_at(store: EvaluatorStore) -> None:
    ev = store.create(WS, **fields(1))
    second = store.update(WS, ev.id, **fields(2))
    assert second.created_at == ev.created_at
    assert second.updated_at >= ev.updated_at
    assert store.get(WS, ev.id, 1).updated_at == ev.updated_at  # a revision's own creation time


def test_returned_dicts_are_copies_that_do_not_change_the_store(store: EvaluatorStore) -> None:
    ev = store.create(WS, **fields(1))
    ev.packages["evil"] = "1"
    ev.settings["timeout_s"] = 999
    again = store.get(WS, ev.id)
    assert again.packages == fields(1)["packages"] and again.settings == fields(1)["settings"]


def test_get_of_an_unknown_id_or_revision_is_not_found(store: EvaluatorStore) -> None:
    ev = store.create(WS, **fields(1))
    with pytest.raises(NotFoundError):
        store.get(WS, "ev_missing")
    with pytest.raises(NotFoundError, match="no revision 2"):
        store.get(WS, ev.id, 2)
    with pytest.raises(NotFoundError):
        store.get_revision(WS, ev.id, 2)
    with pytest.raises(NotFoundError):
        store.get_revision(WS, "ev_missing", 1)


def test_get_of_revision_zero_is_not_found(store: EvaluatorStore) -> None:
    ev = store.create(WS, **fields(1))
    with pytest.raises(NotFoundError):
        store.get(WS, ev.id, 0)


def test_update_of_an_unknown_id_is_not_found_and_writes_nothing(store: EvaluatorStore, engine: Engine) -> None:
    with pytest.raises(NotFoundError):
        store.update(WS, "ev_missing", **fields(1))
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM evaluator_revisions")).scalar() == 0


def test_list_all_has_only_the_latest_revision_of_each_newest_first(store: EvaluatorStore) -> None:
    a = store.create(WS, **fields(1))
    b = store.create(WS, **fields(2))
    store.update(WS, a.id, **fields(3))
    store.update(WS, a.id, **fields(4))
    listed = store.list_all(WS)
    assert [(r.id, r.revision) for r in listed] == [(b.id, 1), (a.id, 3)]  # ordered by creation, not by update
    assert listed[1].name == "evaluator 4"


def test_list_all_is_empty_on_a_fresh_database(store: EvaluatorStore) -> None:
    assert store.list_all(WS) == []


def test_delete_hides_the_evaluator_from_get_list_update_revisions_and_delete(store: EvaluatorStore) -> None:
    gone = store.create(WS, **fields(1))
    store.update(WS, gone.id, **fields(2))
    kept = store.create(WS, **fields(3))
    store.delete(WS, gone.id)
    assert [r.id for r in store.list_all(WS)] == [kept.id]
    for call in (
        lambda: store.get(WS, gone.id),
        lambda: store.get(WS, gone.id, 1),
        lambda: store.update(WS, gone.id, **fields(5)),
        lambda: store.revisions(WS, gone.id),
        lambda: store.delete(WS, gone.id),
    ):
        with pytest.raises(NotFoundError):
            call()
    assert store.get(WS, kept.id).revision == 1


def test_a_deleted_evaluators_revisions_stay_readable_with_get_revision(store: EvaluatorStore) -> None:
    ev = store.create(WS, **fields(1))
    second = store.update(WS, ev.id, **fields(2))
    store.delete(WS, ev.id)
    assert store.get_revision(WS, ev.id, 1) == ev
    assert store.get_revision(WS, ev.id, 2) == second


def test_delete_of_an_unknown_id_is_not_found(store: EvaluatorStore) -> None:
    with pytest.raises(NotFoundError):
        store.delete(WS, "ev_missing")


def test_a_second_engine_on_the_same_database_reads_what_the_first_wrote(database_url: str) -> None:
    first, second = make_engine(database_url), make_engine(database_url)
    ev = EvaluatorStore(first).create(WS, **fields(1))
    assert EvaluatorStore(second).get(WS, ev.id) == ev
    first.dispose()
    second.dispose()
