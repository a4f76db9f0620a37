"""NeMo-style ``Metric`` classes (the ``metric`` interface, docs/metrics.md) on every backend: NeMo's
tutorial metric pasted unchanged, as single calls and as a job over the tutorial's four rows (mapping
``outputs`` to ``model_expression``); outputs checked against ``output_spec()``; an async
``compute_scores`` with rows in flight; the restricted policy; several classes and
``settings.entrypoint``; migration leaves it unchanged; JS/TS get a 422 that says Python only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.nemo import DATASET, EXPECTED, METRIC_TYPE, TUTORIAL_METRIC, cases
from tests.support.service import assert_healthy
from tests.support.wait import wait_until

Json = dict[str, Any]

VALID = f"{METRIC_TYPE}.valid_expression"
CORRECT = f"{METRIC_TYPE}.correct_value"


def _evaluate(client: TestClient, code: str, cases: list[Json], **settings: Any) -> Json:
    body = {"language": "python", "code": code, "cases": cases, "settings": settings}
    response = client.post("/v1/evaluate", json=body)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_the_tutorial_metric_runs_unchanged_as_single_calls(client: TestClient) -> None:
    inspected = client.post("/v1/inspect", json={"language": "python", "code": TUTORIAL_METRIC}).json()
    assert inspected["interface"] == "metric" and inspected["entrypoint"] == "ArithmeticExpressionCorrectnessMetric"
    assert inspected["async"] is True and inspected["errors"] == []
    assert not any("nemo_evaluator_sdk" in w for w in inspected["warnings"])  # nothing to pin
    answer = _evaluate(client, TUTORIAL_METRIC, cases())
    results = answer["results"]
    assert [r["status"] for r in results] == ["ok"] * 4, results
    for result, (valid, correct) in zip(results, EXPECTED, strict=True):
        assert result["interface"] == "metric"
        assert result["outputs"] == {VALID: float(valid), "valid_expression": float(valid)} | {
            CORRECT: float(correct),
            "correct_value": float(correct),
        }
        assert result["details"]["metric_type"] == METRIC_TYPE
        assert result["score"] is None and result["passed"] is None
    outputs = answer["aggregate"]["outputs"]
    assert outputs[VALID]["mean"] == outputs["valid_expression"]["mean"] == 0.75
    assert outputs[CORRECT]["mean"] == outputs["correct_value"]["mean"] == 0.5
    # one case, the single-call shape
    one = client.post(
        "/v1/evaluate",
        json={"language": "python", "code": TUTORIAL_METRIC, "inputs": {"expected": 55}, "outputs": "(12 * 4) + 7"},
    ).json()
    assert one["status"] == "ok" and one["outputs"][CORRECT] == 1.0


def test_the_tutorial_metric_runs_as_a_job_over_its_dataset(client: TestClient) -> None:
    body = {"name": "nemo-tutorial", "language": "python", "code": TUTORIAL_METRIC}
    evaluator = client.post("/v1/evaluators", json=body)
    assert evaluator.status_code == 201, evaluator.text
    assert evaluator.json()["interface"] == "metric"
    data = "".join(json.dumps(row) + "\n" for row in DATASET).encode()
    dataset = client.post("/v1/datasets", content=data, headers={"content-type": "application/jsonl"})
    assert dataset.status_code == 201, dataset.text
    job = {
        "evaluator_id": evaluator.json()["id"],
        "dataset_id": dataset.json()["id"],
        "field_mapping": {"outputs": "model_expression"},
    }
    started = client.post("/v1/jobs", json=job)
    assert started.status_code == 202, started.text
    job_id = started.json()["id"]
    done = wait_until(
        lambda: (j := client.get(f"/v1/jobs/{job_id}").json())["status"] not in ("queued", "running") and j,
        180,
        0.05,
        what="the job",
    )
    assert done["status"] == "succeeded" and done["progress"]["failed"] == 0, done
    outputs = done["aggregate"]["outputs"]
    assert outputs[VALID]["mean"] == 0.75 and outputs[CORRECT]["mean"] == 0.5  # NeMo's names
    assert outputs["valid_expression"]["mean"] == 0.75 and outputs["correct_value"]["mean"] == 0.5  # the plain ones
    assert outputs[VALID]["count"] == 4
    page = client.get(f"/v1/jobs/{job_id}/results", params={"limit": 10}).json()["data"]
    assert [(r["result"]["outputs"][VALID], r["result"]["outputs"][CORRECT]) for r in page] == [
        (float(v), float(c)) for v, c in EXPECTED
    ]
    assert page[0]["row"]["model_expression"] == "(12 * 4) + 7"  # the row keeps its columns


WRONG = """from nemo_evaluator_sdk import Metric, MetricOutput, MetricOutputSpec, MetricResult


