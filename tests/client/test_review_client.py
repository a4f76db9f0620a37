"""The Python client's review methods (issue 53) against a real service: a job's queue, verdicts with history,
both exports, agreement and verdicts as fixtures, typed answers; the async client's the same."""

from __future__ import annotations

import asyncio
import json

import pytest

from evaluator_host.client import AsyncClient, Client, NotFoundError, UnprocessableError
from evaluator_host.review.models import Agreement, FixturesAdded, Queue, Verdict
from tests.support.client import Live

CODE = "def evaluate(inputs, outputs, trace):\n    return {'score': inputs['s'], 'passed': inputs['s'] >= 0.5}\n"


def test_a_review_through_the_client(api: Client) -> None:
    ev = api.create_evaluator("review-client", CODE)
    job = api.wait_job(api.start_job(ev.id, rows=[{"s": s / 4, "outputs": "x"} for s in range(5)]), timeout_s=120)
    queue = api.create_review_queue("low", job_id=job.id, select={"score_below": 0.5}, limit=10)
    assert isinstance(queue, Queue) and (queue.items, queue.evaluator_id) == (2, ev.id)
    items = api.review_items(queue.id, state="pending").data
    assert [i.source.index for i in items] == [0, 1] and items[1].inputs == {"s": 0.25, "outputs": "x"}
    first = api.give_verdict(queue.id, items[0].id, True, note="fine")
    assert isinstance(first, Verdict) and first.current
    api.give_verdict(queue.id, items[0].id, False, score=0.0)
    assert [v.current for v in api.verdict_history(queue.id, items[0].id).data] == [True, False]
    api.give_verdict(queue.id, items[1].id, True, score=0.8)
    assert api.get_review_queue(queue.id).reviewed == 2 and api.refill_review_queue(queue.id).items == 2
    lines = [json.loads(line) for line in api.export_review(queue.id).splitlines()]
    assert [(r["passed"], r["human_passed"]) for r in lines] == [(False, False), (False, True)]
    assert api.export_review(queue.id, "csv").startswith("item_id,")
    got = api.agreement(ev.id)
    assert isinstance(got, Agreement) and (got.reviewed, got.accuracy, got.confusion.fn) == (2, 0.5, 1)
    added = api.verdicts_to_fixtures(queue.id)
    assert isinstance(added, FixturesAdded) and (added.revision, added.added, len(added.disagreeing)) == (2, 2, 1)
    assert queue.id in {q.id for q in api.list_review_queues().data}
    with pytest.raises(UnprocessableError):
        api.create_review_queue("bad", job_id=job.id, sample=2.0)
    api.delete_review_queue(queue.id)
    with pytest.raises(NotFoundError):
        api.get_review_queue(queue.id)


def test_the_async_client_reviews_alike(live: Live) -> None:
    async def main() -> None:
        async with AsyncClient(live.url, live.key) as api:
            ev = await api.create_evaluator("review-async", CODE)
            job = await api.wait_job(await api.start_job(ev.id, rows=[{"s": 0.1, "outputs": "x"}]), timeout_s=120)
            queue = await api.create_review_queue("all", job_id=job.id)
            (item,) = (await api.review_items(queue.id)).data
            await api.give_verdict(queue.id, item.id, False)
            assert (await api.agreement(ev.id)).accuracy == 1.0

    asyncio.run(main())
