"""What holds in the process backend's rlimits-only mode when the restricted policy falls (issue 47, finding 1).

That mode has no private root and no network namespace: the policy was the main boundary, and an escape
from it read the host's files, listed its ``/tmp``, called the service's API and reached a loopback
server. Its workers now get a kernel boundary of their own: Landlock (files read-only beneath the
interpreter, runtime and harness, read-write beneath the worker's own directory; no TCP; no signal or
abstract socket out) and a seccomp filter refusing ``socket()``. An escape is simulated with the
``standard`` policy (user code as it would run had it got out of the restricted one): it can do nothing
of the above, while ordinary code still runs. ``runtimes/sandbox_landlock.py`` is also proven alone, in a
child process, without the seccomp filter.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.definitions.languages import RUNTIMES_DIR
from evaluator_host.sandbox.process.isolation import landlock_abi
from tests.support.hostile import ISSUE47_METRIC
from tests.support.rlimits import rlimits_overrides
from tests.support.service import assert_healthy, evaluate, make_settings

pytestmark = pytest.mark.skipif(landlock_abi() < 4, reason="needs Landlock ABI 4+ (files and TCP)")

#: User code that got out of the policy tries the host: a world-readable file outside its allowed set, the
#: host's /tmp, another process's /proc entry, a loopback server; and does what an evaluator may: write and
#: read back in its own directory.
ESCAPED = """
import os, socket

def attempt(fn):
    try:
        return fn()
    except OSError as exc:
        return type(exc).__name__

def connect(port):
    with socket.create_connection(('127.0.0.1', port), timeout=5):
        return 'connected'

def own():
    import tempfile
    with open('scratch.txt', 'w') as fh:
        fh.write('mine')
    with tempfile.NamedTemporaryFile('w+') as tmp:  # TMPDIR: the worker's own directory
        tmp.write('tmp')
        tmp.seek(0)
        assert tmp.read() == 'tmp' and not tmp.name.startswith('/tmp/tmp')
    with open('scratch.txt') as fh:
        return fh.read()

def evaluate(inputs, outputs, trace):
    return {
        'score': 1,
        'secret': attempt(lambda: open(inputs['secret']).read()),
        'tmp': attempt(lambda: len(os.listdir('/tmp'))),
        'proc1': attempt(lambda: open('/proc/1/cmdline').read()[:8]),
        'connect': attempt(lambda: connect(inputs['port'])),
        'own': attempt(own),
    }
"""


JS_TMP = (
    "const fs = require('fs'), os = require('os'), path = require('path');\n"
    "function evaluate(i, o, t) {\n  const file = path.join(os.tmpdir(), 'x.txt');\n"
    "  fs.writeFileSync(file, 'tmp');\n  return { score: 1, tmp: fs.readFileSync(file, 'utf8') };\n}\n"
    "module.exports = { evaluate };\n"
)


@pytest.fixture()
def host_secret() -> Iterator[Path]:
    """A world-readable file in a world-listable folder of the host's /tmp (readable by any uid)."""
    folder = Path(tempfile.mkdtemp(prefix="eh-host-secret-"))
    folder.chmod(0o755)
    secret = folder / "secret.txt"
    secret.write_text("host secret")
    secret.chmod(0o644)
    yield secret
    secret.unlink()
    folder.rmdir()


