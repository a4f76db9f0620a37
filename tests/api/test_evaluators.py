"""/v1/evaluators: CRUD with immutable revisions, evaluation by id, auth."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from tests.support.service import make_settings

V1 = "def evaluate(inputs, outputs, trace):\n    return 0.25\n"
V2 = "def evaluate(inputs, outputs, trace):\n    return 0.75\n"


def _create(client: TestClient, code: str = V1, **extra: object) -> dict:  # type: ignore[type-arg]
    response = client.post("/v1/evaluators", json={"name": "half", "language": "python", "code": code, **extra})
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def test_create_get_list(client: TestClient) -> None:
    created = _create(client, description="a test")
    assert created["revision"] == 1 and created["interface"] == "evaluate"
    assert created["id"].startswith("ev_") and created["runtime_id"].startswith("python-")
    assert client.get(f"/v1/evaluators/{created['id']}").json()["code"] == V1
    listed = client.get("/v1/evaluators").json()
    assert listed["count"] == len(listed["data"]) and created["id"] in {e["id"] for e in listed["data"]}


def test_update_makes_a_new_revision_and_old_ones_stay_runnable(client: TestClient) -> None:
    ev = _create(client)
    updated = client.put(f"/v1/evaluators/{ev['id']}", json={"name": "half", "language": "python", "code": V2})
    assert updated.status_code == 200 and updated.json()["revision"] == 2
    revisions = client.get(f"/v1/evaluators/{ev['id']}/revisions").json()
    assert [r["revision"] for r in revisions["data"]] == [1, 2]
    assert revisions["data"][0]["code"] == V1
    latest = client.post(f"/v1/evaluators/{ev['id']}/evaluate", json={}).json()
    assert latest["score"] == 0.75 and latest["revision"] == 2 and latest["evaluator_id"] == ev["id"]
    old = client.post(f"/v1/evaluators/{ev['id']}/evaluate", json={"revision": 1}).json()
    assert old["score"] == 0.25 and old["revision"] == 1


def test_evaluate_by_id_with_cases(client: TestClient) -> None:
    ev = _create(client)
    body = client.post(f"/v1/evaluators/{ev['id']}/evaluate", json={"cases": [{}, {}]}).json()
    assert body["aggregate"]["count"] == 2 and body["revision"] == 1


def test_invalid_definition_is_422_and_not_stored(client: TestClient) -> None:
    before = client.get("/v1/evaluators").json()["count"]
    response = client.post("/v1/evaluators", json={"name": "x", "language": "python", "code": "def f(): pass\n"})
    assert response.status_code == 422
    assert client.get("/v1/evaluators").json()["count"] == before


def test_delete_then_404_and_unknown_revision(client: TestClient) -> None:
    ev = _create(client)
    assert client.post(f"/v1/evaluators/{ev['id']}/evaluate", json={"revision": 9}).status_code == 404
    assert client.delete(f"/v1/evaluators/{ev['id']}").status_code == 204
    assert client.get(f"/v1/evaluators/{ev['id']}").status_code == 404
    assert client.post(f"/v1/evaluators/{ev['id']}/evaluate", json={}).status_code == 404
    assert client.get("/v1/evaluators/ev_missing").json()["error"]["type"] == "NotFound"


def test_api_keys_guard_v1_but_not_healthz(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, api_keys=["k1", "k2"])
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/v1/evaluators").status_code == 401
        assert client.get("/v1/evaluators", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert client.get("/v1/evaluators", headers={"Authorization": "Bearer k2"}).status_code == 200


def test_store_survives_a_restart(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        ev = _create(client)
    with TestClient(create_app(settings)) as client:
        assert client.get(f"/v1/evaluators/{ev['id']}").json()["code"] == V1
        assert client.post(f"/v1/evaluators/{ev['id']}/evaluate", json={}).json()["score"] == 0.25


def test_calls_by_id_read_a_revision_once_and_see_every_update_and_delete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Revisions are immutable: after the first call by id, calls need no database read; a new
    revision (PUT) is what the next call runs, and a delete is a 404 at once."""
    from evaluator_host.store import EvaluatorStore

    reads: list[object] = []
    original = EvaluatorStore.get
    monkeypatch.setattr(EvaluatorStore, "get", lambda self, *a: reads.append(a) or original(self, *a))
    with TestClient(create_app(make_settings(tmp_path, backend="process"))) as client:
        ev = _create(client)
        url = f"/v1/evaluators/{ev['id']}/evaluate"
        assert [client.post(url, json={}).json()["score"] for _ in range(5)] == [0.25] * 5
        assert len(reads) <= 1
        assert client.put(f"/v1/evaluators/{ev['id']}", json={"name": "half", "language": "python", "code": V2})
        assert client.post(url, json={}).json()["score"] == 0.75  # the new latest revision
        assert client.post(url, json={"revision": 1}).json()["score"] == 0.25  # the old one still runs
        assert client.delete(f"/v1/evaluators/{ev['id']}").status_code == 204
        assert client.post(url, json={}).status_code == 404


