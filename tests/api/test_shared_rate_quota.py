"""Issue 54: a workspace's ``max_evaluations_per_s`` holds across services on one PostgreSQL database — two
services share one bucket (``rate_buckets``), so together they grant the rate, not twice it."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

from evaluator_host import services
from evaluator_host.api import create_app
from tests.support.backends import postgres_only
from tests.support.pg import Cluster
from tests.support.service import make_settings
from tests.support.wait import wait_until

ADMIN = {"Authorization": "Bearer operator-key-for-tests"}
CODE = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"


@postgres_only
def test_a_workspaces_rate_quota_is_one_bucket_shared_by_two_services_on_one_postgresql(
    tmp_path: Path, postgres: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    database_url = postgres.database()
    monkeypatch.setattr(services, "SYNC_S", 0.1)
    shared = {"backend": "process", "database_url": database_url, "admin_key": ADMIN["Authorization"][7:],
              "secrets_key": [Fernet.generate_key().decode()], "spare_workers": 0}  # fmt: skip
    with (
        TestClient(create_app(make_settings(tmp_path / "a", **shared))) as a,
        TestClient(create_app(make_settings(tmp_path / "b", **shared))) as b,
    ):
        # a rate so low that no refill is worth a token while the test runs: 4 tokens in all, 1 per 1000 s
        ws = a.post("/v1/workspaces", json={"name": "team"}, headers=ADMIN).json()
        quotas = {"quotas": {"max_evaluations_per_s": 0.001}}
        assert a.patch(f"/v1/workspaces/{ws['id']}", json=quotas, headers=ADMIN).status_code == 200
        made = a.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "k"}, headers=ADMIN).json()
        key = {"Authorization": f"Bearer {made['key']}"}
        rate = lambda: b.app.state.services.workspaces.get(ws["id"]).quotas.get("max_evaluations_per_s")  # noqa: E731
        wait_until(lambda: rate() == 0.001, 30, what="B to know the workspace's quota")
        body = {"language": "python", "code": CODE, "outputs": 1}
        # the bucket holds 1 token (at least one); A spends it, so B, sharing it, has none left
        assert a.post("/v1/evaluate", json=body, headers=key).status_code == 200
        refused = b.post("/v1/evaluate", json=body, headers=key)
        assert refused.status_code == 429, refused.text  # main: B's own full bucket ran it (200)
        assert "max_evaluations_per_s" in refused.text
        assert a.post("/v1/evaluate", json=body, headers=key).status_code == 429
        # both still serve (the quota refused calls, nothing else)
        assert a.get("/healthz").status_code == 200 and b.get("/healthz").status_code == 200
