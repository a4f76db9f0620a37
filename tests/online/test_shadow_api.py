"""Shadow revisions through the API (issue 53), on SQLite and PostgreSQL: ``candidate_revision`` must be an existing
revision of the rule's evaluator (422) and null clears it; promoting a rule with no candidate is 409; an unknown
rule, and another workspace's, is 404 to ``/shadow``, ``/promote`` and PATCH alike (and left as it was); hostile
query values are 422 and the service stays healthy; the comparison's agreement with reviews uses the verdicts on
the rule's items, each side's figures equal to an independent count."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from tests.support.backends import DATABASES
from tests.support.online import chat_trace
from tests.support.service import make_settings
from tests.support.wait import wait_until

ADMIN = "operator-key-for-shadow-tests"
V1 = (
    "def evaluate(inputs, outputs, trace):\n"
    "    return {'score': 1.0 if outputs == '4' else 0.0, 'passed': outputs == '4'}\n"
)
V2 = "def evaluate(inputs, outputs, trace):\n    return {'score': 0.25, 'passed': False, 'label': 'strict'}\n"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module", params=DATABASES)
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    url = request.getfixturevalue("postgres").database() if request.param == "postgres" else None
    settings = make_settings(
        tmp_path_factory.mktemp("shadow"), backend="process", admin_key=ADMIN, online_poll_s=0.05, database_url=url
    )
    with TestClient(create_app(settings)) as client:
        yield {"client": client, "engine": client.app.state.services.store.engine}  # type: ignore[attr-defined]


def _workspace(client: TestClient, name: str) -> tuple[str, dict[str, str]]:
    op = auth(ADMIN)
    ws = client.post("/v1/workspaces", json={"name": name}, headers=op).json()
    key = client.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "k"}, headers=op).json()["key"]
    return ws["id"], auth(key)


def _healthy(client: TestClient, h: dict[str, str]) -> None:
    """The service answers and still evaluates."""
    assert client.get("/healthz").json()["status"] == "ok"
    code = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
    result = client.post("/v1/evaluate", json={"language": "python", "code": code}, headers=h)
    assert result.status_code == 200 and result.json()["score"] == 1.0, result.text


def _evaluator(client: TestClient, h: dict[str, str]) -> str:
    made = client.post("/v1/evaluators", json={"name": "s", "language": "python", "code": V1}, headers=h)
    assert made.status_code == 201, made.text
    ev = str(made.json()["id"])
    again = client.put(f"/v1/evaluators/{ev}", json={"name": "s", "language": "python", "code": V2}, headers=h)
    assert again.status_code == 200 and again.json()["revision"] == 2, again.text
    return ev


def test_a_candidate_must_be_a_revision_of_the_rules_evaluator_and_null_clears_it(world: dict[str, Any]) -> None:
    client = world["client"]
    _, h = _workspace(client, "shadow-checks")
    ev = _evaluator(client, h)
    for bad in (3, 0, -1, 2**70, "two", 1.5):
        made = client.post("/v1/online-rules", json={"evaluator_id": ev, "candidate_revision": bad}, headers=h)
        assert made.status_code == 422, (bad, made.text)
    assert client.get("/v1/online-rules", headers=h).json()["count"] == 0
    made = client.post("/v1/online-rules", json={"evaluator_id": ev, "revision": 1, "candidate_revision": 2}, headers=h)
    assert made.status_code == 201 and made.json()["candidate_revision"] == 2, made.text
    rule_id = made.json()["id"]
    missing = client.patch(f"/v1/online-rules/{rule_id}", json={"candidate_revision": 9}, headers=h)
    assert missing.status_code == 422 and "revision 9 does not exist" in missing.json()["error"]["message"]
    assert client.get(f"/v1/online-rules/{rule_id}", headers=h).json()["candidate_revision"] == 2
    cleared = client.patch(f"/v1/online-rules/{rule_id}", json={"candidate_revision": None}, headers=h)
    assert cleared.status_code == 200 and cleared.json()["candidate_revision"] is None, cleared.text
    other = client.post("/v1/evaluators", json={"name": "o", "language": "python", "code": V1}, headers=h).json()
    made = client.post("/v1/online-rules", json={"evaluator_id": other["id"], "candidate_revision": 2}, headers=h)
    assert made.status_code == 422, made.text  # another evaluator has only revision 1
    _healthy(client, h)


def test_a_candidate_equal_to_the_revision_the_rule_scores_live_is_422_and_the_rule_unchanged(
    world: dict[str, Any],
) -> None:
    """A rule following the latest revision (the default) already scores a just-saved revision live: a candidate
    equal to it would compare a revision with itself (every target "the same", no flip) — refused, naming the fix."""
    client = world["client"]
    _, h = _workspace(client, "shadow-self")
    ev = _evaluator(client, h)  # revisions 1 and 2; 2 is the latest
    latest = client.post("/v1/online-rules", json={"evaluator_id": ev, "candidate_revision": 2}, headers=h)
    assert latest.status_code == 422 and latest.json()["error"]["type"] == "DefinitionError", latest.text
    assert '"revision": 1, "candidate_revision": 2' in latest.json()["error"]["message"]
    itself = {"evaluator_id": ev, "revision": 1, "candidate_revision": 1}
    pinned = client.post("/v1/online-rules", json=itself, headers=h)
    assert pinned.status_code == 422 and "scores live (revision: 1)" in pinned.json()["error"]["message"], pinned.text
    assert client.get("/v1/online-rules", headers=h).json()["count"] == 0
    rule_id = client.post("/v1/online-rules", json={"evaluator_id": ev}, headers=h).json()["id"]
    same = client.patch(f"/v1/online-rules/{rule_id}", json={"candidate_revision": 2}, headers=h)
    assert same.status_code == 422, same.text
    older = client.patch(f"/v1/online-rules/{rule_id}", json={"candidate_revision": 1}, headers=h)
    assert older.status_code == 200 and older.json()["candidate_revision"] == 1, older.text  # another revision
    onto = client.patch(f"/v1/online-rules/{rule_id}", json={"revision": 1}, headers=h)  # live onto the candidate
    assert onto.status_code == 422, onto.text
    pair = client.patch(f"/v1/online-rules/{rule_id}", json={"revision": 1, "candidate_revision": 2}, headers=h)
    assert pair.status_code == 200, pair.text
    rule = client.get(f"/v1/online-rules/{rule_id}", headers=h).json()
    assert (rule["revision"], rule["candidate_revision"]) == (1, 2)
    back = client.patch(f"/v1/online-rules/{rule_id}", json={"revision": None}, headers=h)  # latest is 2: itself
    assert back.status_code == 422, back.text
    rule = client.get(f"/v1/online-rules/{rule_id}", headers=h).json()
    assert (rule["revision"], rule["candidate_revision"]) == (1, 2)
    _healthy(client, h)


def test_promoting_without_a_candidate_is_409_and_an_unknown_rule_404(world: dict[str, Any]) -> None:
    client = world["client"]
    _, h = _workspace(client, "shadow-409")
    ev = _evaluator(client, h)
    rule_id = client.post("/v1/online-rules", json={"evaluator_id": ev}, headers=h).json()["id"]
    none = client.post(f"/v1/online-rules/{rule_id}/promote", headers=h)
    assert none.status_code == 409 and none.json()["error"]["type"] == "Conflict", none.text
    assert "no candidate revision" in none.json()["error"]["message"]
    shadow = client.get(f"/v1/online-rules/{rule_id}/shadow", headers=h)
    assert shadow.status_code == 200, shadow.text
    body = shadow.json()
    assert body["compared"] == 0 and body["candidate_revision"] is None and body["message"]  # never an empty success
    assert body["agreement_with_reviews"] is None and body["agreement_reason"]
    for url in ("/v1/online-rules/rule_nope/shadow", "/v1/online-rules/rule_nope/promote"):
        gone = client.get(url, headers=h) if url.endswith("shadow") else client.post(url, headers=h)
        assert gone.status_code == 404 and gone.json()["error"]["type"] == "NotFound", gone.text
    client.delete(f"/v1/online-rules/{rule_id}", headers=h)
    assert client.post(f"/v1/online-rules/{rule_id}/promote", headers=h).status_code == 404  # deleted


def test_another_workspaces_rule_is_not_found_and_left_as_it_was(world: dict[str, Any]) -> None:
    client = world["client"]
    _, mine = _workspace(client, "shadow-mine")
    _, theirs = _workspace(client, "shadow-theirs")
    ev = _evaluator(client, mine)
    body = {"evaluator_id": ev, "revision": 1, "candidate_revision": 2}
    rule_id = client.post("/v1/online-rules", json=body, headers=mine).json()["id"]
    for answer in (
        client.get(f"/v1/online-rules/{rule_id}/shadow", headers=theirs),
        client.post(f"/v1/online-rules/{rule_id}/promote", headers=theirs),
        client.patch(f"/v1/online-rules/{rule_id}", json={"candidate_revision": None}, headers=theirs),
    ):
        assert answer.status_code == 404 and answer.json()["error"]["type"] == "NotFound", answer.text
    rule = client.get(f"/v1/online-rules/{rule_id}", headers=mine).json()
    assert (rule["revision"], rule["candidate_revision"]) == (1, 2)


def test_hostile_shadow_queries_are_refused_and_the_service_stays_healthy(world: dict[str, Any]) -> None:
    client = world["client"]
    _, h = _workspace(client, "shadow-hostile")
    ev = _evaluator(client, h)
    rule_id = client.post("/v1/online-rules", json={"evaluator_id": ev}, headers=h).json()["id"]
    for query in ("examples=101", "examples=-1", "revision=0", f"revision={2**70}", "examples=x", "revision=1e9"):
        bad = client.get(f"/v1/online-rules/{rule_id}/shadow?{query}", headers=h)
        assert bad.status_code == 422, (query, bad.text)
    assert client.post(f"/v1/online-rules/{rule_id}/promote", json={"revision": 2}, headers=h).status_code == 409
    assert client.get(f"/v1/online-rules/{rule_id}/shadow?examples=0&revision=2", headers=h).status_code == 200
    _healthy(client, h)


def test_the_comparisons_agreement_uses_the_verdicts_on_the_rules_items(world: dict[str, Any]) -> None:
    client, engine = world["client"], world["engine"]
    ws, h = _workspace(client, "shadow-agree")
    ev = _evaluator(client, h)
    body = {"evaluator_id": ev, "revision": 1, "candidate_revision": 2}
    rule_id = client.post("/v1/online-rules", json=body, headers=h).json()["id"]
    answers = ["4", "4", "4", "5", "5"]
    traces = {chat_trace(engine, answer=a, workspace=ws): a for a in answers}

    def compared() -> dict[str, Any] | None:
        got = client.get(f"/v1/online-rules/{rule_id}/shadow", headers=h).json()
        return got if got["compared"] == len(traces) else None

    before = wait_until(compared, 120, 0.1, what="both revisions scored every trace")
    assert before["agreement_with_reviews"] is None and "no review verdicts" in before["agreement_reason"]
    assert before["flips"] == {"pass_to_fail": 3, "fail_to_pass": 0}
    assert before["mean_delta"] == pytest.approx(sum(0.25 - (1.0 if a == "4" else 0.0) for a in answers) / 5)
    queue = client.post(
        "/v1/review-queues", json={"name": "q", "source": {"rule_id": rule_id}, "sample": 1.0, "limit": 100}, headers=h
    ).json()
    items = client.get(f"/v1/review-queues/{queue['id']}/items", headers=h).json()["data"]
    assert len(items) == len(traces)
    # people pass the first "4" and fail every other answer: live revision 1 passed every "4"
    human = {}
    first_four = next(t for t, a in traces.items() if a == "4")
    for item in items:
        human[item["source"]["trace_id"]] = item["source"]["trace_id"] == first_four
        url = f"/v1/review-queues/{queue['id']}/items/{item['id']}/verdict"
        assert client.post(url, json={"passed": human[item["source"]["trace_id"]]}, headers=h).status_code in (200, 201)
    got = client.get(f"/v1/online-rules/{rule_id}/shadow", headers=h).json()
    agreement = got["agreement_with_reviews"]
    assert agreement is not None and got["agreement_reason"] is None, got
    live_said = {t: a == "4" for t, a in traces.items()}
    live_conf = {
        "tp": sum(1 for t in traces if live_said[t] and human[t]),
        "fp": sum(1 for t in traces if live_said[t] and not human[t]),
        "fn": sum(1 for t in traces if not live_said[t] and human[t]),
        "tn": sum(1 for t in traces if not live_said[t] and not human[t]),
    }
    assert agreement["live"]["confusion"] == live_conf == {"tp": 1, "fp": 2, "fn": 0, "tn": 2}
    assert agreement["live"]["accuracy"] == pytest.approx(3 / 5) and agreement["live"]["revision"] == 1
    # the candidate failed everything: right on the four people failed, wrong on the one they passed
    assert agreement["candidate"]["confusion"] == {"tp": 0, "fp": 0, "fn": 1, "tn": 4}
    assert agreement["candidate"]["accuracy"] == pytest.approx(4 / 5) and agreement["candidate"]["revision"] == 2
    assert agreement["candidate"]["by_label"]["strict"]["reviewed"] == 5
    assert agreement["live"]["reviewed"] == agreement["candidate"]["reviewed"] == 5


def test_a_candidate_that_raises_is_its_own_error_and_never_touches_the_live_scores(world: dict[str, Any]) -> None:
    client, engine = world["client"], world["engine"]
    ws, h = _workspace(client, "shadow-raises")
    made = client.post("/v1/evaluators", json={"name": "r", "language": "python", "code": V1}, headers=h).json()
    broken = "def evaluate(inputs, outputs, trace):\n    raise RuntimeError('candidate broke')\n"
    newer = {"name": "r", "language": "python", "code": broken}
    put = client.put(f"/v1/evaluators/{made['id']}", json=newer, headers=h)
    assert put.status_code == 200, put.text
    body = {"evaluator_id": made["id"], "revision": 1, "candidate_revision": 2}
    rule_id = client.post("/v1/online-rules", json=body, headers=h).json()["id"]
    traces = [chat_trace(engine, workspace=ws) for _ in range(3)]

    def compared() -> dict[str, Any] | None:
        got = client.get(f"/v1/online-rules/{rule_id}/shadow", headers=h).json()
        return got if got["compared"] == len(traces) else None

    got = wait_until(compared, 120, 0.1, what="the candidate's errors stored")
    assert got["errors"] == {"live": 0, "candidate": 3} and got["flips"] == {"pass_to_fail": 0, "fail_to_pass": 0}
    assert {e["candidate"]["status"] for e in got["examples"]} == {"error"}
    scores = client.get(f"/v1/online-rules/{rule_id}/scores", headers=h).json()["data"]
    assert sorted(s["trace_id"] for s in scores) == sorted(traces)
    assert {(s["status"], s["score"], s["revision"]) for s in scores} == {("ok", 1.0, 1)}
