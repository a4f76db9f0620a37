"""The Python client's result-cache, replay and lock calls against the real service."""

from __future__ import annotations

import uuid

import pytest

from evaluator_host.client import Client, NotFoundError

CODE = (  # ~0.2 ms of work a row: cached by default (a trivial one's rows are not: result_cache_min_row_ms)
    "def evaluate(inputs, outputs, trace):\n    # {tag}\n"
    "    work = sum(i * i for i in range(8000))\n    return outputs == inputs['expected']\n"
)


def test_a_rerun_job_is_cached_and_a_row_replays_identically(api: Client) -> None:
    rows = [{"expected": str(i % 3), "outputs": str(i % 2)} for i in range(30)]
    dataset = api.upload_dataset(rows, name="cache-client")
    evaluator = api.create_evaluator("cache-client", CODE.format(tag=uuid.uuid4().hex))
    first = api.wait_job(api.start_job(evaluator.id, dataset_id=dataset.id), timeout_s=120)
    again = api.wait_job(api.start_job(evaluator.id, dataset_id=dataset.id), timeout_s=120)
    assert first.progress.cached == 0 and again.progress.cached == 30
    assert again.aggregate is not None and first.aggregate is not None
    assert again.aggregate.pass_rate == first.aggregate.pass_rate and again.aggregate.count == 30
    replay = api.replay_result(again.id, 4)
    assert replay.identical and replay.stored.cached and not replay.replayed.cached
    with pytest.raises(NotFoundError):
        api.runtime_lock("python-0000000000000000")
