"""Agreement per revision through the API (issue 53), on every backend and on PostgreSQL: on a seeded set of
verdicts over a job's rows, ``GET /v1/evaluators/{id}/agreement`` equals an independent computation
(tests/support/agreement.py) for the revision that scored the rows (from the stored answers) and for a newer
revision that never did (run on the reviewed rows now; a second time from the result cache); no verdicts is
422 ``NothingCompared``, and an undefined kappa is null with its reason."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.agreement import kappa_pairwise, spearman
from tests.support.jobs import create_evaluator, jsonl, start, upload, wait

pytestmark = pytest.mark.databases


def _code(threshold: float) -> str:
    return (
        "def evaluate(inputs, outputs, trace):\n"
        "    s = inputs['s']\n"
        f"    return {{'score': s, 'passed': s >= {threshold}, 'label': 'high' if s >= 0.5 else 'low'}}\n"
    )


ROWS = [{"q": f"q{i}", "s": round((i * 7 % 30) / 30, 4), "outputs": "x"} for i in range(30)]


def _expected(threshold: float, verdicts: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """What agreement must be: the evaluator's answers recomputed here from the rows, against the verdicts."""
    idx = sorted(verdicts)
    truth = [verdicts[i]["passed"] for i in idx]
    said = [ROWS[i]["s"] >= threshold for i in idx]
    both = [(ROWS[i]["s"], verdicts[i]["score"]) for i in idx if "score" in verdicts[i]]
    return {
        "reviewed": len(idx),
        "accuracy": sum(a == b for a, b in zip(truth, said, strict=True)) / len(idx),
        "cohen_kappa": kappa_pairwise(truth, said),
        "confusion": {
            "tp": sum(a and b for a, b in zip(truth, said, strict=True)),
            "fp": sum(b and not a for a, b in zip(truth, said, strict=True)),
            "fn": sum(a and not b for a, b in zip(truth, said, strict=True)),
            "tn": sum(not a and not b for a, b in zip(truth, said, strict=True)),
        },
        "scored": len(both),
        "score_mae": sum(abs(a - b) for a, b in both) / len(both),
        "spearman": spearman([a for a, _ in both], [b for _, b in both]),
    }


def _check(got: dict[str, Any], wanted: dict[str, Any]) -> None:
    for key, value in wanted.items():
        assert got[key] == (pytest.approx(value, abs=1e-9) if isinstance(value, float) else value), key


def test_agreement_equals_an_independent_computation_for_the_scoring_and_a_newer_revision(client: TestClient) -> None:
    ev = create_evaluator(client, _code(0.5), name=f"agree-{uuid.uuid4().hex[:6]}", settings={"cache": True})["id"]
    assert client.get(f"/v1/evaluators/{ev}/agreement").status_code == 422  # no verdict yet: nothing compared
    dataset = upload(client, jsonl(ROWS))
    job = wait(client, start(client, ev, dataset_id=dataset["id"])["id"])
    queue = client.post("/v1/review-queues", json={"name": "all", "source": {"job_id": job["id"]}}).json()
    items = client.get(f"/v1/review-queues/{queue['id']}/items", params={"limit": 100}).json()["data"]
    assert len(items) == 30
    rng = random.Random(53)
    verdicts: dict[int, dict[str, Any]] = {}
    for item in items[:24]:  # 6 stay pending: they never count
        s = ROWS[item["source"]["index"]]["s"]
        verdict: dict[str, Any] = {"passed": rng.random() < 0.15 + 0.7 * s}
        if rng.random() < 0.7:
            verdict["score"] = round(min(1.0, max(0.0, s + rng.gauss(0, 0.25))), 1)  # ties on purpose
        verdicts[item["source"]["index"]] = verdict
        url = f"/v1/review-queues/{queue['id']}/items/{item['id']}/verdict"
        client.post(url, json={"passed": not verdict["passed"]})  # replaced next: only the current one counts
        assert client.post(url, json=verdict).status_code == 201

    first = client.get(f"/v1/evaluators/{ev}/agreement")
    assert first.status_code == 200, first.text
    assert (first.json()["revision"], first.json()["ran"]) == (1, 0)  # revision 1's stored answers
    _check(first.json(), _expected(0.5, verdicts))
    assert set(first.json()["by_label"]) <= {"high", "low"}

    newer = client.put(f"/v1/evaluators/{ev}", json={"name": "agree", "language": "python", "code": _code(0.3),
                                                     "settings": {"cache": True}})  # fmt: skip
    assert newer.status_code == 200 and newer.json()["revision"] == 2
    second = client.get(f"/v1/evaluators/{ev}/agreement").json()  # the latest: it never scored these rows
    assert (second["revision"], second["ran"], second["reviewed"]) == (2, 24, 24)
    _check(second, _expected(0.3, verdicts))
    again = client.get(f"/v1/evaluators/{ev}/agreement", params={"revision": 2}).json()
    assert (again["ran"], again["cached"]) == (24, 24)  # the same cases: from the result cache
    _check(again, _expected(0.3, verdicts))
    older = client.get(f"/v1/evaluators/{ev}/agreement", params={"revision": 1}).json()
    assert older["ran"] == 0 and older["accuracy"] == first.json()["accuracy"]
    assert client.get(f"/v1/evaluators/{ev}/agreement", params={"revision": 9}).status_code == 404


def test_agreement_without_verdicts_is_refused_and_an_undefined_kappa_is_null_with_its_reason(
    client: TestClient,
) -> None:
    always = "def evaluate(inputs, outputs, trace):\n    return {'score': 1.0, 'passed': True}\n"
    ev = create_evaluator(client, always, name=f"always-{uuid.uuid4().hex[:6]}")["id"]
    refused = client.get(f"/v1/evaluators/{ev}/agreement")
    assert refused.status_code == 422 and refused.json()["error"]["type"] == "NothingCompared", refused.text
    dataset = upload(client, jsonl(ROWS[:3]))
    job = wait(client, start(client, ev, dataset_id=dataset["id"])["id"])
    queue = client.post("/v1/review-queues", json={"name": "k", "source": {"job_id": job["id"]}}).json()
    for item in client.get(f"/v1/review-queues/{queue['id']}/items").json()["data"]:
        client.post(f"/v1/review-queues/{queue['id']}/items/{item['id']}/verdict", json={"passed": True})
    got = client.get(f"/v1/evaluators/{ev}/agreement").json()
    assert (got["accuracy"], got["cohen_kappa"], got["confusion"]) == (1.0, None, {"tp": 3, "fp": 0, "fn": 0, "tn": 0})
    assert "undefined" in got["cohen_kappa_reason"] and got["spearman"] is None and got["score_mae"] is None
