"""Escapes a red-team pass found (issue: close the holes a hostile user finds), one regression each.

The hostile table (test_hostile.py) covers limits every evaluator meets; these need a set-up of
their own: the real service process, an inherited descriptor, a second evaluator.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.backends import BACKENDS
from tests.support.service import assert_healthy, evaluate, serving
from tests.support.wait import wait_until

CANARY = "canary-7f3a91"

READ_FD = {
    "python": (
        "import os\n\ndef evaluate(inputs, outputs, trace):\n"
        "    try:\n        return {{'score': 0, 'leak': os.pread({fd}, 64, 0).decode()}}\n"
        "    except OSError as e:\n        return {{'score': 1, 'error': str(e)}}\n"
    ),
    "javascript": (
        "const fs = require('fs')\nfunction evaluate(inputs, outputs, trace) {{\n"
        "  try {{ const b = Buffer.alloc(64); const n = fs.readSync({fd}, b, 0, 64, 0)\n"
        "    return {{ score: 0, leak: b.toString('utf8', 0, n) }} }}\n"
        "  catch (e) {{ return {{ score: 1, error: String(e) }} }}\n}}\n"
    ),
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_descriptors_the_service_inherited_never_reach_user_code(tmp_path: Path, backend: str) -> None:
    """Regression: started with ``exec 7</root/x`` in its shell, the service's workers read fd 7 (the
    event loop's spawn ignored ``close_fds``). The sandbox closes every descriptor but its channel."""
    secret = tmp_path / "secret"
    secret.write_text(CANARY)
    fd = os.open(secret, os.O_RDONLY)
    os.set_inheritable(fd, True)
    try:
        with serving(tmp_path / "data", backend, pass_fds=(fd,)) as (client, _proc):
            for language, code in READ_FD.items():
                body: dict[str, Any] = {"language": language, "code": code.format(fd=fd)}
                result = client.post("/v1/evaluate", json=body).json()
                assert result["status"] == "ok", result
                assert CANARY not in str(result) and result["score"] == 1.0, (language, result)
    finally:
        os.close(fd)


HOST_ETC = [p for p in ("/etc/pip.conf", "/etc/npmrc", "/etc/machine-id", "/etc/hostname") if os.path.isfile(p)]
LIST_ETC = {
    "python": (
        "import os\n\ndef evaluate(inputs, outputs, trace):\n    seen = {}\n"
        "    for path in inputs['paths']:\n        try:\n            seen[path] = open(path).read()\n"
        "        except OSError:\n            pass\n"
        "    return {'score': 1, 'seen': seen, 'etc': sorted(os.listdir('/etc'))}\n"
    ),
    "javascript": (
        "const fs = require('fs')\nfunction evaluate(inputs, outputs, trace) {\n  const seen = {}\n"
        "  for (const p of inputs.paths) { try { seen[p] = fs.readFileSync(p, 'utf8') } catch (e) {} }\n"
        "  return { score: 1, seen, etc: fs.readdirSync('/etc').sort() }\n}\n"
    ),
}


@pytest.mark.parametrize("language", list(LIST_ETC))
def test_the_hosts_etc_is_not_visible(client: Any, language: str) -> None:
    """Regression: the process sandbox bound the host's whole /etc (pip.conf and npmrc hold index
    credentials on many machines). Only what the C library needs is there, and nothing of the host's."""
    result = evaluate(client, LIST_ETC[language], language, inputs={"paths": HOST_ETC})
    assert result["status"] == "ok", result
    seen = result["details"]["seen"]
    for path in HOST_ETC:
        host = Path(path).read_text()
        assert seen.get(path) != host, f"{path} of the host is readable in the sandbox"
    if client.get("/healthz").json()["backend"] == "process":
        allowed = {"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives", "passwd", "group"}
        assert set(result["details"]["etc"]) <= allowed | {"nsswitch.conf"}, result["details"]["etc"]


