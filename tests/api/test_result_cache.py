"""The result cache (evaluation/caching/cache.py) on every backend: a re-run job answers its rows from the cache when
its evaluator is deterministic, runs them again when it is not (or opted out), and the cache stays bounded."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from evaluator_host.api import create_app
from evaluator_host.store.db import make_engine
from evaluator_host.store.result_cache import CACHE, ResultCacheStore
from tests.support.jobs import create_evaluator, jsonl, ndjson, start, upload, wait
from tests.support.service import assert_healthy, make_settings

pytestmark = pytest.mark.databases  # on SQLite and on PostgreSQL

Json = dict[str, Any]

# The deterministic evaluators do ~0.2-0.3 ms of work a row (a real evaluator's order): rows that cheap to
# compute are cached by default; a trivial one's are not (result_cache_min_row_ms: see the last tests)
DETERMINISTIC = (
    "def evaluate(inputs, outputs, trace):\n"
    "    # {tag}\n"
    "    work = sum(i * i for i in range(8000))\n"
    "    return {{'score': float(outputs == inputs['expected']), 'label': outputs[:1], 'n': len(outputs)}}\n"
)
RANDOM = "import random\n\ndef evaluate(inputs, outputs, trace):\n    # {tag}\n    return random.random()\n"
JS_DETERMINISTIC = (
    "// {tag}\nfunction evaluate(inputs, outputs, trace) {{\n"
    "  let work = 0;\n  for (let i = 0; i < 20000; i++) {{ work = (work + i * i) % 1000003 }}\n"
    "  return outputs === inputs.expected\n}}\n"
)
TRIVIAL = "def evaluate(inputs, outputs, trace):\n    # {tag}\n    return outputs == inputs['expected']\n"
WORKED = (  # a few ms of CPU a row, past any bound a test sets (no clock read: a cached evaluator may not read one)
    "def evaluate(inputs, outputs, trace):\n    # {tag}\n"
    "    work = sum(i * i for i in range(100_000))\n"
    "    return outputs == inputs['expected']\n"
)


def _rows(n: int, salt: str = "") -> list[Json]:
    return [{"outputs": f"{salt}{i % 7}", "expected": f"{salt}{i % 3}", "i": i} for i in range(n)]


def _run(client: TestClient, evaluator: str, dataset: str) -> tuple[Json, list[Json]]:
    job = wait(client, start(client, evaluator, dataset_id=dataset)["id"])
    assert job["status"] == "succeeded", job
    return job, ndjson(client, job["id"])


def _answers(items: list[Json]) -> list[tuple[Any, ...]]:
    return [(i["index"], i["result"]["status"], i["result"]["score"], i["result"].get("label")) for i in items]


@pytest.mark.parametrize("language, code", [("python", DETERMINISTIC), ("javascript", JS_DETERMINISTIC)])
def test_a_deterministic_rerun_answers_from_the_cache(client: TestClient, language: str, code: str) -> None:
    evaluator = create_evaluator(client, code.format(tag=uuid.uuid4().hex), language=language)["id"]
    dataset = upload(client, jsonl(_rows(120)))["id"]
    first, first_items = _run(client, evaluator, dataset)
    assert first["progress"].get("cached", 0) == 0 and not any(i["result"].get("cached") for i in first_items)
    second, second_items = _run(client, evaluator, dataset)
    assert second["progress"] == {"total": 120, "done": 120, "failed": 0, "cached": 120}
    assert all(i["result"]["cached"] is True for i in second_items)
    assert _answers(second_items) == _answers(first_items)
    same = ("count", "errors", "pass_rate", "labels", "histogram")
    assert {k: second["aggregate"][k] for k in same} == {k: first["aggregate"][k] for k in same}
    assert second["aggregate"]["score"] == pytest.approx(first["aggregate"]["score"])  # summed in other chunks
    page = client.get(f"/v1/jobs/{second['id']}/results", params={"limit": 3}).json()["data"]
    assert [item["result"]["cached"] for item in page] == [True] * 3
    # the same rows in another upload, with new ones: only the new ones run
    more = upload(client, jsonl(_rows(120) + _rows(30, salt="new")))["id"]
    third, third_items = _run(client, evaluator, more)
    assert third["progress"]["cached"] == 120 and third["progress"]["done"] == 150
    assert [i["result"].get("cached", False) for i in third_items] == [True] * 120 + [False] * 30
    assert _answers(third_items)[:120] == _answers(first_items)


def test_a_random_evaluator_is_not_cached_unless_it_opts_in(client: TestClient) -> None:
    dataset = upload(client, jsonl(_rows(40)))["id"]
    randomly = create_evaluator(client, RANDOM.format(tag=uuid.uuid4().hex))["id"]
    _run(client, randomly, dataset)
    again, items = _run(client, randomly, dataset)
    assert again["progress"].get("cached", 0) == 0 and not any(i["result"].get("cached") for i in items)
    opted = create_evaluator(client, RANDOM.format(tag=uuid.uuid4().hex), settings={"cache": True})["id"]
    _, first = _run(client, opted, dataset)
    again, items = _run(client, opted, dataset)
    assert again["progress"]["cached"] == 40
    assert [i["result"]["score"] for i in items] == [i["result"]["score"] for i in first]  # the first run's


def test_a_deterministic_evaluator_that_opts_out_runs_every_time(client: TestClient) -> None:
    dataset = upload(client, jsonl(_rows(30)))["id"]
    evaluator = create_evaluator(client, DETERMINISTIC.format(tag=uuid.uuid4().hex), settings={"cache": False})["id"]
    _run(client, evaluator, dataset)
    again, items = _run(client, evaluator, dataset)
    assert again["progress"].get("cached", 0) == 0 and not any(i["result"].get("cached") for i in items)


def test_a_new_revision_is_a_new_key(client: TestClient) -> None:
    dataset = upload(client, jsonl(_rows(20)))["id"]
    evaluator = create_evaluator(client, DETERMINISTIC.format(tag=uuid.uuid4().hex))["id"]
    _run(client, evaluator, dataset)
    patched = client.patch(f"/v1/evaluators/{evaluator}", json={"settings": {"threshold": 0.5}})
    assert patched.status_code == 200, patched.text
    again, items = _run(client, evaluator, dataset)
    assert again["progress"].get("cached", 0) == 0 and items[0]["result"]["passed"] is not None


def test_the_cache_of_a_workspace_stays_within_its_bound(tmp_path: Path) -> None:
    """Past its bound a workspace's cache forgets the least recently used entries first, so what a re-run finds
    follows from the policy: one lane of 50-row chunks adds the rows in input order, the newest ones are what the
    bound keeps (every row of the last 100 is a hit) and the oldest are gone (none of the first 100 is: the job
    answers ``cached: 0``, not a missing count)."""
    bound = 40_000
    settings = make_settings(tmp_path, backend="process", result_cache_max_bytes=bound, job_chunk_rows=50)
    rows = _rows(2_000)  # ~100 bytes a row: ~200 kB to cache, about 400 rows kept

    def run(client: TestClient, evaluator: str, part: list[Json]) -> tuple[Json, list[Json]]:
        dataset = upload(client, jsonl(part))["id"]
        job = wait(client, start(client, evaluator, dataset_id=dataset, parallelism=1)["id"])
        assert job["status"] == "succeeded", job
        return job, ndjson(client, job["id"])

    with TestClient(create_app(settings)) as client:
        evaluator = create_evaluator(client, DETERMINISTIC.format(tag="bound"))["id"]
        first, first_items = run(client, evaluator, rows)
        assert first["progress"]["cached"] == 0
        store = ResultCacheStore(make_engine(settings.resolved_database_url))
        used = store.usage("ws_default")
        with store.engine.connect() as conn:
            stored = conn.execute(select(func.count(), func.sum(CACHE.c.bytes))).one()
        assert 0 < used.bytes <= bound and (used.entries, used.bytes) == (stored[0], stored[1])
        assert 100 <= used.entries < 2_000  # the premise: the last 100 rows fit, the whole set does not

        newest, items = run(client, evaluator, rows[-100:])
        assert newest["progress"]["cached"] == 100 and all(i["result"].get("cached") for i in items)
        assert [a[1:] for a in _answers(items)] == [a[1:] for a in _answers(first_items)[-100:]]
        oldest, items = run(client, evaluator, rows[:100])
        assert oldest["progress"]["cached"] == 0 and not any(i["result"].get("cached") for i in items)
        assert [a[1:] for a in _answers(items)] == [a[1:] for a in _answers(first_items)[:100]]
        assert store.usage("ws_default").bytes <= bound
        assert_healthy(client)


# -- replay -------------------------------------------------------------------------------------------------


def test_a_replayed_result_is_identical_for_a_deterministic_evaluator_not_for_a_random_one(client: TestClient) -> None:
    dataset = upload(client, jsonl(_rows(5)))["id"]
    steady = create_evaluator(client, DETERMINISTIC.format(tag=uuid.uuid4().hex))["id"]
    job, _ = _run(client, steady, dataset)
    answer = client.post("/v1/results/replay", json={"job_id": job["id"], "index": 3})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["identical"] is True and body["differences"] == [] and body["revision"] == 1
    assert body["stored"]["score"] == body["replayed"]["score"] and body["runtime_id"] == job["runtime_id"]
    randomly = create_evaluator(client, RANDOM.format(tag=uuid.uuid4().hex))["id"]
    job, _ = _run(client, randomly, dataset)
    body = client.post("/v1/results/replay", json={"job_id": job["id"], "index": 0}).json()
    assert body["identical"] is False and body["differences"][0].startswith("score: ")
    missing = client.post("/v1/results/replay", json={"job_id": job["id"], "index": 5})
    assert missing.status_code == 404
    assert client.post("/v1/results/replay", json={"job_id": "job_nope", "index": 0}).status_code == 404
    assert client.post("/v1/results/replay", json={"job_id": job["id"], "index": -1}).status_code == 422
    assert_healthy(client)


def test_the_store_evicts_the_least_recently_used_entries_past_its_bound(database_url: str) -> None:
    store = ResultCacheStore(make_engine(database_url))
    clock = iter(range(1_000, 10_000, 100))
    store._now = lambda: float(next(clock))
    text = '{"status":"ok","score":1.0,"passed":null,"duration_ms":1.0,"pad":"' + "x" * 900 + '"}'
    keys = [i.to_bytes(32, "big") for i in range(30)]
    for key in keys[:15]:  # 15 kB: all held
        store.put("ws_a", [(key, "ok", text)], 20_000)
    assert store.get("ws_a", keys[:1])  # used again (older than TOUCH_AFTER_S): the most recent now
    for key in keys[15:]:
        store.put("ws_a", [(key, "ok", text)], 20_000)
        assert store.usage("ws_a").bytes <= 20_000
    held = store.get("ws_a", keys)
    assert keys[0] in held and keys[-1] in held and keys[1] not in held
    assert store.usage("ws_a").entries == len(held) and store.usage("ws_b").entries == 0
    store.put("ws_a", [(b"\1" * 32, "ok", "x" * 30_000)], 20_000)  # larger than the bound alone: not stored
    assert not store.get("ws_a", [b"\1" * 32])
    assert store.clear("ws_a") == len(held) and store.usage("ws_a").bytes == 0


def test_a_prefix_marker_stored_by_an_earlier_put_is_the_last_evicted(database_url: str) -> None:
    """A job's later chunks add the marker again (not inserted twice): it is marked used with each put, so
    eviction by the later chunks' rows never takes it first and a re-run still looks its rows up."""
    store = ResultCacheStore(make_engine(database_url))
    clock = iter(range(1_000, 10_000, 100))
    store._now = lambda: float(next(clock))
    text = '{"status":"ok","score":1.0,"passed":null,"duration_ms":1.0,"pad":"' + "x" * 900 + '"}'
    marker = b"\2" * 32
    for i in range(40):  # 40 chunks of one ~1 kB row past a 20 kB bound, each with the marker
        store.put("ws_m", [(i.to_bytes(32, "big"), "ok", text), (marker, "marker", "{}")], 20_000)
    assert store.get("ws_m", [marker]) and store.usage("ws_m").bytes <= 20_000
    store.clear("ws_m")