class Picky(Metric):
    type = "picky"

    def output_spec(self):
        return [MetricOutputSpec.boolean("ok"), MetricOutputSpec.continuous_score("sim", required=False),
                MetricOutputSpec.label("verdict", required=False)]

    def compute_scores(self, metric_input):
        how = metric_input.row.data["how"]
        if how == "kind":
            return MetricResult(outputs=[MetricOutput(name="ok", value="maybe")])
        if how == "missing":
            return MetricResult(outputs=[MetricOutput(name="sim", value=0.5)])
        if how == "undeclared":
            return MetricResult(outputs=[MetricOutput(name="ok", value=True), MetricOutput(name="extra", value=1)])
        if how == "twice":
            return MetricResult(outputs=[MetricOutput(name="ok", value=True), MetricOutput(name="ok", value=False)])
        if how == "dict":
            return {"ok": True}
        if how == "raise":
            raise ValueError("the metric broke")
        return MetricResult(
            outputs=[MetricOutput(name="ok", value="yes"), MetricOutput(name="sim", value="0.25"),
                     MetricOutput(name="verdict", value="fine")],
        )
"""


def test_outputs_are_checked_against_the_output_spec_and_name_the_offending_output(client: TestClient) -> None:
    hows = ["kind", "missing", "undeclared", "twice", "dict", "raise", "coerced"]
    results = _evaluate(client, WRONG, [{"inputs": {"how": how}} for how in hows])["results"]
    by = dict(zip(hows, results, strict=True))
    for how in ("kind", "missing", "undeclared", "twice", "dict"):
        assert by[how]["status"] == "invalid_result", by[how]
        assert by[how]["error"]["type"] == "InvalidResult" and by[how]["error"]["message"].startswith("picky: ")
    assert "output 'ok' is 'maybe' (str), not a valid BooleanValue" in by["kind"]["error"]["message"]
    assert "required output 'ok' is missing" in by["missing"]["error"]["message"]
    assert "output 'extra' is not declared by output_spec()" in by["undeclared"]["error"]["message"]
    assert "output 'ok' is emitted twice" in by["twice"]["error"]["message"]
    assert "not a MetricResult" in by["dict"]["error"]["message"]
    assert by["raise"]["status"] == "error" and "the metric broke" in by["raise"]["error"]["message"]
    assert (
        by["raise"]["error"]["line"] == WRONG.splitlines().index('            raise ValueError("the metric broke")') + 1
    )
    coerced = by["coerced"]
    assert coerced["status"] == "ok", coerced
    assert coerced["outputs"] == {"picky.ok": 1.0, "ok": 1.0, "picky.sim": 0.25, "sim": 0.25}
    assert coerced["label"] == "fine" and coerced["details"]["verdict"] == "fine"
    assert_healthy(client)


IN_FLIGHT = """import asyncio

from nemo_evaluator_sdk import Metric, MetricOutput, MetricOutputSpec, MetricResult

WANT = 8
now = 0
peak = 0