COUNT_OTHERS = {
    "python": (
        "import os\n\ndef _live(p):\n    try:\n"
        "        return open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[0] != 'Z'\n"
        "    except OSError:\n        return False\n\n"
        "def others():\n    return [p for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, os.getpid())"
        " and _live(p)]\n"
    ),
    "javascript": (
        "const fs = require('fs')\nconst live = (p) => { try { return !/^\\d+ \\(.*\\) Z/.test("
        "fs.readFileSync(`/proc/${p}/stat`, 'utf8')) } catch { return false } }\n"
        "const others = () => fs.readdirSync('/proc').filter((p) => /^\\d+$/.test(p) && "
        "![process.pid, 1].includes(Number(p)) && live(p))\n"
    ),
}
BYPASS_THE_HARNESS = {
    # the harness's own reaper replaced through gc, then a detached busy process
    "python": COUNT_OTHERS["python"]
    + (
        "import gc, subprocess\n\ndef evaluate(inputs, outputs, trace):\n    if inputs.get('spawn'):\n"
        "        for o in gc.get_objects():\n            if type(o).__name__ == 'Harness':\n"
        "                type(o).reap_strays = lambda self: None\n"
        "        subprocess.Popen(['sh', '-c', 'while :; do :; done'], start_new_session=True)\n"
        "        return 1\n    return {'score': 1, 'others': len(others())}\n"
    ),
    # a ChildProcess made directly: none of the wrapped child_process functions is called
    "javascript": COUNT_OTHERS["javascript"]
    + (
        "const { ChildProcess } = require('child_process')\nfunction evaluate(inputs, o, t) {\n"
        "  if (inputs.spawn) { const c = new ChildProcess(); c.spawn({ file: '/bin/sh', args: ['sh', '-c', "
        "'while :; do :; done'], stdio: ['ignore', 'ignore', 'ignore'], detached: true }); c.unref(); return 1 }\n"
        "  return { score: 1, others: others().length }\n}\n"
    ),
}


@pytest.mark.parametrize("language", list(BYPASS_THE_HARNESS))
def test_processes_survive_no_call_even_when_user_code_disables_the_harness_reaper(client: Any, language: str) -> None:
    """Regression: the reaper ran inside user code (Python replaced it through gc; Node's
    ``new ChildProcess().spawn`` avoided the wrapped functions), so a background process was alive
    on the next call. The host now kills every process but the init and the harness after each batch."""
    code = BYPASS_THE_HARNESS[language]
    first = evaluate(client, code, language, inputs={"spawn": True})
    assert first["status"] == "ok", first
    for _ in range(3):  # the same warm worker, call after call
        result = evaluate(client, code, language)
        assert result["status"] == "ok" and result["details"]["others"] == 0, result
    assert_healthy(client)


CHILDREN_TOUCH_MEMORY = (
    "import os\n\ndef evaluate(inputs, outputs, trace):\n    kids = []\n    for _ in range(16):\n"
    "        pid = os.fork()\n        if pid == 0:\n            block = bytearray(60 * 1024 * 1024)\n"
    "            for i in range(0, len(block), 4096):\n                block[i] = 1\n            os._exit(0)\n"
    "        kids.append(pid)\n    for pid in kids:\n        os.waitpid(pid, 0)\n    return 1\n"
)


def test_memory_is_limited_for_the_whole_worker_not_per_process(client: Any) -> None:
    """Regression: with memory_mb 32, 16 children each touched 60 MiB (~1 GiB in all) and the call
    answered ok (RLIMIT_AS is per process). A memory cgroup bounds the worker as a whole."""
    result = evaluate(client, CHILDREN_TOUCH_MEMORY, settings={"memory_mb": 32, "timeout_s": 20})
    assert result["status"] == "memory_limit", result
    assert_healthy(client)


KEYRING_AND_NAMESPACES = {
    "python": (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n\n"
        "def call(nr, *args):\n    r = libc.syscall(nr, *args)\n    return 0 if r >= 0 else ctypes.get_errno()\n\n"
        "def evaluate(inputs, outputs, trace):\n"
        "    add_key = call(248, b'user', b'leak', b'secret-inputs', 13, ctypes.c_int(-4))\n"  # KEY_SPEC_USER_KEYRING
        "    keyctl = call(250, 0, ctypes.c_int(-4), 0)\n"  # KEYCTL_GET_KEYRING_ID
        "    unshare = call(272, 0x10000000 | 0x00020000 | 0x40000000)\n"  # NEWUSER | NEWNS | NEWNET
        "    return {'score': 1, 'add_key': add_key, 'keyctl': keyctl, 'unshare': unshare}\n"
    ),
}


