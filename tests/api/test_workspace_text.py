"""What PostgreSQL refuses and SQLite keeps is answered alike on both for workspaces, keys, quotas
and secrets: a NUL in a name or an infinite quota is a 422 (never a 500 on one database only), and
two first puts of one secret at once store one row."""

from __future__ import annotations

import threading
from pathlib import Path

from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.store.db import make_engine
from evaluator_host.store.secrets import SecretStore
from evaluator_host.store.workspaces import WorkspaceStore
from tests.support.service import make_settings

ADMIN = {"Authorization": "Bearer operator-key-for-tests"}


def test_nul_names_and_infinite_quotas_are_422_on_either_database(tmp_path: Path, database_url: str) -> None:
    settings = make_settings(
        tmp_path, backend="process", database_url=database_url, admin_key=ADMIN["Authorization"][7:]
    )
    with TestClient(create_app(settings)) as client:
        refused = client.post("/v1/workspaces", json={"name": "team\x00b"}, headers=ADMIN)
        assert refused.status_code == 422 and refused.json()["error"]["type"] == "ValidationError"
        ws = client.post("/v1/workspaces", json={"name": "team"}, headers=ADMIN).json()
        assert client.patch(f"/v1/workspaces/{ws['id']}", json={"name": "\x00"}, headers=ADMIN).status_code == 422
        assert client.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "k\x00"}, headers=ADMIN).status_code == 422
        infinite = b'{"quotas": {"max_evaluations_per_s": Infinity}}'
        answer = client.patch(
            f"/v1/workspaces/{ws['id']}", content=infinite, headers={**ADMIN, "content-type": "application/json"}
        )
        assert answer.status_code == 422, answer.text
        listed = client.get("/v1/workspaces", headers=ADMIN).json()["data"]
        assert sorted(w["name"] for w in listed) == ["default", "team"]
        assert client.get(f"/v1/workspaces/{ws['id']}", headers=ADMIN).json()["quotas"]["max_evaluations_per_s"] is None


def test_first_puts_of_one_secret_at_once_store_one_row(database_url: str) -> None:
    engine = make_engine(database_url)
    workspace = WorkspaceStore(engine).create("w").id
    store = SecretStore(engine)
    for attempt in range(10):
        name = f"RACE_{attempt}"
        barrier = threading.Barrier(2)
        created: list[bool] = []

        def put(value: str, name: str, barrier: threading.Barrier, created: list[bool]) -> None:
            barrier.wait()
            created.append(store.put(workspace, name, value))

        threads = [threading.Thread(target=put, args=(v, name, barrier, created)) for v in ("token-1", "token-2")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sorted(created) == [False, True]  # one created it, the other replaced its value
        assert [s.name for s in store.names(workspace)].count(name) == 1
    engine.dispose()
