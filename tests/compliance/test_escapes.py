"""Escapes a red-team pass found (issue: close the holes a hostile user finds), one regression each.

The hostile table (test_hostile.py) covers limits every evaluator meets; these need a set-up of
their own: the real service process, an inherited descriptor, a second evaluator.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BACKENDS, assert_healthy, evaluate, serving

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
    from tests.conftest import make_settings

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