def test_keyrings_and_new_namespaces_are_refused(client: Any) -> None:
    """Regression: evaluator A add_key'd its inputs to the user keyring and evaluator B, on the same
    uid slot later, read them back; unshare(NEWUSER|NEWNS|NEWNET) succeeded inside the sandbox. A
    seccomp filter (Docker's default profile on docker) refuses keyrings and new namespaces."""
    result = evaluate(client, KEYRING_AND_NAMESPACES["python"])
    assert result["status"] == "ok", result
    details = result["details"]
    assert details["add_key"] != 0 and details["keyctl"] != 0 and details["unshare"] != 0, details
    assert_healthy(client)


def test_a_worker_uid_is_not_reused_while_an_old_one_is_fresh(tmp_path: Path) -> None:
    """uids are handed out oldest-freed first: a new worker never gets the uid the last one just had."""
    import asyncio

    from evaluator_host.sandbox.base import RuntimeKey
    from evaluator_host.sandbox.process.backend import ProcessBackend
    from tests.support.service import make_settings

    async def go() -> list[int]:
        backend = ProcessBackend(make_settings(tmp_path))
        uids = []
        try:
            for _ in range(3):
                worker = await backend.start_worker(RuntimeKey("python", None, 64))
                uids.append(backend._free_slots[0])  # the next uid a worker would get
                await worker.kill()
        finally:
            await backend.close()
        return uids

    nexts = asyncio.run(go())
    assert len(set(nexts)) == 3  # each start took the oldest free uid; the freed one went to the back


FORGE_FRAMES = {
    # frame-shaped bytes on the harness's channel: three "results" during row 0
    "python": (
        "import gc, json, os, struct\n\ndef _channel():\n"
        "    return next(o for o in gc.get_objects() if type(o).__name__ == 'Harness')._out\n\n"
        "def forge(value, index):\n    data = json.dumps({'type': 'result', 'index': index, 'status': 'ok', "
        "'value': value}).encode()\n    os.write(_channel(), struct.pack('>I', len(data)) + data)\n\n"
        "def evaluate(inputs, outputs, trace):\n    if inputs['i'] == 0:\n        for k in range(3):\n"
        "            forge(0.777, k)\n    return inputs['i'] / 10\n"
    ),
    "javascript": (
        "const fs = require('fs')\nfunction forge(value, index) {\n"
        "  const body = Buffer.from(JSON.stringify({ type: 'result', index, status: 'ok', value }))\n"
        "  const head = Buffer.alloc(4); head.writeUInt32BE(body.length)\n"
        "  fs.writeSync(4, Buffer.concat([head, body]))\n}\n"
        "function evaluate(inputs, outputs, trace) {\n"
        "  if (inputs.i === 0) for (let k = 0; k < 3; k++) forge(0.777, k)\n"
        "  return inputs.i / 10\n}\n"
    ),
}


def _eight_row_job(client: Any, language: str, code: str) -> list[dict[str, Any]]:
    """The result rows of a job of ``code`` over rows ``{"i": 0}`` to ``{"i": 7}``, which must succeed."""
    ev = client.post("/v1/evaluators", json={"name": f"forge-{language}", "language": language, "code": code}).json()
    job = client.post("/v1/jobs", json={"evaluator_id": ev["id"], "rows": [{"i": i} for i in range(8)]}).json()
    state = wait_until(
        lambda: (s := client.get(f"/v1/jobs/{job['id']}").json())["status"] not in ("queued", "running") and s, 120
    )
    assert state["status"] == "succeeded", state
    rows: list[dict[str, Any]] = client.get(f"/v1/jobs/{job['id']}/results").json()["data"]
    return rows


@pytest.mark.parametrize("language", list(FORGE_FRAMES))
def test_forged_frames_cannot_set_or_shift_other_rows(client: Any, language: str) -> None:
    """Regression: frame-shaped bytes written to the channel set rows 0-2 of a job to 0.777 and shifted
    rows 3-7 by three. Replies carry the request's id and index: a foreign frame is an error on the row
    being run, the worker is replaced, and every other row gets its own result."""
    rows = _eight_row_job(client, language, FORGE_FRAMES[language])
    assert rows[0]["result"]["status"] == "error" and rows[0]["result"]["error"]["type"] == "ProtocolError"
    assert [r["result"]["score"] for r in rows[1:]] == [i / 10 for i in range(1, 8)], rows
    assert_healthy(client)


