"""Two services on one database (SQLite file, PostgreSQL): what one changes about workspaces is in
force on the other — a revoked key is refused, a workspace's quotas and a changed secret apply —
after the other's periodic sync (``SYNC_S``, shortened here), and at once on the one that changed it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

from evaluator_host import services
from evaluator_host.api import create_app
from tests.support.service import make_settings
from tests.support.wait import wait_until

ADMIN = {"Authorization": "Bearer operator-key-for-tests"}
CODE = "import os\n\ndef evaluate(inputs, outputs, trace):\n    return float(len(os.environ['TOKEN']))\n"


def until(check: Callable[[], bool], seconds: float = 10) -> None:
    wait_until(check, seconds, what="the change in force on the other service")


def test_a_change_through_one_service_is_in_force_on_another_sharing_its_database(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(services, "SYNC_S", 0.1)
    shared = {"backend": "process", "database_url": database_url, "admin_key": ADMIN["Authorization"][7:],
              "secrets_key": [Fernet.generate_key().decode()], "spare_workers": 0}  # fmt: skip
    with (
        TestClient(create_app(make_settings(tmp_path / "a", **shared))) as a,
        TestClient(create_app(make_settings(tmp_path / "b", **shared))) as b,
    ):
        ws = a.post("/v1/workspaces", json={"name": "team"}, headers=ADMIN).json()
        made = a.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "k"}, headers=ADMIN).json()
        key = {"Authorization": f"Bearer {made['key']}"}
        assert a.put("/v1/secrets/TOKEN", json={"value": "first-value"}, headers=key).status_code == 204
        body = {"name": "e", "language": "python", "code": CODE, "secrets": ["TOKEN"]}
        evaluator = b.post("/v1/evaluators", json=body, headers=key)  # B knows A's key and secret
        assert evaluator.status_code == 201, evaluator.text
        path = f"/v1/evaluators/{evaluator.json()['id']}/evaluate"
        assert b.post(path, json={"outputs": 1}, headers=key).json()["score"] == len("first-value")
        generation = b.app.state.services.vault.generation  # type: ignore[attr-defined]

        # a changed secret: B binds its evaluator again with the new value
        assert a.put("/v1/secrets/TOKEN", json={"value": "second-value"}, headers=key).status_code == 204
        until(lambda: b.app.state.services.vault.generation != generation)  # type: ignore[attr-defined]
        assert b.post(path, json={"outputs": 1}, headers=key).json()["score"] == len("second-value")

        # quotas set through A are enforced by B's pool
        quotas = {"quotas": {"max_warm_workers": 1}}
        assert a.patch(f"/v1/workspaces/{ws['id']}", json=quotas, headers=ADMIN).status_code == 200
        caps = b.app.state.services.pool.workspace_caps  # type: ignore[attr-defined]
        until(lambda: caps.get(ws["id"]) == 1)

        # a key revoked through A: refused by A at once, by B after its sync (its cache included)
        assert a.delete(f"/v1/keys/{made['id']}", headers=ADMIN).status_code == 204
        assert a.get("/v1/evaluators", headers=key).status_code == 401
        until(lambda: b.post(path, json={"outputs": 1}, headers=key).status_code == 401)
        assert b.get("/v1/evaluators", headers=key).status_code == 401


def test_a_secret_stored_under_another_services_key_is_a_clear_422_not_a_crash(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Services (or worker hosts) sharing a database must share ``SECRETS_KEY``; one that was given
    another key says so, naming the secret and the setting, instead of failing on the ciphertext."""
    monkeypatch.setattr(services, "SYNC_S", 0.1)
    common = {"backend": "process", "database_url": database_url, "admin_key": ADMIN["Authorization"][7:]}
    key_a, key_b = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    with (
        TestClient(create_app(make_settings(tmp_path / "a", **common, secrets_key=[key_a]))) as a,
        TestClient(create_app(make_settings(tmp_path / "b", **common, secrets_key=[key_b]))) as b,
    ):
        ws = a.post("/v1/workspaces", json={"name": "team"}, headers=ADMIN).json()
        made = a.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "k"}, headers=ADMIN).json()
        key = {"Authorization": f"Bearer {made['key']}"}
        assert a.put("/v1/secrets/TOKEN", json={"value": "first-value"}, headers=key).status_code == 204
        body = {"language": "python", "code": CODE, "secrets": ["TOKEN"], "outputs": 1}
        assert a.post("/v1/evaluate", json=body, headers=key).json()["score"] == len("first-value")
        answer = b.post("/v1/evaluate", json=body, headers=key)
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert error["type"] == "SecretError"
        assert "'TOKEN' cannot be decrypted" in error["message"] and "EVALUATOR_HOST_SECRETS_KEY" in error["message"]
        assert "first-value" not in answer.text
