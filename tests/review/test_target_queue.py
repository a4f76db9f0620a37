"""A review queue on a model-target job (issue 53), on each backend: its items show what the evaluator got — the
generated text as ``outputs``, the model call's span as ``trace`` (a loopback OpenAI-compatible server,
tests/support/llm_server.py) — and a newer revision run on them for agreement gets the same case, so the same
code answers as the job did."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from tests.support.backends import BACKENDS
from tests.support.llm_server import llm_server
from tests.support.service import make_settings

CODE = (
    "def evaluate(inputs, outputs, trace):\n"
    "    span = next(iter(trace['spans'].values()))\n"
    "    ok = outputs == 'A: Q: ' + inputs['question'] and span['attributes']['gen_ai']['request']['model'] == 'm'\n"
    "    return {'score': 1.0 if ok else 0.0, 'passed': ok}\n"
)


@pytest.fixture(scope="module", params=BACKENDS)
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(
        tmp_path_factory.mktemp("review-targets"), backend=request.param, egress_hosts={"llm.test": "127.0.0.1"}
    )
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_a_target_jobs_queue_keeps_the_generation_and_the_call_for_agreement(client: TestClient) -> None:
    ev = client.post("/v1/evaluators", json={"name": "t", "language": "python", "code": CODE}).json()["id"]
    with llm_server() as llm:
        target = {"base_url": f"http://llm.test:{llm.port}/v1", "model": "m", "prompt": "Q: {{ question }}"}
        rows = [{"question": f"q{i}"} for i in range(4)]
        job = client.post("/v1/jobs", json={"evaluator_id": ev, "rows": rows, "target": target}).json()
        done = client.get(f"/v1/jobs/{job['id']}", params={"wait_s": 60}).json()
        assert done["status"] == "succeeded", done
    queue = client.post("/v1/review-queues", json={"name": "t", "source": {"job_id": job["id"]}}).json()
    items = client.get(f"/v1/review-queues/{queue['id']}/items").json()["data"]
    assert [(i["outputs"], i["passed"]) for i in items] == [(f"A: Q: q{n}", True) for n in range(4)]
    (span,) = items[0]["trace"]["spans"].values()
    assert span["attributes"]["gen_ai"]["request"]["model"] == "m"
    for n, item in enumerate(items):  # people fail the last one
        url = f"/v1/review-queues/{queue['id']}/items/{item['id']}/verdict"
        assert client.post(url, json={"passed": n < 3}).status_code == 201
    stored = client.get(f"/v1/evaluators/{ev}/agreement").json()
    body = {"name": "t", "language": "python", "code": CODE + "# revision 2: the same answers\n"}
    assert client.put(f"/v1/evaluators/{ev}", json=body).json()["revision"] == 2
    rerun = client.get(f"/v1/evaluators/{ev}/agreement").json()
    assert (rerun["revision"], rerun["ran"], rerun["evaluator_unanswered"]) == (2, 4, 0)
    assert (stored["accuracy"], stored["confusion"]) == (rerun["accuracy"], rerun["confusion"]) == (
        0.75, {"tp": 3, "fp": 1, "fn": 0, "tn": 0},
    )  # fmt: skip