# A Python evaluator can read the running request's id and index off the harness's frame: during row 0
# (nothing held yet) it forges a "results" frame the host must refuse (more rows than pending, or malformed).
FORGE_RESULTS = (
    "import json, os, struct, sys\n\n"
    "def forge(extra):\n"
    "    serve = sys._getframe(3)\n"
    "    harness, request, index = serve.f_locals['self'], serve.f_locals['request'], serve.f_locals['index']\n"
    "    frame = {'type': 'results', 'id': request, 'index': index, **extra}\n"
    "    data = json.dumps(frame).encode()\n"
    "    os.write(harness._out, struct.pack('>I', len(data)) + data)\n\n"
    "def evaluate(inputs, outputs, trace):\n"
    "    if inputs['i'] == 0:\n"
    "        forge(FORGED)\n"
    "    return inputs['i'] / 10\n"
)


@pytest.mark.parametrize(
    "forged",
    [
        {"values": [0.777] * 500, "durations": [0.0] * 500},  # more rows than the chunk has pending
        {"values": "not a list", "durations": [0.0]},
        {"values": [0.777, 0.777], "durations": [0.0]},  # lengths differ
        {"values": [0.777], "durations": ["0.5"]},  # a duration that is not a number
        {"values": [], "durations": []},
    ],
    ids=["too-many", "not-a-list", "lengths-differ", "string-duration", "empty"],
)
def test_a_forged_results_frame_is_a_protocol_error_on_its_row_alone(client: Any, forged: dict[str, Any]) -> None:
    rows = _eight_row_job(client, "python", FORGE_RESULTS.replace("FORGED", repr(forged)))
    assert [r["index"] for r in rows] == list(range(8))
    assert rows[0]["result"]["status"] == "error" and rows[0]["result"]["error"]["type"] == "ProtocolError", rows[0]
    assert [r["result"]["score"] for r in rows[1:]] == [i / 10 for i in range(1, 8)], rows
    assert_healthy(client)


LATE_FRAME = (
    "import gc, json, os, struct, threading, time\n\n"
    "def _late():\n    time.sleep(1.0)\n"
    "    out = next(o for o in gc.get_objects() if type(o).__name__ == 'Harness')._out\n"
    "    data = json.dumps({'type': 'result', 'index': 0, 'status': 'ok', 'value': 0.999}).encode()\n"
    "    os.write(out, struct.pack('>I', len(data)) + data)\n\n"
    "def evaluate(inputs, outputs, trace):\n    if inputs.get('arm'):\n"
    "        threading.Thread(target=_late, daemon=True).start()\n    return inputs['score']\n"
)


def test_a_frame_written_after_its_call_reaches_no_later_caller(client: Any) -> None:
    """Regression: a thread writing 1 s after its call gave the next caller 0.999 and the caller after
    that the previous caller's result. A worker that speaks while idle is replaced before anyone's call."""
    first = evaluate(client, LATE_FRAME, inputs={"arm": True, "score": 0.1})
    assert first["status"] == "ok" and first["score"] == 0.1
    time.sleep(4.0)  # the thread has written by now (1 s after the call began, then a scan of the heap)
    for score in (0.2, 0.3):
        later = evaluate(client, LATE_FRAME, inputs={"score": score})
        assert later["status"] == "ok" and later["score"] == score, later
    assert_healthy(client)


def test_a_huge_js_definition_does_not_freeze_other_tenants(client: Any) -> None:
    """Regression: ``'import"a";' * 26208`` sent as JavaScript stalled the event loop for 9 s (the
    inspector ran on it, and the CommonJS rewrite was quadratic), turning other tenants' calls into
    timeouts. Inspection runs on threads of its own and is linear in the code's size."""
    import threading

    hostile = 'import"a";' * 26208 + "\nfunction evaluate(inputs, outputs, trace) { return 1 }\n"
    answers: dict[str, Any] = {}

    def send_hostile() -> None:
        answers["hostile"] = client.post("/v1/evaluate", json={"language": "javascript", "code": hostile})

    thread = threading.Thread(target=send_hostile)
    thread.start()
    others = [
        evaluate(client, f"def evaluate(inputs, outputs, trace):\n    return {i}\n", settings={"timeout_s": 1})
        for i in range(5)
    ]
    thread.join(120)
    assert [r["status"] for r in others] == ["ok"] * 5 and [r["score"] for r in others] == [0, 1, 2, 3, 4]
    hostile_answer = answers["hostile"]
    assert hostile_answer.status_code == 200, hostile_answer.text  # parsed in full, not given up on
    assert hostile_answer.json()["status"] == "error"  # the module "a" does not exist: a load error
    assert_healthy(client)


