"""``evaluator-host workspaces`` and ``keys`` against a real service, as an operator runs them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support import REPO, zygote
from tests.support.service import serving

ADMIN = "cli-operator-key"


def cli(server: str, *argv: str, key: str | None = ADMIN) -> subprocess.CompletedProcess[str]:
    extra = ["--server", server] + (["--admin-key", key] if key else [])
    command = [sys.executable, "-m", "evaluator_host.cli", *argv, *extra]
    return zygote.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)


def test_an_operator_creates_a_workspace_and_a_key_then_revokes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALUATOR_HOST_ADMIN_KEY", ADMIN)
    with serving(tmp_path, backend="process") as (client, _proc):
        server = str(client.base_url)
        made = cli(server, "workspaces", "create", "team-a", "--json")
        assert made.returncode == 0, made.stderr
        workspace = json.loads(made.stdout)
        listed = cli(server, "workspaces", "list", "--json")
        assert {json.loads(line)["name"] for line in listed.stdout.splitlines()} == {"default", "team-a"}
        updated = cli(
            server, "workspaces", "update", workspace["id"], "--quota", "max_concurrent_jobs=2",
            "--network-allow", "api.example.com:443", "--json",
        )  # fmt: skip
        assert updated.returncode == 0, updated.stderr
        assert json.loads(updated.stdout)["quotas"]["max_concurrent_jobs"] == 2
        assert json.loads(updated.stdout)["network_allow"] == ["api.example.com:443"]
        key = json.loads(cli(server, "keys", "create", workspace["id"], "--name", "ci", "--json").stdout)
        headers = {"Authorization": f"Bearer {key['key']}"}
        assert httpx.get(f"{server}/v1/evaluators", headers=headers).status_code == 200
        keys = cli(server, "keys", "list", workspace["id"], "--json").stdout
        assert key["id"] in keys and key["key"] not in keys
        assert cli(server, "keys", "revoke", key["id"]).returncode == 0
        assert httpx.get(f"{server}/v1/evaluators", headers=headers).status_code == 401

        # the tables (piped: no terminal width) never cut the key shown once, nor ids to copy
        table = cli(server, "keys", "create", workspace["id"], "--name", "table").stdout
        (shown,) = re.findall(r"evh_[A-Za-z0-9_-]+", table)
        assert httpx.get(f"{server}/v1/evaluators", headers={"Authorization": f"Bearer {shown}"}).status_code == 200
        listed = cli(server, "keys", "list").stdout
        assert key["id"] in listed and workspace["id"] in listed and "…" not in listed


def test_without_the_operator_key_the_command_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVALUATOR_HOST_ADMIN_KEY", raising=False)
    done = cli("http://127.0.0.1:9", "workspaces", "list", key=None)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "evaluator-host: error: the operator key is needed: --admin-key or EVALUATOR_HOST_ADMIN_KEY"
    )


def test_adopt_default_gives_a_key_that_sees_what_was_made_before_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EVALUATOR_HOST_ADMIN_KEY", raising=False)
    monkeypatch.delenv("EVALUATOR_HOST_API_KEYS", raising=False)
    code = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
    with serving(tmp_path, backend="process") as (client, _proc):  # an open service: no keys yet
        made = client.post("/v1/evaluators", json={"name": "before-keys", "language": "python", "code": code})
        assert made.status_code == 201, made.text
    monkeypatch.setenv("EVALUATOR_HOST_ADMIN_KEY", ADMIN)
    with serving(tmp_path, backend="process") as (client, _proc):  # keys turned on
        server = str(client.base_url)
        team = json.loads(cli(server, "workspaces", "create", "team-b", "--json").stdout)
        other = json.loads(cli(server, "keys", "create", team["id"], "--json").stdout)["key"]
        seen = httpx.get(f"{server}/v1/evaluators", headers={"Authorization": f"Bearer {other}"}).json()["data"]
        assert seen == []  # the data made before is not in a new workspace
        adopted = cli(server, "workspaces", "adopt-default", "--rename", "legacy-team", "--key-name", "me")
        assert adopted.returncode == 0, adopted.stderr
        assert "ws_default" in adopted.stderr and "before keys were turned on" in adopted.stderr
        (key,) = re.findall(r"evh_[A-Za-z0-9_-]+", adopted.stdout)
        data = httpx.get(f"{server}/v1/evaluators", headers={"Authorization": f"Bearer {key}"}).json()["data"]
        assert [e["id"] for e in data] == [made.json()["id"]]
        listed = [json.loads(line) for line in cli(server, "workspaces", "list", "--json").stdout.splitlines()]
        assert {"ws_default": "legacy-team"}.items() <= {w["id"]: w["name"] for w in listed}.items()
        # a name another workspace has: the 409 names it, and nothing was made
        clash = cli(server, "workspaces", "adopt-default", "--rename", "team-b")
        assert clash.returncode != 0 and team["id"] in clash.stderr, clash.stderr
        keys = [json.loads(line) for line in cli(server, "keys", "list", "ws_default", "--json").stdout.splitlines()]
        assert [k["name"] for k in keys] == ["me"]
