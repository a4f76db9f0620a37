"""Admission per evaluator (issue 33 §2): an evaluator whose interactive calls would wait far past its
timeout answers at once 429 ``Overloaded`` with ``Retry-After``; other evaluators, and jobs, are not refused,
and the service is healthy after. A service of this module's own per backend, with two workers at most,
so a handful of concurrent calls is a long queue."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api.app import create_app
from tests.support.backends import BACKENDS
from tests.support.service import assert_healthy, busy_workers, make_settings
from tests.support.wait import wait_until

SLOW = "import time\n\ndef evaluate(inputs, outputs, trace):\n    time.sleep(30)\n"  # answered timeout at 0.5 s
GOOD = "def evaluate(inputs, outputs, trace):\n    return outputs == inputs['correct_answer']\n"
CALLS = 24


@pytest.fixture(scope="module", params=BACKENDS)
def busy(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    data_dir: Path = tmp_path_factory.mktemp(f"admission-{request.param}")
    settings = make_settings(data_dir, backend=request.param, max_workers=2)
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def _evaluator(client: TestClient, name: str, code: str, settings: dict[str, object]) -> str:
    made = client.post("/v1/evaluators", json={"name": name, "language": "python", "code": code, "settings": settings})
    assert made.status_code == 201, made.text
    return f"/v1/evaluators/{made.json()['id']}/evaluate"


def test_a_queue_past_the_bound_answers_429_overloaded_at_once(busy: TestClient) -> None:
    slow = _evaluator(busy, "slow", SLOW, {"timeout_s": 0.5})
    good = _evaluator(busy, "good", GOOD, {})
    first = busy.post(slow, json={"inputs": {}})  # measured: a call of this key takes its timeout
    assert first.status_code == 200 and first.json()["status"] == "timeout", first.text

    with ThreadPoolExecutor(CALLS) as threads:
        answers = list(threads.map(lambda _: busy.post(slow, json={"inputs": {}}), range(CALLS)))
    seen = Counter(a.status_code for a in answers)
    assert set(seen) <= {200, 429}, seen
    assert seen[429] >= 1, seen  # 24 calls of 0.5 s on at most 2 workers: a 6 s queue against a 1 s bound
    refused = next(a for a in answers if a.status_code == 429)
    assert refused.json()["error"]["type"] == "Overloaded", refused.text
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert all(a.json()["status"] == "timeout" for a in answers if a.status_code == 200)

    # another evaluator is not refused, and once the queue is gone the slow one is admitted again
    good_answer = busy.post(good, json={"inputs": {"correct_answer": "4"}, "outputs": "4"})
    assert good_answer.status_code == 200 and good_answer.json()["score"] == 1.0
    wait_until(
        lambda: busy.post(slow, json={"inputs": {}}).status_code == 200, 30, what="the slow evaluator's admission"
    )
    assert_healthy(busy)


def test_a_new_evaluators_burst_is_refused_once_its_first_row_has_run_long(busy: TestClient) -> None:
    """No row of the key measured yet (a new evaluator): how long its first row has run so far stands for
    its row time, so calls that arrive while that row runs are refused past the bound (before, a new
    key was never refused and the whole burst queued behind it)."""
    slow = _evaluator(busy, "slow-new", SLOW, {"timeout_s": 2})
    wait_until(lambda: busy_workers(busy) == 0, 60, what="no worker busy")
    with ThreadPoolExecutor(CALLS + 1) as threads:
        first = threads.submit(busy.post, slow, json={"inputs": {}})
        wait_until(lambda: busy_workers(busy) >= 1, 60, what="the first call's row running")
        time.sleep(0.8)  # 0.8 s of its 2 s: a burst of 24 more would wait ~24 × 0.8 ÷ 2 s > 2 × 2 s
        answers = list(threads.map(lambda _: busy.post(slow, json={"inputs": {}}), range(CALLS)))
        assert first.result().json()["status"] == "timeout"
    seen = Counter(a.status_code for a in answers)
    assert set(seen) <= {200, 429}, seen
    assert seen[429] >= CALLS // 2, seen  # at most ~11 admitted: pending × 0.8 s ÷ (1 or 2 workers) ≤ 4 s
    assert all(a.json()["error"]["type"] == "Overloaded" for a in answers if a.status_code == 429)
    assert_healthy(busy)


def test_an_admitted_call_that_gets_no_worker_by_its_bound_leaves_the_queue_with_429(busy: TestClient) -> None:
    """A burst that arrives before anything of a new evaluator is measured is admitted whole; each call
    that has not got a worker by 2 × its timeout then answers 429 (before, it waited its turn: the last of
    24 calls of 1 s on at most 2 workers answered after ~12 s)."""
    slow = _evaluator(busy, "slow-burst", SLOW, {"timeout_s": 1})
    wait_until(lambda: busy_workers(busy) == 0, 60, what="no worker busy")
    with ThreadPoolExecutor(CALLS) as threads:
        answers = list(threads.map(lambda _: busy.post(slow, json={"inputs": {}}), range(CALLS)))
    seen = Counter(a.status_code for a in answers)
    assert set(seen) <= {200, 429}, seen
    assert seen[429] >= CALLS // 2, seen  # 2 workers run ~4 rows of 1 s within the 2 s bound
    waited = [a for a in answers if a.status_code == 429 and "waited" in a.json()["error"]["message"]]
    assert waited, [a.json() for a in answers if a.status_code == 429][:2]
    assert 1 <= int(waited[0].headers["Retry-After"]) <= 60
    assert all(a.json()["status"] == "timeout" for a in answers if a.status_code == 200)
    assert_healthy(busy)


def test_a_job_of_an_overloaded_evaluator_queues_and_is_not_refused(busy: TestClient) -> None:
    slow = _evaluator(busy, "slow-job", SLOW, {"timeout_s": 0.5})
    assert busy.post(slow, json={"inputs": {}}).json()["status"] == "timeout"
    evaluator_id = slow.split("/")[3]
    job = busy.post("/v1/jobs", json={"evaluator_id": evaluator_id, "rows": [{"i": i} for i in range(6)]})
    assert job.status_code == 202, job.text
    with ThreadPoolExecutor(CALLS) as threads:  # its interactive calls are refused meanwhile
        seen = Counter(a.status_code for a in threads.map(lambda _: busy.post(slow, json={"inputs": {}}), range(CALLS)))
    assert set(seen) <= {200, 429}, seen
    done = wait_until(
        lambda: (j := busy.get(f"/v1/jobs/{job.json()['id']}").json())["status"] not in ("queued", "running") and j,
        120,
        what="the job",
    )
    # queued, run to the end, never refused: every row ran (and timed out, as the evaluator sleeps past its
    # timeout), so the job ends failed with AllRowsErrored (issue 48.3), not succeeded
    assert done["status"] == "failed" and done["error"]["type"] == "AllRowsErrored", done
    assert done["progress"]["done"] == 6 and done["error"]["most_common"]["type"] == "Timeout", done
    rows = busy.get(f"/v1/jobs/{job.json()['id']}/results", params={"format": "ndjson"}).text.splitlines()
    assert len(rows) == 6 and all('"timeout"' in row for row in rows), rows[:2]
    assert_healthy(busy)
