"""A backfill's evaluator call path (issue 50, ``evaluation/caching/cached_calls.py``, ``online/backfill/direct.py``):
a case built of a stored trace is dumped as its fields (``native_dump``) — the same dict ``model_dump(mode="json")``
gives, so its cache key is the one an earlier release stored — and the misses' result-cache entries are written in
the page's own transaction (``JobCache.remember_in``): committed with it, gone with it when it rolls back, and a
failure of the cache's write (its table gone) is logged and rolls back only the cache's part, on SQLite and
PostgreSQL."""

from __future__ import annotations

import hashlib
import logging

import msgspec
import pytest
from sqlalchemy import Engine, text

from evaluator_host.evaluation.caching.cache import JobCache
from evaluator_host.evaluation.caching.cached_calls import native_dump
from evaluator_host.evaluation.models import Case
from evaluator_host.evaluation.trace_shape import SpanData, build_trace
from evaluator_host.online.levels.cases import build_case
from evaluator_host.online.levels.traces import LoadedTrace
from evaluator_host.online.reading.spans import decode, encode
from evaluator_host.store.result_cache import ResultCacheStore

T = "ab" * 16
WS = "ws_default"
PREFIX = hashlib.sha256(b"an evaluator's prefix").digest()


def stored_case(mapping: dict[str, str] | None = None) -> Case:
    """The case of a trace as a backfill builds it: its spans encoded as stored, decoded, built into the trace."""
    attributes = {"ag.data.inputs": {"q": "wie viel ist 2+2? ✓", "n": [1, 2.5, None, True]}, "ag.data.outputs": "4",
                  "big": 2**62, "ratio": 0.1, "nan": float("nan")}  # fmt: skip
    events = [{"name": "e", "time_ns": 5, "attributes": {"k": "v"}}]
    root = SpanData(T, "a" * 16, None, "chat", 1_764_000_000_123_456_789, 1_764_000_001_000_000_000, kind=2,
                    attributes=attributes, resource={"service.name": "api"}, events=events)  # fmt: skip
    child = SpanData(T, "b" * 16, root.span_id, "llm", 1_764_000_000_200_000_000, 1_764_000_000_300_000_000,
                     attributes={"gen_ai.request.model": "m1", "llm.input_messages": '[{"role": "user"}]'})  # fmt: skip
    spans = [decode(T, s.span_id, s.parent_id, s.name, s.start_ns, s.end_ns, encode(s)) for s in (root, child)]
    loaded = LoadedTrace(trace_id=T, state="ready", service_name="api", root_span_id=root.span_id,
                         trace=build_trace(T, spans), spans=spans)  # fmt: skip
    return build_case(loaded, None, mapping)


@pytest.mark.parametrize("mapping", [None, {"inputs": "root.attributes.ag.data.inputs.n", "outputs": "trace"}])
def test_a_stored_traces_case_is_dumped_as_model_dump_gives_it_so_its_cache_key_is_unchanged(
    mapping: dict[str, str] | None,
) -> None:
    case = stored_case(mapping)
    dumped = case.model_dump(mode="json")
    assert native_dump(case) == dumped
    assert list(native_dump(case)) == list(dumped)  # the same key order: the same JSON text, the same key
    cache = JobCache(ResultCacheStore.__new__(ResultCacheStore), WS, PREFIX, 1_000_000)
    encoded = msgspec.Raw(msgspec.json.encode(native_dump(case)))
    assert cache.keys([encoded]) == cache.keys([dumped])


def cache_rows(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM result_cache")).scalar_one())


def entries(n: int) -> tuple[list[bytes], list[str], list[str], list[float]]:
    keys = [hashlib.sha256(f"case {i}".encode()).digest() for i in range(n)]
    return keys, ["ok"] * n, ['{"status":"ok","score":1.0}'] * n, [1.0] * n


def test_a_pages_cache_entries_are_committed_with_it_and_gone_when_it_rolls_back(engine: Engine) -> None:
    cache = JobCache(ResultCacheStore(engine), WS, PREFIX, 1_000_000)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE page_probe (n INTEGER)"))
    with pytest.raises(RuntimeError), engine.begin() as conn:
        conn.execute(text("INSERT INTO page_probe (n) VALUES (1)"))  # the page's first write (commit_page's pin)
        cache.remember_in(conn, *entries(3))
        raise RuntimeError("the page's transaction fails after the cache's write")
    assert cache_rows(engine) == 0
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO page_probe (n) VALUES (1)"))
        cache.remember_in(conn, *entries(3))
    assert cache_rows(engine) == 4  # the three and the prefix's marker
    assert ResultCacheStore(engine).usage(WS).entries == 4
    assert cache.seen() and len(cache.lookup(entries(3)[0])) == 3


def test_a_failed_cache_write_is_logged_and_the_page_around_it_still_commits(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    cache = JobCache(ResultCacheStore(engine), WS, PREFIX, 1_000_000)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE page_probe (n INTEGER)"))
        conn.execute(text("ALTER TABLE result_cache RENAME TO result_cache_gone"))
    with caplog.at_level(logging.WARNING), engine.begin() as conn:
        conn.execute(text("INSERT INTO page_probe (n) VALUES (1)"))
        cache.remember_in(conn, *entries(3))  # no table: fails inside its savepoint
        conn.execute(text("INSERT INTO page_probe (n) VALUES (2)"))
    assert "result cache write failed" in caplog.text
    with engine.begin() as conn:
        assert [n for (n,) in conn.execute(text("SELECT n FROM page_probe ORDER BY n"))] == [1, 2]
        conn.execute(text("ALTER TABLE result_cache_gone RENAME TO result_cache"))
    assert cache_rows(engine) == 0 and ResultCacheStore(engine).usage(WS).entries == 0
    with engine.begin() as conn:  # the service is healthy after: the next page's entries are stored
        cache.remember_in(conn, *entries(2))
    assert cache_rows(engine) == 3
