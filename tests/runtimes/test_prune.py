"""runtimes list | prune on the process backend: a runtime a live worker runs on is never removed.

The ``.used`` mark is only written when a worker starts, so a worker warm for weeks would leave
its runtime looking idle: live workers (bound and spare) hold a lease on it instead, which the
prune (another process: the command line) respects. A service whose runtime was pruned while no
worker held it builds it again on its next use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api.app import create_app
from evaluator_host.sandbox.inventory import RuntimeInfo, prune
from evaluator_host.sandbox.process.runtimes import RuntimeBuilder
from tests.support import REPO, zygote
from tests.support.service import make_settings
from tests.support.wait import wait_until

CODE = "import six\n\ndef evaluate(inputs, outputs, trace):\n    return 1.0\n"
BODY = {"language": "python", "code": CODE, "packages": {"six": "1.16.0"}}
FORTY_DAYS = 40 * 86400


def cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EVALUATOR_HOST_DATA_DIR": str(data_dir)}
    argv = [sys.executable, "-m", "evaluator_host.cli", "runtimes", *args, "--backend", "process"]
    return zygote.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def age(data_dir: Path, rid: str) -> None:
    """Make the runtime look unused for 40 days (its last-use mark and its build)."""
    stamp = time.time() - FORTY_DAYS
    root = data_dir / "runtimes"
    (root / f"{rid}.used").touch()
    os.utime(root / f"{rid}.used", (stamp, stamp))
    manifest = root / rid / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "created_at": stamp}))


@pytest.mark.network
def test_a_runtime_with_a_live_worker_is_kept_however_old_its_last_use(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path, backend="process"))) as client:
        rid = client.post("/v1/evaluate", json=BODY).json()["runtime"]["id"]
        age(tmp_path, rid)  # the worker has been warm "for 40 days"
        listed = [json.loads(line) for line in cli(tmp_path, "list", "--json").stdout.splitlines()]
        assert [(r["id"], r["in_use"]) for r in listed] == [(rid, True)]
        assert client.get(f"/v1/runtimes/{rid}").json()["in_use"] is True
        pruned = cli(tmp_path, "prune", "--unused-days", "30")
        assert pruned.returncode == 0 and f"in use, kept {rid}" in pruned.stdout, pruned
        assert (tmp_path / "runtimes" / rid / "manifest.json").exists()
        assert f"in use, kept {rid}" in cli(tmp_path, "prune", "--all").stdout  # not even --all
        assert client.post("/v1/evaluate", json=BODY).json()["status"] == "ok"
    # the service is gone, its workers with it: now the old runtime goes
    pruned = cli(tmp_path, "prune", "--unused-days", "30")
    assert f"removed {rid}" in pruned.stdout, pruned
    assert not (tmp_path / "runtimes" / rid).exists()
    assert cli(tmp_path, "list", "--json").stdout == ""


@pytest.mark.network
def test_recent_runtimes_stay_and_named_ones_go(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path, backend="process"))) as client:
        rid = client.post("/v1/runtimes", json={"language": "python", "packages": {"six": "1.16.0"}}).json()["id"]
        wait_until(lambda: client.get(f"/v1/runtimes/{rid}").json()["status"] != "building", 60, 0.1)
    assert cli(tmp_path, "prune").stdout == "process: nothing to prune (1 runtimes, none unused that long)\n"
    assert f"removed {rid}" in cli(tmp_path, "prune", "--runtime", rid).stdout


@pytest.mark.network
def test_a_runtime_pruned_under_a_service_is_built_again_on_its_next_use(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, backend="process", idle_ttl_s=0.5)
    builder = RuntimeBuilder(settings)  # another process's view of the same cache (its own lock files)
    with TestClient(create_app(settings)) as client:
        rid = client.post("/v1/evaluate", json=BODY).json()["runtime"]["id"]
        # the idle worker and the spare expire (idle_ttl_s): no lease left
        wait_until(lambda: not builder.in_use(rid), 30, 0.1, what="the runtime's workers to go idle")
        assert builder.remove(rid)
        again = client.post("/v1/evaluate", json=BODY)
        assert again.status_code == 200 and again.json()["status"] == "ok", again.text
        assert again.headers["x-runtime-build"].startswith(f"built; runtime={rid}")


def test_prune_rule_keeps_in_use_and_recent_and_asks_remove_last() -> None:
    now = 1_000_000_000.0
    old = now - FORTY_DAYS
    runtimes = [
        RuntimeInfo("a", "python", {}, last_used=old),
        RuntimeInfo("b", "python", {}, last_used=old, in_use=True),
        RuntimeInfo("c", "python", {}, last_used=now - 3600),
        RuntimeInfo("d", "python", {}, created_at=old),
        RuntimeInfo("e", "python", {}, last_used=old),
    ]
    asked: list[str] = []

    def remove(rid: str) -> bool:  # "e" came into use between the listing and the removal
        asked.append(rid)
        return rid != "e"

    outcomes = prune(runtimes, remove, unused_days=30, now=now)
    assert [(o.id, o.action) for o in outcomes] == [
        ("a", "removed"),
        ("b", "in use, kept"),
        ("d", "removed"),
        ("e", "in use, kept"),
    ]
    assert asked == ["a", "d", "e"]
