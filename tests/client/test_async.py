"""``evaluator_host.client.AsyncClient`` against the real service: every resource, as the sync tests do."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from evaluator_host.client import AsyncClient, NotFoundError
from evaluator_host.evaluation.models import EvaluationResult
from evaluator_host.jobs.models import Job
from tests.support.aio import aio
from tests.support.client import Live
from tests.support.otlp_bodies import JSON, S, json_body, new_span_id, new_trace_id

HALF = "def evaluate(inputs, outputs, trace):\n    return {'score': outputs / 2, 'label': 'half'}\n"
LEGACY = "def evaluate(app_params, inputs, output, correct_answer):\n    return float(output == correct_answer)\n"
TS = "export function evaluate(inputs: any, outputs: string, trace: any): number { return outputs.length; }\n"


@aio
async def test_evaluate_inline_and_by_id_concurrently(live: Live) -> None:
    async with AsyncClient(live.url, live.key) as api:
        results = await asyncio.gather(*(api.evaluate(HALF, outputs=n) for n in range(6)))
        assert all(isinstance(r, EvaluationResult) for r in results) and [r.score for r in results] == [
            n / 2 for n in range(6)
        ]
        ts = await api.evaluate(TS, "typescript", outputs="abc")
        assert ts.status == "ok" and ts.score == 3.0
        batch = await api.evaluate_cases(HALF, [{"outputs": 1}, {"outputs": 2}])
        assert batch.aggregate.count == 2
        stored = await api.create_evaluator("half-async", HALF)
        patched = await api.update_evaluator(stored.id, settings={"threshold": 1})
        assert patched.revision == 2 and [r.revision for r in (await api.list_revisions(stored.id)).data] == [1, 2]
        by_id = await api.evaluate_by_id(stored.id, outputs=4)
        assert (by_id.score, by_id.passed) == (2.0, True)
        cases = await api.evaluate_cases_by_id(stored.id, [{"outputs": 1}], revision=1)
        assert cases.results[0].passed is None
        assert stored.id in {e.id for e in (await api.list_evaluators()).data}
        await api.delete_evaluator(stored.id)
        with pytest.raises(NotFoundError):
            await api.get_evaluator(stored.id)


@aio
async def test_a_job_with_an_async_progress_callback_and_its_results(live: Live, tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"outputs": i}) + "\n" for i in range(120)))
    async with AsyncClient(live.url, live.key) as api:
        evaluator = await api.create_evaluator("half-job", HALF)
        dataset = await api.upload_dataset(path, name="120")
        assert (await api.get_dataset(dataset.id)).row_count == 120
        assert [r.index for r in (await api.dataset_rows(dataset.id, offset=118)).data] == [118, 119]
        assert dataset.id in {d.id for d in (await api.list_datasets()).data}
        seen: list[Job] = []

        async def note(job: Job) -> None:
            seen.append(job)

        job = await api.start_job(evaluator.id, dataset_id=dataset.id)
        finished = await api.wait_job(job.id, on_progress=note, poll_s=0.2, timeout_s=15)
        assert finished.status == "succeeded" and seen[-1] == finished
        scores = [r.result.score async for r in api.iter_results(finished, page_size=50)]
        assert scores == [i / 2 for i in range(120)]
        exported = b"".join([chunk async for chunk in api.export_results(finished)])
        assert len(exported.splitlines()) == 120
        table = await api.results_frame(finished)  # pandas is a dev dependency: this runs in make test
        assert list(table["score"])[:3] == [0.0, 0.5, 1.0]
        assert finished.id in {j.id for j in (await api.list_jobs()).data}
        assert (await api.get_job(finished.id)).progress.done == 120
        await api.delete_job(finished.id)
        with pytest.raises(NotFoundError):
            await api.get_job(finished.id)


@aio
async def test_migrate_runtimes_secrets_and_the_operator_s_routes(live: Live) -> None:
    async with AsyncClient(live.url, live.key) as api:
        migrated = await api.migrate(LEGACY)
        assert migrated.changed and migrated.interface_before == "legacy"
        stored = await api.create_evaluator("legacy-async", LEGACY)
        checked = await api.migrate_evaluator(stored.id, cases=[{"inputs": {"correct_answer": 1}, "outputs": 1}])
        assert checked.saved and checked.evaluator is not None and checked.evaluator.revision == 2
        assert (await api.list_runtimes()).count >= 0
        await api.put_secret("ASYNC_SECRET", "value")
        assert "ASYNC_SECRET" in {s.name for s in (await api.list_secrets()).data}
        await api.delete_secret("ASYNC_SECRET")
    async with AsyncClient(live.url, live.admin_key) as operator:
        made = await operator.create_workspace("async-team")
        renamed = await operator.update_workspace(made.id, name="async-team-2", network_allow=["api.example.com:443"])
        assert (renamed.name, renamed.network_allow) == ("async-team-2", ["api.example.com:443"])
        assert (await operator.get_workspace(made.id)).name == "async-team-2"
        assert made.id in {w.id for w in (await operator.list_workspaces()).data}
        key = await operator.create_key(made.id)
        assert [k.id for k in (await operator.list_keys(made.id)).data] == [key.id]
        await operator.revoke_key(key.id)


@aio
async def test_online_rules_and_traces(live: Live) -> None:
    async with AsyncClient(live.url, live.key) as api:
        evaluator = await api.create_evaluator("online-async", "def evaluate(inputs, outputs, trace):\n    return 1\n")
        rule = await api.create_rule(evaluator.id, filter={"service_name": "async-tests"}, sampling_rate=1.0)
        assert (await api.get_rule(rule.id)).id == rule.id and rule.id in {r.id for r in (await api.list_rules()).data}
        assert not (await api.update_rule(rule.id, enabled=False)).enabled
        await api.update_rule(rule.id, enabled=True)
        trace_id = new_trace_id()
        body = json_body([S(trace_id, new_span_id(), name="chat")], service="async-tests")
        async with httpx.AsyncClient() as raw:
            sent = await raw.post(
                f"{live.url}/v1/traces", content=body, headers={**JSON, "authorization": f"Bearer {live.key}"}
            )
        assert sent.status_code == 200

        for _ in range(1200):  # bounded: 120 s at most (a worker's start on a loaded machine, the trace's quiet time)
            if any(s.state == "done" for s in (await api.rule_scores(rule.id)).data):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the rule did not score the trace in 120 s")
        assert sum(b.count for b in (await api.rule_stats(rule.id, bucket=3600)).buckets) == 1
        assert trace_id in {t.trace_id for t in (await api.list_traces()).data}
        assert [s.score for s in (await api.get_trace(trace_id)).scores] == [1.0]
        await api.delete_rule(rule.id)
