"""npm installs run in the build sandbox on the process backend too, and a finished runtime is root's
(issue 28, item 1: the gaps its first pass left).

npm packages come from a loopback registry the test serves (``tests/support/npm_registry.py``), named
by the operator's npm setting (``npm_config_registry``, which the service reads with ``npm config``);
Python packages from a loopback index (``tests/support/package_index.py``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.builds import build_sandbox
from evaluator_host.errors import BuildError
from evaluator_host.sandbox.process.isolation import probe
from evaluator_host.sandbox.process.runtimes import RuntimeBuilder
from tests.support.backends import BACKENDS
from tests.support.npm_registry import loopback_registry
from tests.support.package_index import loopback_index, wheel
from tests.support.service import assert_healthy, evaluate, make_settings


@pytest.fixture(scope="module")
def namespaces() -> None:
    """These tests are about the build sandbox: the machine must have namespaces."""
    mode = probe().mode
    if mode == "rlimits":
        pytest.skip("no namespaces here: the process backend has no build sandbox (rlimits mode)")


def _descends_from_me(pid: int) -> bool:
    me = os.getpid()
    for _ in range(64):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False
        pid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        if pid == me:
            return True
        if pid <= 1:
            return False
    return False


def _npm_uids() -> list[int]:
    """Real uids of the npm processes this test process started (seen from the host's /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            status = (entry / "status").read_text()
        except OSError:
            continue
        if b"npm-cli.js" in cmdline and _descends_from_me(int(entry.name)):
            found.append(int(next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))))
    return found


@pytest.mark.usefixtures("namespaces")
@pytest.mark.parametrize("kind", ["tarball", "git"])
def test_an_npm_dependency_on_a_host_that_is_not_the_registry_is_refused_and_never_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Regression (issue 28, 1): npm ran on the host as the service's user (root): ``--ignore-scripts``
    kept package scripts from running, but a pin whose package.json depends on a tarball or git URL had
    npm fetch it from that host, with the host's network and npm settings, before the lock check refused
    it. Now npm runs in the build sandbox, whose one way out reaches the registry only: the build is
    refused naming the host, and that host sees no request at all."""
    if kind == "git" and shutil.which("git") is None:
        pytest.skip("no git here")
    with loopback_registry() as registry, loopback_registry() as elsewhere:
        elsewhere.add("evil", "1.0.0", {"index.js": "module.exports = 'evil'\n"})
        url = f"{elsewhere.url}tarballs/evil-1.0.0.tgz" if kind == "tarball" else f"git+{elsewhere.url}evil.git"
        registry.add("innocent", "1.0.0", {"index.js": "module.exports = 1\n"}, {"evil": url})
        monkeypatch.setenv("npm_config_registry", registry.url)
        builder = RuntimeBuilder(make_settings(tmp_path / "data", backend="process"))
        with pytest.raises(BuildError) as refused:
            asyncio.run(builder.ensure("javascript", {"innocent": "1.0.0"}))
        assert elsewhere.asked == [], elsewhere.asked  # not one request reached the other host
        assert "/innocent" in registry.asked, registry.asked  # the registry itself, through the relay
    message = refused.value.message
    assert f"127.0.0.1:{elsewhere.port} is not a configured package index" in message, message
    leftovers = [p.name for p in (tmp_path / "data" / "runtimes").iterdir() if not p.name.endswith(".lock")]
    assert leftovers == [], leftovers


# Reports who owns the runtime's files and which of them anyone but their owner may write.
JS_OWNERS = """
const fs = require('fs'), path = require('path')
const tiny = require('tinyjs')
function walk(dir, seen) {
  for (const name of fs.readdirSync(dir)) {
    const p = path.join(dir, name), st = fs.lstatSync(p)
    seen.uids.add(st.uid)
    if (!st.isSymbolicLink() && (st.mode & 0o7022)) seen.writable.push(p)
    if (st.isDirectory()) walk(p, seen)
  }
}
function evaluate(inputs, outputs, trace) {
  const seen = { uids: new Set(), writable: [] }
  const top = path.dirname(path.dirname(path.dirname(require.resolve('tinyjs'))))
  walk(top, seen)
  return { score: tiny.double(0.25), uids: [...seen.uids], writable: seen.writable, top }
}
"""

PY_OWNERS = """
import os, stat
import plainowned