def test_a_revisions_pre_warm_and_its_calls_by_id_bind_one_runnable_form_and_one_bound_evaluator(
    tmp_path: Path,
) -> None:
    """A revision's runnable form is made once: the pre-warm of its save and every later call by id pass the
    same object, so the evaluation path's cache of bound evaluators finds its entry by identity (no field-by-field
    comparison per call) and holds one bound evaluator for the revision, not one per path that bound it."""
    with TestClient(create_app(make_settings(tmp_path, backend="process"))) as client:
        services = client.app.state.services  # type: ignore[attr-defined]
        ev = _create(client)
        url = f"/v1/evaluators/{ev['id']}/evaluate"
        assert [client.post(url, json={}).json()["score"] for _ in range(3)] == [0.25] * 3
        assert client.post(url, json={"revision": 1}).json()["score"] == 0.25
        remembered = services.evaluators._records.get((ev["id"], 1))[1]  # the revision's one runnable form
        bound = [b for _key, b in services.evaluation._bound.items() if b.spec.load["code"] == V1]
        assert len(bound) == 1 and bound[0].prepared is remembered


def test_patch_changes_only_the_fields_given(client: TestClient) -> None:
    """Regression: PATCH answered 405 and PUT needs the whole definition."""
    ev = client.post(
        "/v1/evaluators",
        json={"name": "patchy", "language": "python", "code": V1, "description": "d", "settings": {"threshold": 0.2}},
    ).json()
    patched = client.patch(f"/v1/evaluators/{ev['id']}", json={"code": V2, "settings": {"timeout_s": 5}})
    assert patched.status_code == 200, patched.text
    body = patched.json()
    assert body["revision"] == 2 and body["code"] == V2
    assert body["name"] == "patchy" and body["description"] == "d"  # kept from revision 1
    assert body["settings"]["threshold"] == 0.2 and body["settings"]["timeout_s"] == 5  # merged key by key
    reset = client.patch(f"/v1/evaluators/{ev['id']}", json={"settings": {"threshold": None}}).json()
    assert reset["revision"] == 3 and reset["settings"]["threshold"] is None and reset["code"] == V2
    assert client.post(f"/v1/evaluators/{ev['id']}/evaluate", json={}).json()["score"] == 0.75
    bad = client.patch(f"/v1/evaluators/{ev['id']}", json={"settings": {"timeout_s": 999}})
    assert bad.status_code == 422 and "timeout_s" in bad.json()["error"]["message"]
    unknown = client.patch(f"/v1/evaluators/{ev['id']}", json={"colour": "red"})
    assert unknown.status_code == 422 and unknown.json()["error"]["type"] == "ValidationError"
    assert client.patch("/v1/evaluators/ev_nope", json={"code": V2}).status_code == 404


def test_an_unpinned_import_is_named_when_the_evaluator_is_saved(client: TestClient) -> None:
    """Regression: `import pandas` without a pin failed only at run time, with `No module named 'pandas'`."""
    code = "import pandas\n\ndef evaluate(inputs, outputs, trace):\n    return 1.0\n"
    saved = _create(client, code)
    assert saved["warnings"] and "'pandas'" in saved["warnings"][0] and '"pandas": "<version>"' in saved["warnings"][0]
    assert _create(client)["warnings"] == []
    result = client.post("/v1/evaluate", json={"language": "python", "code": code}).json()
    assert result["status"] == "error" and any("'pandas'" in w for w in result["warnings"])
