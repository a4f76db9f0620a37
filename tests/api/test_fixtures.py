"""Fixtures with each revision (issue 35): run in the sandbox on save, a failing set stores a draft that
never becomes the latest unless forced; ``/test`` runs a revision's fixtures again. Both backends."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.evaluation.models import MAX_FIXTURES

CODE = (
    "def evaluate(inputs, outputs, trace):\n"
    "    if inputs.get('crash'):\n"
    "        raise ValueError('asked to crash')\n"
    "    x = float(outputs)\n"
    "    return {'score': x, 'passed': x >= THRESHOLD, 'label': 'high' if x >= THRESHOLD else 'low'}\n"
)


def code(threshold: float) -> str:
    return f"THRESHOLD = {threshold}\n" + CODE


FIXTURES: list[dict[str, Any]] = [
    {"name": "high", "outputs": 0.9, "expect": {"score": 0.9, "passed": True, "label": "high"}},
    {"name": "low", "outputs": 0.1, "expect": {"passed": False, "label": "low"}},
    {"name": "middle", "outputs": 0.6, "expect": {"passed": True}},
    {"name": "crash", "inputs": {"crash": True}, "outputs": 0, "expect": {"status": "error"}},
]


def _body(threshold: float = 0.5, **extra: Any) -> dict[str, Any]:
    return {"name": "threshold", "language": "python", "code": code(threshold), "fixtures": FIXTURES} | extra


def _create(client: TestClient, **extra: Any) -> dict[str, Any]:
    response = client.post("/v1/evaluators", json=_body(**extra))
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def test_fixtures_that_pass_are_stored_with_the_revision_and_their_report(client: TestClient) -> None:
    ev = _create(client)
    assert ev["draft"] is False and ev["revision"] == 1
    assert ev["fixture_report"]["passed"] == 4 and ev["fixture_report"]["failed"] == 0
    assert [f["name"] for f in ev["fixtures"]] == ["high", "low", "middle", "crash"]
    stored = client.get(f"/v1/evaluators/{ev['id']}").json()
    assert stored["fixtures"] == ev["fixtures"] and stored["fixture_report"] == ev["fixture_report"]
    crash = stored["fixture_report"]["results"][3]
    assert crash["status"] == "error" and "asked to crash" in crash["error"]


@pytest.mark.databases
def test_failing_fixtures_store_a_draft_that_is_not_the_latest_until_forced(client: TestClient) -> None:
    ev = _create(client)
    failed = client.put(f"/v1/evaluators/{ev['id']}", json=_body(0.7))  # 'middle' (0.6) now fails
    assert failed.status_code == 409, failed.text
    error = failed.json()["error"]
    assert error["type"] == "FixturesFailed" and "1 of 4 fixtures failed (middle)" in error["message"]
    draft = error["evaluator"]
    assert draft["draft"] is True and draft["revision"] == 2
    middle = next(r for r in draft["fixture_report"]["results"] if r["name"] == "middle")
    assert not middle["passed"] and middle["problems"] == ["passed false, expected true"]
    # the latest is still revision 1: GET, calls by id without a revision, the list
    assert client.get(f"/v1/evaluators/{ev['id']}").json()["revision"] == 1
    by_id = client.post(f"/v1/evaluators/{ev['id']}/evaluate", json={"outputs": 0.6}).json()
    assert by_id["revision"] == 1 and by_id["passed"] is True
    listed = {e["id"]: e for e in client.get("/v1/evaluators").json()["data"]}
    assert listed[ev["id"]]["revision"] == 1
    # the draft runs when named, and shows in the revisions
    named = client.post(f"/v1/evaluators/{ev['id']}/evaluate", json={"outputs": 0.6, "revision": 2}).json()
    assert named["revision"] == 2 and named["passed"] is False
    revisions = client.get(f"/v1/evaluators/{ev['id']}/revisions").json()["data"]
    assert [(r["revision"], r["draft"]) for r in revisions] == [(1, False), (2, True)]
    # the next save numbers after the draft; forced, it is the latest with its failure on record
    forced = client.put(f"/v1/evaluators/{ev['id']}", json=_body(0.7, force=True))
    assert forced.status_code == 200, forced.text
    assert forced.json()["revision"] == 3 and forced.json()["draft"] is False
    assert forced.json()["fixture_report"]["failed"] == 1
    assert client.post(f"/v1/evaluators/{ev['id']}/evaluate", json={"outputs": 0.6}).json()["revision"] == 3


def test_a_patch_keeps_the_fixtures_and_is_gated_by_them(client: TestClient) -> None:
    ev = _create(client)
    patched = client.patch(f"/v1/evaluators/{ev['id']}", json={"code": code(0.95)})
    assert patched.status_code == 409 and patched.json()["error"]["evaluator"]["revision"] == 2
    assert patched.json()["error"]["evaluator"]["fixtures"] == ev["fixtures"]
    emptied = client.patch(f"/v1/evaluators/{ev['id']}", json={"code": code(0.95), "fixtures": []})
    assert emptied.status_code == 200 and emptied.json()["revision"] == 3 and emptied.json()["fixtures"] == []


@pytest.mark.databases
def test_a_new_evaluator_whose_fixtures_fail_has_no_latest_until_a_save_passes(client: TestClient) -> None:
    response = client.post("/v1/evaluators", json=_body(0.95))
    assert response.status_code == 409, response.text
    draft = response.json()["error"]["evaluator"]
    assert draft["revision"] == 1 and draft["draft"] is True and draft["fixture_report"]["failed"] == 2
    shown = client.get(f"/v1/evaluators/{draft['id']}").json()
    assert shown["revision"] == 1 and shown["draft"] is True  # what there is, marked a draft
    assert draft["id"] in {e["id"] for e in client.get("/v1/evaluators").json()["data"]}
    unreleased = client.post(f"/v1/evaluators/{draft['id']}/evaluate", json={"outputs": 0.6})
    assert unreleased.status_code == 409 and "no released revision" in unreleased.json()["error"]["message"]
    rows = json.dumps({"outputs": 0.6})
    ds = client.post("/v1/datasets", content=rows, headers={"content-type": "application/jsonl"}).json()
    job = client.post("/v1/jobs", json={"evaluator_id": draft["id"], "dataset_id": ds["id"]})
    assert job.status_code == 409, job.text  # a job never runs a draft it did not name
    assert client.post(f"/v1/evaluators/{draft['id']}/evaluate", json={"revision": 1}).status_code == 200
    fixed = client.put(f"/v1/evaluators/{draft['id']}", json=_body(0.5))
    assert fixed.status_code == 200 and fixed.json()["revision"] == 2 and not fixed.json()["draft"]
    assert client.post(f"/v1/evaluators/{draft['id']}/evaluate", json={"outputs": 0.6}).json()["revision"] == 2


def test_a_retried_save_whose_fixtures_failed_replays_the_409_and_stores_one_draft(client: TestClient) -> None:
    body = _body(0.95, name="idempotent-draft")
    first = client.post("/v1/evaluators", json=body, headers={"Idempotency-Key": "draft-once"})
    again = client.post("/v1/evaluators", json=body, headers={"Idempotency-Key": "draft-once"})
    assert first.status_code == again.status_code == 409, first.text
    assert again.headers["idempotent-replayed"] == "true" and again.json() == first.json()
    named = [e for e in client.get("/v1/evaluators").json()["data"] if e["name"] == "idempotent-draft"]
    assert len(named) == 1  # the retry did not store a second draft evaluator


def test_the_test_route_runs_a_revisions_fixtures_again(client: TestClient) -> None:
    ev = _create(client)
    client.put(f"/v1/evaluators/{ev['id']}", json=_body(0.7))  # revision 2: a draft
    latest = client.post(f"/v1/evaluators/{ev['id']}/test", json={}).json()
    assert (latest["revision"], latest["passed"], latest["failed"], latest["draft"]) == (1, 4, 0, False)
    draft = client.post(f"/v1/evaluators/{ev['id']}/test", json={"revision": 2}).json()
    assert (draft["revision"], draft["failed"], draft["draft"]) == (2, 1, True)
    assert client.post(f"/v1/evaluators/{ev['id']}/test", json={"revision": 9}).status_code == 404


def test_saves_without_fixtures_answer_as_before(client: TestClient) -> None:
    response = client.post("/v1/evaluators", json={"name": "plain", "language": "python", "code": code(0.5)})
    assert response.status_code == 201 and response.json()["fixtures"] == []
    assert response.json()["fixture_report"] is None and response.json()["draft"] is False


def test_fixture_shapes_are_checked_with_did_you_mean_and_bounded(client: TestClient) -> None:
    misspelled = [{"name": "a", "outputs": 1, "expect": {"scor": 1}}]
    response = client.post("/v1/evaluators", json=_body(fixtures=misspelled))
    assert response.status_code == 422 and "did you mean 'score'?" in response.json()["error"]["message"]
    misplaced = [{"name": "a", "output": 1, "expect": {"score": 1}}]
    response = client.post("/v1/evaluators", json=_body(fixtures=misplaced))
    assert response.status_code == 422 and "did you mean 'outputs'?" in response.json()["error"]["message"]
    for bad, words in (
        ([{"name": "a", "expect": {}}], "at least one of score, passed, label, status"),
        ([{"name": "a", "expect": {"passed": True}}] * 2, "fixture names must be unique"),
        ([{"name": "a", "expect": {"status": "fine"}}], "status"),
        ([{"name": "a", "expect": {"score": 1, "tolerance": -1}}], "tolerance"),
        ([{"name": f"f{n}", "expect": {"passed": True}} for n in range(MAX_FIXTURES + 1)], "fixtures"),
    ):
        response = client.post("/v1/evaluators", json=_body(fixtures=bad))
        assert response.status_code == 422, (bad[:1], response.text)
        assert words in response.json()["error"]["message"], response.text
    assert client.get("/healthz").status_code == 200
    assert _create(client)["fixture_report"]["failed"] == 0  # and a good save still works


# --- compare: two revisions on the same rows ------------------------------------------------------------

BUMPED = (
    "THRESHOLD = 0.7\n"
    "def evaluate(inputs, outputs, trace):\n"
    "    if inputs.get('crash_head'):\n"
    "        raise ValueError('head crashes here')\n"
    "    x = float(outputs) + (0.2 if inputs.get('bump') else 0.0)\n"
    "    return {'score': x, 'passed': x >= THRESHOLD, 'label': 'high' if x >= THRESHOLD else 'low'}\n"
)


def _expected(row: dict[str, Any], tolerance: float) -> list[str]:
    """What flips between code(0.5) and BUMPED on ``row``, worked out here, apart from the service."""
    if row["inputs"].get("crash_head"):
        return ["status", "passed", "label", "score"]
    x = row["outputs"]
    y = x + (0.2 if row["inputs"].get("bump") else 0.0)
    base, head = (x, x >= 0.5, "high" if x >= 0.5 else "low"), (y, y >= 0.7, "high" if y >= 0.7 else "low")
    fields = [name for name, a, b in (("passed", base[1], head[1]), ("label", base[2], head[2])) if a != b]
    return fields + (["score"] if abs(y - x) > tolerance else [])


def test_compare_finds_exactly_the_flipped_rows_of_a_seeded_dataset(client: TestClient) -> None:
    import random

    seeded = random.Random(35)
    rows: list[dict[str, Any]] = [
        {"inputs": {"bump": seeded.random() < 0.3, "crash_head": seeded.random() < 0.05}, "outputs": seeded.random()}
        for _ in range(60)
    ]
    ev = client.post("/v1/evaluators", json={"name": "t", "language": "python", "code": code(0.5)}).json()
    assert client.put(f"/v1/evaluators/{ev['id']}", json={"name": "t", "language": "python", "code": BUMPED}).is_success
    lines = "\n".join(json.dumps(r["inputs"] | {"answer": r["outputs"]}) for r in rows)
    ds = client.post("/v1/datasets", content=lines, headers={"content-type": "application/jsonl"}).json()
    body = {"base_revision": 1, "head_revision": 2, "dataset_id": ds["id"], "sample": 60, "tolerance": 0.1}
    body["field_mapping"] = {"inputs": ["bump", "crash_head"], "outputs": "answer"}
    answer = client.post(f"/v1/evaluators/{ev['id']}/compare", json=body)
    assert answer.status_code == 200, answer.text
    compared = answer.json()
    expected = {i: _expected(r, 0.1) for i, r in enumerate(rows)}
    assert compared["compared"] == 60
    assert compared["flipped"] == [i for i, fields in expected.items() if fields]
    assert 0 < len(compared["flipped"]) < 60  # the seed flips some rows and keeps others
    assert compared["next_offset"] is None and len(compared["rows"]) == 60
    for row in compared["rows"]:
        assert sorted(row["fields"]) == sorted(expected[row["index"]]), row
    crashes = sum(bool(r["inputs"]["crash_head"]) for r in rows)
    assert compared["deltas"]["errors"] == crashes and compared["head"]["errors"] == crashes
    assert compared["deltas"]["flipped"]["status"] == crashes
    assert compared["deltas"]["pass_rate"] == compared["head"]["pass_rate"] - compared["base"]["pass_rate"]
    # the same rows inline give the same flips; a page of only the flipped rows
    inline: dict[str, Any] = {
        "base_revision": 1,
        "head_revision": 2,
        "cases": rows,
        "tolerance": 0.1,
        "only_flipped": True,
    }
    paged = client.post(f"/v1/evaluators/{ev['id']}/compare", json=inline | {"limit": 5}).json()
    assert paged["flipped"] == compared["flipped"] and [r["index"] for r in paged["rows"]] == compared["flipped"][:5]
    assert paged["next_offset"] == 5
    rest = client.post(f"/v1/evaluators/{ev['id']}/compare", json=inline | {"offset": 5, "limit": 1000}).json()
    assert [r["index"] for r in rest["rows"]] == compared["flipped"][5:] and rest["next_offset"] is None
    # a looser tolerance flips fewer scores, never more
    loose = client.post(f"/v1/evaluators/{ev['id']}/compare", json=inline | {"tolerance": 0.5}).json()
    assert loose["flipped"] == [i for i, r in enumerate(rows) if _expected(r, 0.5)]


def test_compare_refuses_bad_requests_clearly(client: TestClient) -> None:
    ev = client.post("/v1/evaluators", json={"name": "t", "language": "python", "code": code(0.5)}).json()
    url = f"/v1/evaluators/{ev['id']}/compare"
    missing = client.post(url, json={"base_revision": 1, "head_revision": 7, "cases": [{"outputs": 1}]})
    assert missing.status_code == 404
    both = client.post(url, json={"base_revision": 1, "head_revision": 1, "cases": [{}], "dataset_id": "ds_x"})
    assert both.status_code == 422 and "exactly one of cases / dataset_id" in both.json()["error"]["message"]
    typo = client.post(url, json={"base_revision": 1, "head_revison": 1, "cases": [{}]})
    assert typo.status_code == 422 and "did you mean 'head_revision'?" in typo.json()["error"]["message"]
    page = client.post(url, json={"base_revision": 1, "head_revision": 1, "cases": [{"outputs": 1}], "limit": 10_000})
    assert page.status_code == 422
    unknown = client.post(url, json={"base_revision": 1, "head_revision": 1, "dataset_id": "ds_missing"})
    assert unknown.status_code == 404
    same = client.post(url, json={"base_revision": 1, "head_revision": 1, "cases": [{"outputs": 0.3}]}).json()
    assert same["flipped"] == [] and same["rows"][0]["delta"] == 0.0
    assert client.get("/healthz").status_code == 200
