"""The process backend never runs user code as root (issue 28, item 3).

When ``unshare`` is missing or refused (a root service in a container without CAP_SYS_ADMIN, a
seccomp profile refusing it), the backend falls to its rlimits-only mode. As root, that mode still
drops every worker to an unprivileged uid — or the service refuses to start, saying why and how to
fix it — and ``/healthz`` says who user code runs as.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.sandbox.process.backend import ProcessBackend
from evaluator_host.sandbox.process.uid_claims import claim
from evaluator_host.sandbox.strays import kill, of_uid
from tests.support import REPO
from tests.support.rlimits import reachable_python
from tests.support.service import assert_healthy, evaluate, make_settings

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the service must be root for this")

PY_WHO = (
    "import os\n\ndef evaluate(inputs, outputs, trace):\n"
    "    try:\n        shadow = open('/etc/shadow').read()[:4]\n"
    "    except OSError as exc:\n        shadow = type(exc).__name__\n"
    "    return {'score': 1, 'uid': os.getuid(), 'euid': os.geteuid(), 'shadow': shadow}\n"
)
JS_SHADOW = (
    "const fs = require('fs');\nfunction evaluate(inputs, outputs, trace) {\n"
    "  let shadow;\n  try { shadow = fs.readFileSync('/etc/shadow', 'utf8').slice(0, 4); }\n"
    "  catch (e) { shadow = e.code; }\n"
    "  return { score: 1, uid: process.getuid(), shadow };\n}\nmodule.exports = { evaluate };\n"
)


@pytest.fixture()
def cache_dir() -> Iterator[Path]:
    """A build cache the sandbox uid may read (the data dir stays private, 0700)."""
    path = Path(tempfile.mkdtemp(prefix="eh-cache-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture()
def no_unshare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A PATH without ``unshare``: the probe finds no namespaces, as on a machine without util-linux."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def _client(data_dir: Path, cache_dir: Path, **settings: object) -> TestClient:
    settings = {"python_executable": reachable_python(), **settings}
    return TestClient(create_app(make_settings(data_dir, backend="process", cache_dir=cache_dir, **settings)))


@pytest.mark.usefixtures("no_unshare")
def test_rlimits_mode_as_root_runs_user_code_as_an_unprivileged_uid(tmp_path: Path, cache_dir: Path) -> None:
    with _client(tmp_path / "data", cache_dir, default_policy="standard") as client:  # the uid, not the policy
        health = client.get("/healthz").json()
        assert health["isolation_details"]["mode"] == "rlimits"
        py = evaluate(client, PY_WHO)
        assert py["status"] == "ok", py["error"]
        assert py["details"]["uid"] != 0 and py["details"]["euid"] != 0
        assert py["details"]["shadow"] == "PermissionError"
        js = evaluate(client, JS_SHADOW, language="javascript")
        assert js["status"] == "ok", js
        assert js["details"]["uid"] != 0
        assert js["details"]["shadow"] == "EACCES"
        assert_healthy(client)


def test_healthz_says_who_user_code_runs_as(tmp_path: Path, cache_dir: Path) -> None:
    with _client(tmp_path / "data", cache_dir, process_isolation="rlimits") as client:
        details = client.get("/healthz").json()["isolation_details"]
        assert details["mode"] == "rlimits" and details["uid_drop"] is True
        assert details["user_code_as_root"] is False
        assert details["user"] == "an unprivileged uid per worker"
        assert "unprivileged uid per worker" in client.get("/healthz").json()["isolation"]
        py = evaluate(client, PY_WHO)
        assert py["runtime"]["policy"] == "restricted"  # the documented default in the rlimits-only mode
        assert py["status"] == "error" and "not on the import allowlist" in py["error"]["message"]


def test_the_rlimits_workers_private_directory_is_its_own_and_outside_the_data_dir(
    tmp_path: Path, cache_dir: Path
) -> None:
    code = (
        "import os\n\ndef evaluate(inputs, outputs, trace):\n"
        "    st = os.stat(os.getcwd())\n"
        "    return {'score': 1, 'cwd': os.getcwd(), 'owner': st.st_uid, 'uid': os.getuid(),\n"
        "            'mode': st.st_mode & 0o777}\n"
    )
    with _client(tmp_path / "data", cache_dir, process_isolation="rlimits", default_policy="standard") as client:
        result = evaluate(client, code)
        assert result["status"] == "ok", result
        details = result["details"]
        assert details["owner"] == details["uid"] != 0 and details["mode"] == 0o700
        assert not details["cwd"].startswith(str(tmp_path))
    run_dir = Path(details["cwd"]).parent
    assert run_dir.name.startswith("evaluator-host-rlimits-")  # not the `run` command's scratch prefix
    assert not run_dir.exists()  # removed at shutdown, with what the workers' uids left in it


def _start_backend_as(prefix: list[str], data_dir: Path, cache_dir: Path) -> subprocess.CompletedProcess[str]:
    script = (
        "import sys\nfrom pathlib import Path\n"
        "from evaluator_host.errors import BackendUnavailable\n"
        "from evaluator_host.sandbox.process.backend import ProcessBackend\n"
        "from evaluator_host.settings import Settings\n"
        "import asyncio\n"
        "try:\n"
        "    backend = ProcessBackend(Settings(data_dir=Path(sys.argv[1]), cache_dir=Path(sys.argv[2]),"
        " process_isolation='rlimits', python_executable=sys.argv[3]))\n"
        "except BackendUnavailable as exc:\n    print('REFUSED', exc)\nelse:\n"
        "    asyncio.run(backend.close())\n    print('STARTED')\n"
    )
    argv = [*prefix, sys.executable, "-c", script, str(data_dir), str(cache_dir), reachable_python()]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)


def test_a_root_service_that_cannot_change_uid_refuses_to_start(tmp_path: Path, cache_dir: Path) -> None:
    """Root without CAP_SETUID/CAP_SETGID (dropped from the bounding set): no uid drop, so no start."""
    drop = ["setpriv", "--bounding-set=-setuid,-setgid", "--inh-caps=-setuid,-setgid", "--"]
    done = _start_backend_as(drop, tmp_path / "data", cache_dir)
    assert done.stdout.startswith("REFUSED"), done.stdout + done.stderr
    assert "would run user code as root" in done.stdout and "CAP_SETUID" in done.stdout
    assert _start_backend_as([], tmp_path / "data2", cache_dir).stdout.startswith("STARTED")


def test_a_root_service_refuses_when_the_sandbox_uid_cannot_read_the_runtimes(tmp_path: Path) -> None:
    """The rlimits-only mode shows the host's own paths to the worker's uid: a private cache dir
    (under the 0700 test directory) cannot serve it, and the refusal names the path and the fix."""
    done = _start_backend_as([], tmp_path / "data", tmp_path / "private-cache")
    assert done.stdout.startswith("REFUSED"), done.stdout + done.stderr
    assert str(tmp_path / "private-cache" / "runtimes") in done.stdout
    assert "EVALUATOR_HOST_CACHE_DIR" in done.stdout
    assert json.dumps(str(tmp_path)) not in done.stderr  # a clean refusal, no traceback


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _processes_of(uid: int) -> list[int]:
    """Live processes (zombies are dead: they await their parent's wait) running with ``uid``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/status") as fh:
                    fields = dict(line.split(":", 1) for line in fh if ":" in line)
            except OSError:
                continue
            if str(uid) in fields.get("Uid", "").split() and fields.get("State", "Z").split()[0] not in "ZX":
                found.append(int(name))
    return found


def test_processes_an_rlimits_worker_leaves_behind_are_killed_by_its_uid(tmp_path: Path, cache_dir: Path) -> None:
    """No pid namespace in the rlimits-only mode: a detached process (double fork + setsid) of user code
    would outlive the call and hold the uid the next worker gets. The host kills every process of the
    worker's own uid after each batch (through pidfds) and before the uid is handed out again. The sleeps
    carry a duration of this run's own (``sleep 300.<random>``): what is looked for is this test's processes,
    not another test's sleep under a sandbox uid of the same number (two test processes run at once)."""
    mine = f"sleep 300.{secrets.randbelow(10**9):09d}"
    code = (
        "import os, subprocess\n\ndef evaluate(inputs, outputs, trace):\n"
        f"    subprocess.Popen(['sh', '-c', '(setsid {mine} &) ; {mine}'], start_new_session=True,\n"
        "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "    return {'score': 1, 'uid': os.getuid()}\n"
    )
    # uids of this test's own (the default base's are every other service's too, the other test process's
    # included): the last check, that nothing of the worker's uid is left, then looks at this service's only
    data = tmp_path / "data"
    with _client(
        data, cache_dir, process_isolation="rlimits", default_policy="standard", sandbox_uid_base=310_000
    ) as client:
        result = evaluate(client, code)
        assert result["status"] == "ok", result["error"]
        uid = result["details"]["uid"]
        assert uid >= 310_000
        assert uid != 0
        workers = client.get("/healthz").json()["workers"]
        assert workers["total"] >= 1  # the worker itself is still warm
        left = [pid for pid in _processes_of(uid) if mine in _cmdline(pid)]
        assert left == []
        assert_healthy(client)
    assert _processes_of(uid) == []  # the worker gone, nothing of its uid is left


_USERNS_SERVICE = """
import json, sys
from pathlib import Path
from fastapi.testclient import TestClient
from evaluator_host.api import create_app
from evaluator_host.settings import Settings

py = "import os\\n\\ndef evaluate(inputs, outputs, trace):\\n    return {'score': 1, 'uid': os.getuid()}\\n"
js = "function evaluate(i, o, t) { return { score: 1, uid: process.getuid() }; }\\nmodule.exports = { evaluate };\\n"
with TestClient(create_app(Settings(data_dir=Path(sys.argv[1]), backend="process", default_policy="standard"))) as c:
    out = {"health": c.get("/healthz").json()["isolation_details"]}
    for lang, code in (("python", py), ("javascript", js)):
        out[lang] = c.post("/v1/evaluate", json={"language": lang, "code": code}).json()
print(json.dumps(out))
"""


def test_a_root_service_without_cap_sys_admin_drops_user_code_to_a_sandbox_uid_in_its_user_namespace(
    tmp_path: Path,
) -> None:
    """Root without CAP_SYS_ADMIN (a container's default) where user namespaces work: the ``userns`` mode.
    It used to map the namespace's root to the host's root, so user code ran as the host's uid 0 (inside
    the minimal root); now the service writes the namespace's id maps and the worker drops to its uid."""
    drop = ["setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin", "--"]
    probe_only = "from evaluator_host.sandbox.process.isolation import probe; print(probe().mode)"
    mode = subprocess.run([*drop, sys.executable, "-c", probe_only], cwd=REPO, capture_output=True, text=True)
    if mode.stdout.strip() != "userns":
        pytest.skip(f"no user namespaces without CAP_SYS_ADMIN here ({mode.stdout.strip()} {mode.stderr[-300:]})")
    done = subprocess.run(
        [*drop, sys.executable, "-c", _USERNS_SERVICE, str(tmp_path / "data")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["health"]["mode"] == "userns" and out["health"]["user_code_as_root"] is False
    for lang in ("python", "javascript"):
        result = out[lang]["results"][0] if "results" in out[lang] else out[lang]
        assert result["status"] == "ok", result
        assert result["details"]["uid"] >= 200_000, result


def test_start_up_probes_run_as_a_uid_they_claimed_beside_a_reaper(tmp_path: Path, cache_dir: Path) -> None:
    """CI 74: a service's start-up probes (can a child drop to the sandbox uid? can that uid read the
    interpreter?) ran as ``sandbox_uid_base`` unclaimed. Another service holding that uid for a worker kills
    every process of it when the worker ends (rlimits mode: no pid namespace), and so killed a probe: the
    starting service refused to start. Here another holder keeps the base uid claimed and reaps it without
    pause while services start: each starts, and no process of theirs ran as the held uid."""
    base = 330_000  # a base no other test's service uses
    held = claim(base)
    assert held is not None, "a leftover holder of the test's uid"
    stop = threading.Event()
    reaped: list[int] = []

    def another_services_reaper() -> None:
        deadline = time.monotonic() + 120
        while not stop.is_set() and time.monotonic() < deadline:
            found = of_uid(base)
            reaped.append(len(found))
            for fd in found:
                with contextlib.suppress(OSError):
                    kill(fd)
                os.close(fd)

    reaper = threading.Thread(target=another_services_reaper, daemon=True)
    reaper.start()
    python = reachable_python()
    try:
        for n in range(5):
            settings = make_settings(
                tmp_path / f"data{n}", backend="process", process_isolation="rlimits", cache_dir=cache_dir,
                python_executable=python, sandbox_uid_base=base,
            )  # fmt: skip
            backend = ProcessBackend(settings)  # BackendUnavailable when a probe was killed
            asyncio.run(backend.close())
    finally:
        stop.set()
        reaper.join(timeout=30)
        os.close(held)
    assert len(reaped) > 10, "the reaper hardly looked: nothing was proven"
    assert sum(reaped) == 0, f"processes ran as the uid another holder had claimed: {sum(reaped)}"