# -- what is worth caching ------------------------------------------------------------------------------------


def test_a_trivial_evaluators_rows_are_not_cached_unless_it_opts_in(tmp_path: Path) -> None:
    """Rows cheaper to compute than to look up (result_cache_min_row_ms) are not added: the first run pays no
    cache writes and a re-run looks nothing up; settings.cache: true caches them whatever they cost.

    The bound is the default's 40x here (2 ms a row, on a chunk's mean): a trivial row takes microseconds, but
    on a loaded machine (2 cores, other test processes beside) a chunk's mean crossed the default 0.05 ms and
    was cached, which is the policy working, not failing; the evaluator that must be cached works a few ms a row."""
    assert make_settings(tmp_path).result_cache_min_row_ms > 0  # the default caches only rows worth it, too
    settings = make_settings(tmp_path, backend="process", result_cache_min_row_ms=2.0)
    with TestClient(create_app(settings)) as client:
        dataset = upload(client, jsonl(_rows(300)))["id"]
        trivial = create_evaluator(client, TRIVIAL.format(tag=uuid.uuid4().hex))["id"]
        first, first_items = _run(client, trivial, dataset)
        store = ResultCacheStore(make_engine(settings.resolved_database_url))
        assert store.usage("ws_default").entries == 0  # nothing was written, not even the prefix's marker
        again, items = _run(client, trivial, dataset)
        assert again["progress"].get("cached", 0) == 0 and not any(i["result"].get("cached") for i in items)
        assert _answers(items) == _answers(first_items)
        opted = create_evaluator(client, TRIVIAL.format(tag=uuid.uuid4().hex), settings={"cache": True})["id"]
        _run(client, opted, dataset)
        again, items = _run(client, opted, dataset)
        assert again["progress"]["cached"] == 300 and all(i["result"]["cached"] is True for i in items)
        worked = create_evaluator(client, WORKED.format(tag=uuid.uuid4().hex))["id"]  # a few ms a row
        _run(client, worked, dataset)
        assert _run(client, worked, dataset)[0]["progress"]["cached"] == 300
        assert_healthy(client)


def test_worth_is_the_mean_duration_against_the_bound() -> None:
    from evaluator_host.evaluation.caching.cache import JobCache

    cache = JobCache(ResultCacheStore(make_engine("sqlite://")), "ws", b"p", 1_000, min_row_ms=0.05)
    assert not cache.worth([0.01, 0.02, 0.01]) and not cache.worth([])
    assert cache.worth([0.01, 0.2]) and cache.worth([0.05])  # a mean of 0.105, and exactly the bound
    assert JobCache(cache.store, "ws", b"p", 1_000, min_row_ms=0).worth([0.0, 0.0])
