"""``evaluator_host.api.Client`` against a real service (process backend): every resource, typed answers."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from evaluator_host.client import AuthenticationError, Client, NotFoundError
from evaluator_host.evaluation.models import BatchResponse, EvaluationResult, Evaluator
from evaluator_host.jobs.models import Job, JobResult
from evaluator_host.online.models import Backfill, BackfillDryRun
from tests.support.client import Live
from tests.support.otlp_bodies import JSON, S, json_body, new_span_id, new_trace_id
from tests.support.wait import wait_until

EXACT = (
    "def evaluate(inputs, outputs, trace):\n"
    "    return {'score': float(outputs == inputs.get('expected')), 'label': 'm'}\n"
)
LEGACY = "def evaluate(app_params, inputs, output, correct_answer):\n    return float(output == correct_answer)\n"
JS = "export function evaluate(inputs, outputs, trace) { return outputs.length / 10; }\n"


def test_evaluate_inline_one_case_and_cases_in_python_and_javascript(api: Client) -> None:
    one = api.evaluate(EXACT, inputs={"expected": "a"}, outputs="a")
    assert isinstance(one, EvaluationResult) and (one.status, one.score, one.label) == ("ok", 1.0, "m")
    js = api.evaluate(JS, "javascript", outputs="abcde")
    assert js.status == "ok" and js.score == 0.5 and js.runtime["language"] == "javascript"
    cases = [{"inputs": {"expected": "a"}, "outputs": o} for o in ("a", "b", "a", "a")]
    batch = api.evaluate_cases(EXACT, cases)
    assert isinstance(batch, BatchResponse) and [r.score for r in batch.results] == [1.0, 0.0, 1.0, 1.0]
    assert batch.aggregate.count == 4 and batch.aggregate.score is not None and batch.aggregate.score.mean == 0.75
    failed = api.evaluate("def evaluate(inputs, outputs, trace):\n    raise ValueError('no')\n")
    assert failed.status == "error" and failed.error is not None and failed.error.line == 2  # an outcome, not raised


def test_evaluators_revisions_and_calls_by_id(api: Client) -> None:
    made = api.create_evaluator("exact-sync", EXACT, description="first")
    assert isinstance(made, Evaluator) and made.revision == 1 and made.interface == "evaluate"
    assert api.get_evaluator(made.id) == made
    assert made.id in {e.id for e in api.list_evaluators().data}
    second = api.replace_evaluator(made.id, "exact-sync", EXACT.replace("'m'", "'n'"))
    assert second.revision == 2
    third = api.update_evaluator(made.id, description="patched", settings={"threshold": 0.5})
    assert (third.revision, third.description, third.settings.threshold) == (3, "patched", 0.5)
    assert [r.revision for r in api.list_revisions(made.id).data] == [1, 2, 3]
    latest = api.evaluate_by_id(made.id, inputs={"expected": "x"}, outputs="x")
    assert (latest.label, latest.passed) == ("n", True)
    first = api.evaluate_by_id(made.id, inputs={"expected": "x"}, outputs="x", revision=1)
    assert first.label == "m"
    batch = api.evaluate_cases_by_id(made.id, [{"inputs": {"expected": 1}, "outputs": 2}], revision=2)
    assert [r.score for r in batch.results] == [0.0]
    api.delete_evaluator(made.id)
    with pytest.raises(NotFoundError):
        api.get_evaluator(made.id)


def test_datasets_from_a_file_a_list_of_dicts_and_a_dataframe(api: Client, tmp_path: Path) -> None:
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("".join(json.dumps({"q": i, "outputs": str(i)}) + "\n" for i in range(30)))
    csv = tmp_path / "table.csv"
    csv.write_text("q,outputs\n1,one\n2,two\n")
    from_file = api.upload_dataset(jsonl)
    assert (from_file.name, from_file.row_count) == ("rows", 30)  # the name: the file name without its suffix
    assert api.upload_dataset(str(csv), name="table").row_count == 2
    from_list = api.upload_dataset([{"q": "a", "outputs": "b"}, {"q": "c", "outputs": None}], name="inline")
    assert (from_list.name, from_list.row_count) == ("inline", 2)
    assert api.get_dataset(from_list.id).id == from_list.id
    assert {from_file.id, from_list.id} <= {d.id for d in api.list_datasets().data}
    page = api.dataset_rows(from_file.id, offset=28, limit=5)
    assert [r.row["q"] for r in page.data] == [28, 29]
    api.delete_dataset(from_list.id)
    with pytest.raises(NotFoundError):
        api.get_dataset(from_list.id)
    with pytest.raises(TypeError, match="a list of dicts or a pandas DataFrame"):
        api.upload_dataset(42)


def test_a_dataset_from_a_pandas_dataframe_and_results_as_one(api: Client) -> None:
    import pandas  # a dev dependency (pyproject's dev extra): this runs in make test, never skipped

    frame = pandas.DataFrame({"expected": ["a", "b", None], "outputs": ["a", "c", "x"]})
    dataset = api.upload_dataset(frame, name="frame")
    assert dataset.row_count == 3
    evaluator = api.create_evaluator("frame-exact", EXACT)
    job = api.wait_job(api.start_job(evaluator.id, dataset_id=dataset.id), timeout_s=120)
    table = api.results_frame(job)
    assert list(table["index"]) == [0, 1, 2] and list(table["score"]) == [1.0, 0.0, 0.0]
    assert list(table["row.outputs"]) == ["a", "c", "x"]


def test_a_job_reports_progress_then_its_results_page_by_page(api: Client) -> None:
    evaluator = api.create_evaluator("exact-job", EXACT)
    rows = [{"expected": str(i % 3), "outputs": str(i % 2)} for i in range(250)]
    dataset = api.upload_dataset(rows, name="250")
    started = api.start_job(evaluator.id, dataset_id=dataset.id, parallelism=2)
    assert isinstance(started, Job) and started.progress.total == 250
    seen: list[Job] = []
    finished = api.wait_job(started, on_progress=seen.append, poll_s=0.2, timeout_s=180)
    assert finished.status == "succeeded" and finished.progress.done == 250
    assert seen and seen[-1] == finished  # the last call is the finished job
    done = [j.progress.done for j in seen]
    assert done == sorted(done)  # called on change, in order
    results = list(api.iter_results(finished, page_size=100))
    assert [r.index for r in results] == list(range(250)) and all(isinstance(r, JobResult) for r in results)
    expected = [float(str(i % 3) == str(i % 2)) for i in range(250)]
    assert [r.result.score for r in results] == expected
    assert [r.index for r in api.iter_results(finished.id, offset=240, page_size=7)] == list(range(240, 250))
    lines = b"".join(api.export_results(finished)).splitlines()
    assert len(lines) == 250 and json.loads(lines[0])["index"] == 0
    assert b"".join(api.export_results(finished, "csv")).count(b"\n") == 251
    assert finished.id in {j.id for j in api.list_jobs().data}
    inline = api.wait_job(api.start_job(evaluator.id, rows=rows[:5]), timeout_s=120)
    assert inline.progress.done == 5
    assert api.cancel_job(inline.id).status == "succeeded"  # nothing to cancel once finished
    api.delete_job(inline.id)
    with pytest.raises(NotFoundError):
        api.get_job(inline.id)


def test_migrate_code_and_a_stored_evaluator(api: Client) -> None:
    migrated = api.migrate(LEGACY)
    assert migrated.changed and migrated.interface_after == "evaluate" and "def evaluate(inputs" in migrated.code
    stored = api.create_evaluator("legacy", LEGACY)
    cases = [{"inputs": {"correct_answer": "a"}, "outputs": o} for o in ("a", "b")]
    checked = api.migrate_evaluator(stored.id, cases=cases, dry_run=True)
    assert checked.compared == 2 and checked.dry_run and not checked.saved
    saved = api.migrate_evaluator(stored.id, cases=cases)
    assert saved.saved and saved.evaluator is not None and saved.evaluator.interface == "evaluate"


def test_runtimes_are_listed_and_an_unknown_one_is_not_found(api: Client) -> None:
    assert api.list_runtimes().count >= 0
    with pytest.raises(NotFoundError):
        api.get_runtime("0" * 64)


def test_secrets_are_put_listed_and_deleted(api: Client) -> None:
    api.put_secret("JUDGE_KEY", "s3cret")
    listed = api.list_secrets()
    assert "JUDGE_KEY" in {s.name for s in listed.data} and "s3cret" not in listed.model_dump_json()
    api.delete_secret("JUDGE_KEY")
    assert "JUDGE_KEY" not in {s.name for s in api.list_secrets().data}


def test_online_rules_score_traces_the_service_received(api: Client, live: Live) -> None:
    evaluator = api.create_evaluator("online", "def evaluate(inputs, outputs, trace):\n    return 0.75\n")
    rule = api.create_rule(evaluator.id, name="all", filter={"service_name": "client-tests"})
    assert api.get_rule(rule.id) == rule and rule.id in {r.id for r in api.list_rules().data}
    paused = api.update_rule(rule.id, enabled=False)
    assert not paused.enabled
    assert api.update_rule(rule.id, enabled=True).enabled
    trace_id = new_trace_id()
    spans = [S(trace_id, new_span_id(), name="chat", attributes={"gen_ai.request.model": "m"})]
    headers = {**JSON, "authorization": f"Bearer {live.key}"}
    answer = httpx.post(f"{live.url}/v1/traces", content=json_body(spans, service="client-tests"), headers=headers)
    assert answer.status_code == 200, answer.text

    def scored() -> Any:
        return [s for s in api.rule_scores(rule.id).data if s.state == "done"]

    (score,) = wait_until(scored, 60, 0.1, what="the rule to score the trace")
    assert (score.trace_id, score.score) == (trace_id, 0.75)
    stats = api.rule_stats(rule.id, bucket=3600)
    assert sum(b.count for b in stats.buckets) == 1
    assert trace_id in {t.trace_id for t in api.list_traces().data}
    detail = api.get_trace(trace_id)
    assert [s.score for s in detail.scores] == [0.75]
    api.delete_rule(rule.id)
    with pytest.raises(NotFoundError):
        api.get_rule(rule.id)


def test_a_session_level_rule_scores_a_session_and_the_client_reads_it(api: Client, live: Live) -> None:
    code = "def evaluate(inputs, outputs, trace):\n    return float(len(trace['messages']))\n"
    evaluator = api.create_evaluator("sessions", code)
    rule = api.create_rule(evaluator.id, target={"level": "session", "quiet_s": 1})
    assert rule.target.level == "session" and rule.target.quiet_s == 1
    session_id = f"user/42#{new_span_id()}?x"  # an id a URL must quote
    headers = {**JSON, "authorization": f"Bearer {live.key}"}
    for turn, question in enumerate(("hi", "bye")):
        attributes = {"session.id": session_id, "input.value": question, "output.value": question.upper()}
        start = time.time_ns() + turn * 1_000_000_000  # the session's order is its traces' start order
        spans = [S(new_trace_id(), new_span_id(), name="turn", start_ns=start, end_ns=start + 1, attributes=attributes)]
        answer = httpx.post(f"{live.url}/v1/traces", content=json_body(spans, service="client-tests"), headers=headers)
        assert answer.status_code == 200, answer.text

    def scored() -> Any:
        return [s for s in api.rule_scores(rule.id).data if s.state == "done" and s.generation == 2]

    (score,) = wait_until(scored, 60, 0.1, what="the rule to score the session")
    assert (score.session_id, score.score, score.current) == (session_id, 4.0, True)
    assert session_id in {s.session_id for s in api.list_sessions().data}
    session = api.get_session(session_id)
    assert session.num_traces == 2 and [m["content"] for m in session.messages] == ["hi", "HI", "bye", "BYE"]
    assert score.target_id in {s.target_id for s in session.scores}
    api.delete_rule(rule.id)


def test_a_backfill_is_dry_run_started_followed_and_cancelled_from_the_client(api: Client, live: Live) -> None:
    evaluator = api.create_evaluator("backfilled", "def evaluate(inputs, outputs, trace):\n    return 1.0\n")
    trace_id = new_trace_id()
    spans = [S(trace_id, new_span_id(), name="chat", attributes={"input.value": "q"})]
    headers = {**JSON, "authorization": f"Bearer {live.key}"}
    answer = httpx.post(f"{live.url}/v1/traces", content=json_body(spans, service="backfilled"), headers=headers)
    assert answer.status_code == 200, answer.text
    wait_until(
        lambda: any(t.trace_id == trace_id and t.state == "routed" for t in api.list_traces().data), 60, 0.1
    )  # routed before the rule exists: never scored by it
    rule = api.create_rule(evaluator.id, filter={"service_name": "backfilled"})
    dry = api.backfill_rule(rule.id, dry_run=True)
    assert isinstance(dry, BackfillDryRun) and (dry.targets, dry.already_scored) == (1, 0)  # its service's only
    assert dry.traces >= 1  # the workspace's other tests' traces are in the range too
    started = api.backfill_rule(rule.id, since="2000-01-01T00:00:00Z")
    assert isinstance(started, Backfill) and started.total == 1
    done = wait_until(lambda: (b := api.get_backfill(rule.id, started.id)).status == "done" and b, 60, 0.1)
    assert done.done == 1 and [s.trace_id for s in api.rule_scores(rule.id).data] == [trace_id]
    assert api.cancel_backfill(rule.id, started.id).status == "cancelled"
    api.delete_rule(rule.id)


def test_a_backfills_cached_count_is_typed_in_the_client_and_counts_a_rerun_answered_from_the_cache(
    api: Client, live: Live
) -> None:
    code = "def evaluate(inputs, outputs, trace):\n    return {'score': 1.0, 'label': 'same'}\n"
    evaluator = api.create_evaluator("rerun", code, settings={"cache": True})
    trace_id = new_trace_id()
    spans = [S(trace_id, new_span_id(), name="chat", attributes={"input.value": "q"})]
    headers = {**JSON, "authorization": f"Bearer {live.key}"}
    answer = httpx.post(f"{live.url}/v1/traces", content=json_body(spans, service="rerun"), headers=headers)
    assert answer.status_code == 200, answer.text
    wait_until(lambda: any(t.trace_id == trace_id and t.state == "routed" for t in api.list_traces().data), 60, 0.1)

    def backfilled() -> Backfill:
        rule = api.create_rule(evaluator.id, filter={"service_name": "rerun"})
        started = api.backfill_rule(rule.id, since="2000-01-01T00:00:00Z")
        assert isinstance(started, Backfill) and isinstance(started.cached, int)
        done: Backfill = wait_until(
            lambda: (b := api.get_backfill(rule.id, started.id)).status != "running" and b, 60, 0.1
        )
        api.delete_rule(rule.id)
        return done

    first = backfilled()
    assert (first.status, first.done, first.skipped, first.cached) == ("done", 1, 0, 0)  # ran
    again = backfilled()  # another rule, the same evaluator and case: the result cache answers it
    assert (again.status, again.done, again.skipped, again.cached) == ("done", 1, 0, 1)


def test_an_operator_manages_workspaces_and_keys(live: Live) -> None:
    with Client(live.url, live.admin_key) as operator:
        assert live.workspace_id in {w.id for w in operator.list_workspaces().data}
        changed = operator.update_workspace(live.workspace_id, quotas={"max_concurrent_jobs": 5})
        assert changed.quotas.max_concurrent_jobs == 5 and operator.get_workspace(live.workspace_id) == changed
        made = operator.create_key(live.workspace_id, "short-lived")
        assert made.id in {k.id for k in operator.list_keys(live.workspace_id).data}
        with Client(live.url, made.key) as member:
            assert member.list_evaluators().count >= 0
            operator.revoke_key(made.id)
            with pytest.raises(AuthenticationError):
                member.list_evaluators()


def test_the_key_and_the_url_come_from_the_environment(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALUATOR_HOST_URL", live.url)
    monkeypatch.setenv("EVALUATOR_HOST_API_KEY", live.key)
    with Client() as env_client:
        assert env_client.base_url == live.url
        assert env_client.health()["status"] == "ok"
        assert env_client.list_evaluators().count >= 0