def test_slow_builds_never_hold_up_other_requests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: seven one-off evaluations pinning slow builds held every thread of the shared
    pool, and another tenant's GET /v1/evaluators took 44 s. Builds run on threads of their own
    (``max_concurrent_builds`` at once, the rest queued)."""
    import threading

    from fastapi.testclient import TestClient

    from evaluator_host.api import create_app
    from evaluator_host.errors import BuildError
    from evaluator_host.sandbox.process.runtimes import RuntimeBuilder
    from tests.support.service import make_settings

    gate, entered = threading.Event(), threading.Semaphore(0)

    def slow_build(self: RuntimeBuilder, rid: str, language: str, pins: dict[str, str]) -> Any:
        entered.release()
        gate.wait(60)  # an install that takes as long as the test wants
        raise BuildError("no such package here", runtime_id=rid, output="")

    monkeypatch.setattr(RuntimeBuilder, "build", slow_build)
    with TestClient(create_app(make_settings(tmp_path, backend="process"))) as client:
        code = "def evaluate(inputs, outputs, trace):\n    return 1\n"
        statuses: list[int] = []

        def one(i: int) -> None:
            body = {"language": "python", "code": code, "packages": {f"slow-package-{i}": "1.0.0"}}
            statuses.append(client.post("/v1/evaluate", json=body).status_code)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(7)]
        for thread in threads:
            thread.start()
        for _ in range(2):
            assert entered.acquire(timeout=30)  # two builds are running, five queue behind them
        listed: list[int] = []
        reader = threading.Thread(target=lambda: listed.append(client.get("/v1/evaluators").status_code))
        reader.start()
        reader.join(20)  # a liveness bound, far above the milliseconds it takes
        answered_while_building = list(listed)
        gate.set()
        for thread in threads + [reader]:
            thread.join(60)
        assert answered_while_building == [200]  # answered while every build was still stuck
        assert statuses == [422] * 7


MIB_EACH = "def evaluate(inputs, outputs, trace):\n    return {'score': 1, 'blob': 'x' * (1024 * 1024 - 64)}\n"


def test_a_call_whose_results_pile_up_is_refused_not_held(client: Any) -> None:
    """Regression: 400 cases each returning 1 MiB made a 420 MB response (service RSS ~720 MB). The
    replies of one call add up to max_response_bytes at most; past it the call is a 422."""
    body = {"language": "python", "code": MIB_EACH, "cases": [{"outputs": i} for i in range(400)]}
    answer = client.post("/v1/evaluate", json=body)
    assert answer.status_code == 422, answer.text[:300]
    error = answer.json()["error"]
    assert error["type"] == "ResponseTooLarge" and "MAX_RESPONSE_BYTES" in error["message"]
    assert_healthy(client)


LOUD_ROW = (
    "import sys\n\ndef evaluate(inputs, outputs, trace):\n    print('o' * (500 * 1024))\n"
    "    sys.stderr.write('e' * (500 * 1024))\n    return {'score': 1, 'blob': 'x' * (900 * 1024)}\n"
)


def test_a_jobs_stored_rows_are_bounded(client: Any) -> None:
    """Regression: a 40-row job from a ~1 KB request grew the database by 144.5 MiB (3.6 MiB a row).
    A stored row is cut to max_stored_result_bytes (64 KiB): stdout/stderr first, then details."""
    ev = client.post("/v1/evaluators", json={"name": "loud", "language": "python", "code": LOUD_ROW}).json()
    job = client.post("/v1/jobs", json={"evaluator_id": ev["id"], "rows": [{"i": i} for i in range(40)]}).json()
    state = wait_until(
        lambda: (s := client.get(f"/v1/jobs/{job['id']}").json())["status"] not in ("queued", "running") and s, 180, 0.1
    )
    assert state["status"] == "succeeded" and state["progress"]["done"] == 40, state
    lines = client.get(f"/v1/jobs/{job['id']}/results", params={"format": "ndjson"}).text.splitlines()
    assert len(lines) == 40
    for line in lines:
        result = json.loads(line)["result"]
        assert len(json.dumps(result)) < 80 * 1024 and result["truncated"] is True, len(json.dumps(result))
        assert result["status"] == "ok" and result["score"] == 1.0  # the score survives the cut
        assert any("max_stored_result_bytes" in w for w in result["warnings"])


EVIL_BACKEND = """
import os
def _pwn():
    with open({canary!r}, "w") as fh:
        fh.write(f"uid={{os.getuid()}} env={{sorted(os.environ)}}")