@pytest.fixture()
def loopback_server() -> Iterator[socket.socket]:
    """A TCP server on the host's loopback (the service's API or any local server stands for it)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


def _never_connected(server: socket.socket) -> bool:
    try:
        conn, _addr = server.accept()
    except BlockingIOError:
        return True
    conn.close()
    return False


def test_an_escape_in_rlimits_mode_reaches_no_host_file_tmp_proc_or_loopback(
    tmp_path: Path, host_secret: Path, loopback_server: socket.socket
) -> None:
    settings = make_settings(tmp_path / "data", backend="process", default_policy="standard", **rlimits_overrides())
    with TestClient(create_app(settings)) as client:
        details = client.get("/healthz").json()["isolation_details"]
        assert details["mode"] == "rlimits"
        assert details["landlock"]["enforced"] is True and details["landlock"]["abi"] == landlock_abi()
        assert "landlock" in details["summary"]
        port = loopback_server.getsockname()[1]
        answer = evaluate(client, ESCAPED, inputs={"secret": str(host_secret), "port": port})
        assert answer["status"] == "ok", answer
        found = answer["details"]
        assert found["secret"] == "PermissionError", found
        assert found["tmp"] == "PermissionError", found
        assert found["proc1"] == "PermissionError", found
        assert found["connect"] == "PermissionError", found
        assert found["own"] == "mine", found  # its own directory stays usable
        assert _never_connected(loopback_server)
        js = evaluate(client, JS_TMP, "javascript")
        assert js["status"] == "ok" and js["details"]["tmp"] == "tmp", js  # Node starts under the same confinement
        assert_healthy(client)


LANDLOCK_ALONE = """
import importlib.util, json, os, socket, sys
spec = importlib.util.spec_from_file_location('sandbox_landlock', sys.argv[1])
landlock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(landlock)
import ctypes
ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)  # no_new_privs: Landlock unprivileged
abi = landlock.restrict([sys.argv[2]], [sys.argv[3]])

def attempt(fn):
    try:
        return fn()
    except OSError as exc:
        return type(exc).__name__

def connect():
    with socket.create_connection(('127.0.0.1', int(sys.argv[5])), timeout=5):
        return 'connected'

def own():
    path = os.path.join(sys.argv[3], 'x')
    with open(path, 'w') as fh:
        fh.write('mine')
    with open(path) as fh:
        return fh.read()

print(json.dumps({'abi': abi, 'secret': attempt(lambda: open(sys.argv[4]).read()),
                  'tmp': attempt(lambda: len(os.listdir('/tmp'))), 'connect': attempt(connect), 'own': attempt(own)}))
"""


def test_landlock_alone_confines_files_and_tcp_without_the_seccomp_filter(
    tmp_path: Path, host_secret: Path, loopback_server: socket.socket
) -> None:
    """The Landlock layer on its own (a socket may be made, but TCP connect is refused by Landlock)."""
    own = tmp_path / "own"
    own.mkdir()
    prefix = str(Path(sys.executable).resolve().parents[1])
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", LANDLOCK_ALONE, str(RUNTIMES_DIR / "sandbox_landlock.py"), prefix,
         str(own), str(host_secret), str(loopback_server.getsockname()[1])],
        capture_output=True, text=True, timeout=60, env={"PATH": os.environ.get("PATH", "")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["abi"] == landlock_abi()
    assert found["secret"] == "PermissionError" and found["tmp"] == "PermissionError", found
    assert found["connect"] == "PermissionError", found
    assert found["own"] == "mine", found
    assert _never_connected(loopback_server)


def test_the_issue47_escape_is_refused_by_the_default_policy_of_the_rlimits_mode(tmp_path: Path) -> None:
    """Where restricted is the default (rlimits), the filed escape: refused by the policy, no ``id`` output."""
    settings = make_settings(tmp_path / "data", backend="process", **rlimits_overrides())
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").json()["policy"]["default"] == "restricted"
        answer = evaluate(client, ISSUE47_METRIC, inputs={"x": 1}, outputs="y")
        assert answer["runtime"]["policy"] == "restricted"
        assert "uid=" not in json.dumps(answer), answer
        assert answer["status"] == "error" and answer["error"]["type"] in ("RestrictedError", "TypeError"), answer
        assert_healthy(client)


def test_a_pinned_runtime_is_readable_under_landlock_in_rlimits_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime's own package folder is in the worker's read-only set: a pinned package imports."""
    from tests.support.package_index import loopback_index, wheel

    files = tmp_path / "index"
    files.mkdir()
    with loopback_index(files) as index:
        wheel(files, "llpinned", "1.0", {"llpinned/__init__.py": "VALUE = 41\n"})
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        settings = make_settings(tmp_path / "data", backend="process", **rlimits_overrides())
        with TestClient(create_app(settings)) as client:
            code = "import llpinned\n\ndef evaluate(i, o, t):\n    return {'score': 1, 'v': llpinned.VALUE + 1}\n"
            answer = evaluate(client, code, packages={"llpinned": "1.0"})
            assert answer["status"] == "ok" and answer["details"]["v"] == 42, answer
            assert_healthy(client)