class Judge(Metric):
    type = "judge"

    def output_spec(self):
        return [MetricOutputSpec.continuous_score("peak")]

    async def compute_scores(self, metric_input):
        global now, peak
        now += 1
        peak = max(peak, now)
        for _ in range(200):  # at most 2 s: until WANT rows await together
            if peak >= WANT:
                break
            await asyncio.sleep(0.01)
        now -= 1
        return MetricResult(outputs=[MetricOutput(name="peak", value=peak)])
"""


def test_an_async_compute_scores_gets_rows_in_flight(client: TestClient) -> None:
    results = _evaluate(client, IN_FLIGHT, [{"inputs": {"n": n}} for n in range(16)], timeout_s=10)["results"]
    assert [r["status"] for r in results] == ["ok"] * 16, results[0]
    assert max(r["outputs"]["peak"] for r in results) >= 8  # eight rows awaited at once in one worker


PLAIN = """from nemo_evaluator_sdk import Metric, MetricInput, MetricOutput, MetricOutputSpec, MetricResult


class Exact(Metric):
    type = "exact"

    def output_spec(self):
        return [MetricOutputSpec.boolean("match")]

    async def compute_scores(self, metric_input: MetricInput) -> MetricResult:
        text = (metric_input.candidate.output_text or "").strip()
        return MetricResult(outputs=[MetricOutput(name="match", value=text == metric_input.row.data["expected"])])
"""


def test_the_restricted_policy_runs_a_metric_and_still_refuses_what_it_refuses(client: TestClient) -> None:
    cases_ = [{"inputs": {"expected": "a"}, "outputs": "a"}, {"inputs": {"expected": "a"}, "outputs": "b"}]
    results = _evaluate(client, PLAIN, cases_, policy="restricted")["results"]
    assert [r["status"] for r in results] == ["ok", "ok"], results
    assert [r["outputs"]["match"] for r in results] == [1.0, 0.0]
    refused = client.post(
        "/v1/evaluate",
        json={"language": "python", "code": TUTORIAL_METRIC, "cases": cases(), "settings": {"policy": "restricted"}},
    )
    assert refused.status_code == 422 and refused.json()["error"]["type"] == "PolicyError"  # `_BINARY_OPERATORS`
    escape = PLAIN.replace('type = "exact"', 'type = "exact"\n    gone = __import__("os")')
    refused = client.post(
        "/v1/evaluate", json={"language": "python", "code": escape, "settings": {"policy": "restricted"}}
    )
    assert refused.status_code == 422


def test_several_metric_classes_need_settings_entrypoint(client: TestClient) -> None:
    two = (
        PLAIN + "\n\n" + PLAIN.split("\n\n\n", 1)[1].replace("class Exact", "class Loose").replace('"exact"', '"loose"')
    )
    refused = client.post("/v1/evaluate", json={"language": "python", "code": two, "outputs": "a"})
    assert refused.status_code == 422
    assert (
        "Exact, Loose" in refused.json()["error"]["message"]
        and "settings.entrypoint" in refused.json()["error"]["message"]
    )
    case = {"inputs": {"expected": "a"}, "outputs": "a"}
    chosen = _evaluate(client, two, [case], entrypoint="Loose")["results"][0]
    assert chosen["status"] == "ok" and chosen["details"]["metric_type"] == "loose"
    other = _evaluate(client, two, [case], entrypoint="Exact")["results"][0]  # the same code: never Loose's worker
    assert other["status"] == "ok" and other["details"]["metric_type"] == "exact"
    wrong = client.post(
        "/v1/evaluate", json={"language": "python", "code": two, "outputs": "a", "settings": {"entrypoint": "Nope"}}
    )
    assert wrong.status_code == 422 and "'Nope'" in wrong.json()["error"]["message"]


def test_migration_leaves_a_metric_unchanged(client: TestClient) -> None:
    answer = client.post("/v1/migrate", json={"language": "python", "code": TUTORIAL_METRIC})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["changed"] is False and body["code"] == TUTORIAL_METRIC
    assert body["interface_before"] == body["interface_after"] == "metric"


JS_METRIC = """class Exact {
  type = 'exact';
  output_spec() { return [{ name: 'match' }]; }
  async compute_scores(input) { return { outputs: [{ name: 'match', value: true }] }; }
}
module.exports = { Exact };
"""

TS_METRIC = """export class Exact {
  readonly type: string = 'exact';
  output_spec(): object[] { return [{ name: 'match' }]; }
  async compute_scores(input: unknown): Promise<object> { return { outputs: [{ name: 'match', value: true }] }; }
}
"""


@pytest.mark.parametrize(("language", "code"), [("javascript", JS_METRIC), ("typescript", TS_METRIC)])
def test_a_js_or_ts_metric_class_is_a_422_saying_python_only(client: TestClient, language: str, code: str) -> None:
    refused = client.post("/v1/evaluate", json={"language": language, "code": code, "outputs": "a"})
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["type"] == "InterfaceError" and "Python only" in error["message"]
    inspected = client.post("/v1/inspect", json={"language": language, "code": code}).json()
    assert inspected["interface"] is None and "Python only" in inspected["errors"][0]["message"]


SEES = """import json

