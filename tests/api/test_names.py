"""Names (issue 34, 5): a repeated evaluator name is saved, its answer naming the others' ids; a
repeated workspace name is a 409 naming the existing id; each revision carries its own save time."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from tests.support.service import make_settings

ADMIN = "operator-key-names"
OP = {"Authorization": f"Bearer {ADMIN}"}
CODE = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    settings = make_settings(tmp_path_factory.mktemp("names"), backend="process", admin_key=ADMIN)
    with TestClient(create_app(settings)) as client:
        ws = client.post("/v1/workspaces", json={"name": "names-team"}, headers=OP).json()
        key = client.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "ci"}, headers=OP).json()["key"]
        yield {"client": client, "ws": ws, "h": {"Authorization": f"Bearer {key}"}}


def test_a_repeated_evaluator_name_is_saved_with_a_warning_naming_the_other(service: dict[str, Any]) -> None:
    client, h = service["client"], service["h"]
    first = client.post("/v1/evaluators", json={"name": "exact match", "language": "python", "code": CODE}, headers=h)
    assert first.status_code == 201 and first.json()["same_name"] == [], first.text
    second = client.post("/v1/evaluators", json={"name": "Exact Match ", "language": "python", "code": CODE}, headers=h)
    assert second.status_code == 201, second.text
    assert second.json()["same_name"] == [first.json()["id"]]
    # a new revision of the first under its own name warns too (the second still has it)
    again = client.put(
        f"/v1/evaluators/{first.json()['id']}",
        json={"name": "exact match", "language": "python", "code": CODE},
        headers=h,
    )
    assert again.status_code == 200 and again.json()["same_name"] == [second.json()["id"]]
    # renaming one away: no warning
    renamed = client.patch(f"/v1/evaluators/{second.json()['id']}", json={"name": "exact match v2"}, headers=h)
    assert renamed.status_code == 200 and renamed.json()["same_name"] == []
    # a patch that does not touch the name does not look
    other = client.patch(f"/v1/evaluators/{first.json()['id']}", json={"description": "d"}, headers=h)
    assert other.status_code == 200 and other.json()["same_name"] == [], other.text
    assert client.get(f"/v1/evaluators/{first.json()['id']}", headers=h).json()["same_name"] == []  # saves only
    mine = {first.json()["id"], second.json()["id"]}  # (the module's other tests save evaluators in this workspace)
    names = sorted(e["name"] for e in client.get("/v1/evaluators", headers=h).json()["data"] if e["id"] in mine)
    assert names == ["exact match", "exact match v2"]


def test_a_repeated_workspace_name_is_a_409_naming_the_existing_id(service: dict[str, Any]) -> None:
    client, ws = service["client"], service["ws"]
    again = client.post("/v1/workspaces", json={"name": " Names-Team"}, headers=OP)
    assert again.status_code == 409, again.text
    error = again.json()["error"]
    assert error["type"] == "Conflict" and error["existing_id"] == ws["id"] and ws["id"] in error["message"]
    other = client.post("/v1/workspaces", json={"name": "other-team"}, headers=OP)
    assert other.status_code == 201, other.text
    clash = client.patch(f"/v1/workspaces/{other.json()['id']}", json={"name": "names-team"}, headers=OP)
    assert clash.status_code == 409 and clash.json()["error"]["existing_id"] == ws["id"]
    same = client.patch(f"/v1/workspaces/{ws['id']}", json={"name": "Names-Team"}, headers=OP)
    assert same.status_code == 200 and same.json()["name"] == "Names-Team"  # its own name, re-cased
    names = [w["name"] for w in client.get("/v1/workspaces", headers=OP).json()["data"]]
    assert [n.casefold() for n in names].count("names-team") == 1 and names.count("other-team") == 1
    assert client.get("/healthz").status_code == 200


def test_each_revision_carries_its_own_save_time(service: dict[str, Any]) -> None:
    client, h = service["client"], service["h"]
    body = {"name": "timed", "language": "python", "code": CODE}
    made = client.post("/v1/evaluators", json=body, headers=h).json()
    client.patch(f"/v1/evaluators/{made['id']}", json={"description": "second"}, headers=h)
    revisions = client.get(f"/v1/evaluators/{made['id']}/revisions", headers=h).json()["data"]
    assert [r["revision"] for r in revisions] == [1, 2]
    first, second = revisions
    assert first["created_at"] == second["created_at"] == made["created_at"]  # the evaluator's
    assert first["updated_at"] == made["updated_at"]  # revision 1's own save time
    assert datetime.fromisoformat(second["updated_at"]) >= datetime.fromisoformat(first["updated_at"])
    latest = client.get(f"/v1/evaluators/{made['id']}", headers=h).json()
    assert latest["updated_at"] == second["updated_at"]