def get_requires_for_build_wheel(config_settings=None):
    _pwn(); return []
def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _pwn(); raise RuntimeError("pwned")
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _pwn(); raise RuntimeError("pwned")
def build_sdist(sdist_directory, config_settings=None):
    _pwn(); raise RuntimeError("pwned")
"""


def _evil_sdist(folder: Path, canary: Path) -> None:
    """``evil-1.0.tar.gz``: an sdist whose in-tree build backend writes ``canary`` when pip builds it."""
    import io
    import tarfile

    files = {
        "evil-1.0/pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
        '[project]\nname = "evil"\nversion = "1.0"\n',
        "evil-1.0/backend.py": EVIL_BACKEND.format(canary=str(canary)),
        "evil-1.0/PKG-INFO": "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n",
    }
    with tarfile.open(folder / "evil-1.0.tar.gz", "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_package_pin_never_runs_package_code_at_install(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a pinned sdist with an in-tree build backend ran at install time as root, with the
    service's environment, on the host (process backend) or in the build box. With source builds
    turned off, installs take wheels only: the pin is a clear 422 saying why, and the code never
    runs. (Source builds are on by default since issue 28, in the build sandbox:
    tests/sandbox/test_build_sandbox.py.)"""
    from fastapi.testclient import TestClient

    from evaluator_host.api import create_app
    from tests.support.service import make_settings

    index = tmp_path / "index"
    index.mkdir()
    canary = tmp_path / "canary"
    _evil_sdist(index, canary)
    index.chmod(0o755)
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("EVH_TEST_CANARY_SECRET", "do-not-leak")
    settings = make_settings(tmp_path / "data", backend=backend, allow_sdist_builds=False)
    with TestClient(create_app(settings)) as client:
        body = {
            "language": "python",
            "packages": {"evil": "1.0"},
            "code": "def evaluate(inputs, outputs, trace):\n    return 1\n",
        }
        answer = client.post("/v1/evaluate", json=body)
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert error["type"] == "BuildError" and "ALLOW_SDIST_BUILDS" in error["message"], error
        assert not canary.exists(), canary.read_text()
        assert_healthy(client)


@pytest.mark.skipif(os.geteuid() != 0, reason="uids of their own need root")
def test_two_services_on_one_machine_never_give_live_workers_the_same_uid(tmp_path: Path) -> None:
    """Found by the attack pass: two process-backend services both handed out uids from
    sandbox_uid_base, so their live workers shared a uid (and its process limit). A uid is
    claimed machine-wide while a worker of any service holds it."""
    from fastapi.testclient import TestClient

    from evaluator_host.api import create_app
    from tests.support.service import make_settings

    code = "import os\n\ndef evaluate(inputs, outputs, trace):\n    return {'score': 1, 'uid': os.getuid()}\n"
    with (
        TestClient(create_app(make_settings(tmp_path / "a", backend="process"))) as a,
        TestClient(create_app(make_settings(tmp_path / "b", backend="process"))) as b,
    ):
        uids_a = {evaluate(a, code + f"# {i}\n")["details"]["uid"] for i in range(3)}
        uids_b = {evaluate(b, code + f"# {i}\n")["details"]["uid"] for i in range(3)}
        assert uids_a and uids_b and not uids_a & uids_b, (uids_a, uids_b)


def test_the_sandbox_config_is_not_in_any_command_line(client: Any, data_dir: Path) -> None:
    """Found by the attack pass: /proc/1/cmdline showed the init's whole config (data dir and
    repository paths, binds, uid). The config reaches the bootstrap on stdin instead."""
    code = (
        "import os\n\ndef evaluate(inputs, outputs, trace):\n    seen = []\n"
        "    for p in os.listdir('/proc'):\n        if p.isdigit():\n            try:\n"
        "                seen.append(open(f'/proc/{p}/cmdline', 'rb').read().decode(errors='replace'))\n"
        "            except OSError:\n                pass\n    return {'score': 1, 'cmdlines': seen}\n"
    )
    result = evaluate(client, code)
    assert result["status"] == "ok", result
    cmdlines = "\n".join(result["details"]["cmdlines"])
    assert str(data_dir) not in cmdlines and "cgroup" not in cmdlines, cmdlines[:500]