from nemo_evaluator_sdk import Metric, MetricOutput, MetricOutputSpec, MetricResult


class Sees(Metric):
    type = "sees"

    def output_spec(self):
        return [MetricOutputSpec.boolean("seen"), MetricOutputSpec.label("what")]

    def compute_scores(self, metric_input):
        c = metric_input.candidate
        what = [metric_input.row.data, c.output_text, c.response, c.trajectory, c.metadata, metric_input.row.row_index]
        seen = MetricOutput(name="seen", value=True)
        return MetricResult(outputs=[seen, MetricOutput(name="what", value=json.dumps(what))])
"""


def test_what_compute_scores_gets_of_a_case(client: TestClient) -> None:
    trace = {"spans": {"a": {"name": "llm"}}}
    cases_ = [
        {"inputs": {"q": 1}, "outputs": "text", "trace": trace},
        {"inputs": [1, 2], "outputs": {"answer": "é", "n": 2}},
        {"inputs": {}, "outputs": None},
    ]
    results = _evaluate(client, SEES, cases_)["results"]
    assert [r["status"] for r in results] == ["ok"] * 3, results[0]
    seen = [json.loads(r["label"]) for r in results]
    assert seen[0] == [{"q": 1}, "text", "text", trace, {}, None]
    assert seen[1] == [{"inputs": [1, 2]}, '{"answer": "é", "n": 2}', {"answer": "é", "n": 2}, None, {}, None]
    assert seen[2] == [{}, None, None, None, {}, None]
    assert results[0]["details"]["sees.what"] == results[0]["label"]  # a label output, under both names too


SLOW = """import asyncio, time

from nemo_evaluator_sdk import Metric, MetricOutput, MetricOutputSpec, MetricResult


class Slow(Metric):
    type = "slow"

    def output_spec(self):
        return [MetricOutputSpec.boolean("done")]

    async def compute_scores(self, metric_input):
        if metric_input.row.data.get("hang"):
            await asyncio.sleep(60)
        return MetricResult(outputs=[MetricOutput(name="done", value=True)])
"""


def test_a_metric_that_outlives_its_timeout_is_a_timeout_and_the_rest_are_answered(client: TestClient) -> None:
    cases_ = [{"inputs": {"hang": i == 1}} for i in range(4)]
    results = _evaluate(client, SLOW, cases_, timeout_s=1)["results"]
    assert [r["status"] for r in results] == ["ok", "timeout", "ok", "ok"], results
    assert results[1]["error"]["line"] == SLOW.splitlines().index("            await asyncio.sleep(60)") + 1
    sync = SLOW.replace("async def compute_scores", "def compute_scores").replace(
        "await asyncio.sleep(60)", "time.sleep(60)"
    )
    results = _evaluate(client, sync, cases_, timeout_s=1)["results"]
    assert [r["status"] for r in results] == ["ok", "timeout", "ok", "ok"], results
    assert_healthy(client)