def evaluate(inputs, outputs, trace):
    top = os.path.dirname(os.path.dirname(os.path.dirname(plainowned.__file__)))
    uids, writable = set(), []
    for parent, dirs, names in os.walk(top):
        for name in dirs + names:
            info = os.lstat(os.path.join(parent, name))
            uids.add(info.st_uid)
            if not stat.S_ISLNK(info.st_mode) and info.st_mode & 0o7022:
                writable.append(os.path.join(parent, name))
    return {"score": plainowned.VALUE, "uids": sorted(uids), "writable": writable, "top": top}
"""


@pytest.mark.usefixtures("namespaces")
def test_an_npm_install_runs_as_the_build_uid_and_its_runtime_is_roots_and_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (issue 28, 1): npm ran as the host's root. Now it runs in the build sandbox at the
    build uid (npm's own process, seen from the host while the registry answers it), the finished
    runtime is handed to root (no file the build uid's, none writable by anyone else), and a JS
    evaluator uses the package."""
    settings = make_settings(tmp_path / "data", backend="process")
    uids: list[int] = []
    with loopback_registry() as registry:
        registry.add("tinyjs", "1.0.0", {"index.js": "exports.double = (x) => 2 * x\n"})
        registry.on_tarball = lambda: uids.extend(_npm_uids())
        monkeypatch.setenv("npm_config_registry", registry.url)
        with TestClient(create_app(settings)) as client:
            result = evaluate(client, JS_OWNERS, "javascript", packages={"tinyjs": "1.0.0"})
            assert result["status"] == "ok" and result["score"] == 0.5, result
            assert any(path.startswith("/tarballs/tinyjs") for path in registry.asked), registry.asked
            builder = client.app.state.services.backend.builder  # type: ignore[attr-defined]
            expected = builder.build_uid()
            assert_healthy(client)
    build_uid = build_sandbox.build_uid(settings.sandbox_uid_base)
    if expected is not None:  # root here: the sandbox changes uid
        assert uids and set(uids) == {build_uid}, (uids, build_uid)
    else:
        assert uids and 0 not in uids, uids
    details = result["details"]
    assert build_uid not in details["uids"] and details["writable"] == [], details
    if os.geteuid() == 0:
        assert details["uids"] == [0], details


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_built_runtime_is_roots_and_writable_by_no_one_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """Regression (issue 28, 1): after a build in the sandbox the runtime's files stayed the build uid's
    (process backend: its partial ``site/``; docker: the image's ``/opt/evaluator``), writable by the uid
    every later build runs as. Now the finished runtime is root's before it is put in place (chowned,
    links themselves; group/other write and setuid/setgid bits dropped): the evaluator, walking its own
    runtime, finds no file of the build uid and none anyone but root may write."""
    files = tmp_path / "index"
    files.mkdir()
    version = f"1.0.{uuid.uuid4().int % 10**8}"  # a runtime no earlier run built (docker images stay)
    wheel(files, "plainowned", version, {"plainowned/__init__.py": "VALUE = 0.5\n"})
    settings = make_settings(tmp_path / "data", backend=backend)
    with loopback_index(files) as index:
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        with TestClient(create_app(settings)) as client:
            builder = client.app.state.services.backend.builder  # type: ignore[attr-defined]
            try:
                result = evaluate(client, PY_OWNERS, packages={"plainowned": version})
                assert result["status"] == "ok" and result["score"] == 0.5, result
                assert_healthy(client)
            finally:
                builder.remove(builder.runtime_for("python", {"plainowned": version}))
    details = result["details"]
    assert details["uids"] and build_sandbox.build_uid(settings.sandbox_uid_base) not in details["uids"], details
    assert details["writable"] == [], details
    if os.geteuid() == 0:
        assert details["uids"] == [0], details
