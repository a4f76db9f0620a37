"""Installs resolve first and run package code only in the build sandbox, on both backends (issue 28, item 1).

Every package here comes from a loopback index the test starts (``tests/support/package_index.py``),
named by the operator's pip setting (``PIP_INDEX_URL``, which the service reads with ``pip config``).
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.builds import build_relay
from evaluator_host.shared import unix_sockets
from tests.support.backends import BACKENDS
from tests.support.package_index import loopback_index, sdist_with_backend, wheel
from tests.support.service import assert_healthy, evaluate, make_settings
from tests.support.wait import wait_until

# What an sdist's build may try: read the service's secrets, write outside its folders, reach a host
# that is not the index (directly, and through the proxy it is given), read credentials, know its uid.
PROBE = """
import json, os, socket

def probe():
    seen = {{"uid": os.getuid(), "euid": os.geteuid()}}
    with open("/proc/self/status") as fh:
        seen["cap_eff"] = [line.split()[1] for line in fh if line.startswith("CapEff")][0]
    try:
        open({secret!r}).read()
        seen["secret"] = "read"
    except OSError as exc:
        seen["secret"] = type(exc).__name__
    try:
        with open({outside!r}, "w") as fh:
            fh.write("escaped")
        seen["outside"] = "written"
    except OSError as exc:
        seen["outside"] = type(exc).__name__
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
        seen["direct"] = "connected"
    except OSError as exc:
        seen["direct"] = type(exc).__name__
    seen["proxied"] = None
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    if proxy:
        host, port = proxy.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)
        try:
            with socket.create_connection((host, int(port)), timeout=5) as conn:
                conn.sendall(b"CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
                seen["proxied"] = conn.recv(200).decode(errors="replace").split("\\r\\n")[0]
        except OSError as exc:
            seen["proxied"] = type(exc).__name__
    texts = list(os.environ.values())
    for top in ("/build", os.path.expanduser("~")):
        for parent, _, names in os.walk(top):
            for name in names:
                try:
                    with open(os.path.join(parent, name), errors="replace") as fh:
                        texts.append(fh.read())
                except OSError:
                    pass
    word = "s3" + "cret"  # (this very file, unpacked in the scratch folder, must not count)
    seen["credentials_seen"] = any(word in text for text in texts)
    seen["service_env_seen"] = "EVH_TEST_CANARY_SECRET" in os.environ
    return "RESULT = " + repr(json.dumps(seen)) + "\\n"
"""

REPORT = (
    "import json\nimport sbprobe\n\ndef evaluate(inputs, outputs, trace):\n"
    "    return {'score': 1, 'seen': json.loads(sbprobe.RESULT)}\n"
)

# The code of a package that must never run: it leaves a marker file and asks the index for /ran/<name>.
NEVER = """
import os, urllib.request

def probe():
    with open({marker!r}, "w") as fh:
        fh.write(f"uid={{os.getuid()}}")
    try:
        urllib.request.urlopen("http://127.0.0.1:{port}/ran/evilsd", timeout=5).read()
    except Exception:
        pass
    return ""
"""


def _remove_runtime(client: TestClient, language: str, pins: dict[str, str]) -> None:
    builder = client.app.state.services.backend.builder  # type: ignore[attr-defined]
    builder.remove(builder.runtime_for(language, pins))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_sdist_build_runs_unprivileged_without_host_data_credentials_or_network(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (issue 28, 1): an sdist's build ran as uid 0 — on the host (process backend), where it
    read data_dir/secrets.key, or in a build box with network and the host's pip.conf (docker). Now
    its code runs in the build sandbox: an unprivileged uid, no data dir, nothing writable outside its
    own folders, no way to any host but the index, no credentials (the index URL's ``user:s3cret@`` is
    not in the pip.conf it gets), no service environment. The build still succeeds: the index, which
    answers only with the credentials, is reached through the build relay, which adds them."""
    files, data, outside = tmp_path / "index", tmp_path / "data", tmp_path / "outside"
    files.mkdir()
    with socket.socket() as listener, loopback_index(files, credentials="user:s3cret") as index:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        version = f"1.0.{uuid.uuid4().int % 10**8}"  # a runtime no earlier run built (docker images stay)
        probe = PROBE.format(secret=str(data / "secrets.key"), outside=str(outside), port=listener.getsockname()[1])
        sdist_with_backend(files, "sbprobe", version, probe)
        monkeypatch.setenv("PIP_INDEX_URL", f"http://user:s3cret@127.0.0.1:{index.port}/simple")
        monkeypatch.setenv("EVH_TEST_CANARY_SECRET", "do-not-leak")
        settings = make_settings(data, backend=backend, allow_sdist_builds=True)
        with TestClient(create_app(settings)) as client:
            try:
                result = evaluate(client, REPORT, packages={"sbprobe": version}, settings={"timeout_s": 60})
                assert result["status"] == "ok", result
                seen = result["details"]["seen"]
                assert seen["uid"] != 0 and seen["euid"] != 0 and int(seen["cap_eff"], 16) == 0, seen
                assert seen["secret"] in ("FileNotFoundError", "PermissionError"), seen
                assert seen["outside"] != "written" and not outside.exists(), seen
                assert seen["direct"] != "connected", seen
                assert seen["proxied"] is None or " 200 " not in seen["proxied"] + " ", seen
                assert seen["credentials_seen"] is False and seen["service_env_seen"] is False, repr(seen)
                with pytest.raises(BlockingIOError):
                    listener.accept()  # nothing of the build ever reached the non-index host
                assert any(path.startswith("/simple/sbprobe") for path in index.asked)  # through the relay
                assert_healthy(client)
            finally:
                _remove_runtime(client, "python", {"sbprobe": version})


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["file", "http"])
def test_a_dependency_naming_a_direct_url_is_refused_before_any_of_its_code_runs(
    tmp_path: Path, backend: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (issue 28, 1): a plain wheel whose metadata says ``Requires-Dist: evilsd @ file:///…tar.gz``
    (or an http URL) made pip build that sdist — even with ``--only-binary=:all:`` — as root. A
    requirement that resolves to a direct URL, a VCS link or a local path is refused before pip
    prepares it: a 422 naming the package and its URL, and no code of it ran (no marker, no request)."""
    files, elsewhere, marker = tmp_path / "index", tmp_path / "elsewhere", tmp_path / "marker"
    files.mkdir()
    elsewhere.mkdir()
    with loopback_index(files) as index:
        never = NEVER.format(marker=str(marker), port=index.port)
        folder = files if kind == "http" else elsewhere
        sdist = sdist_with_backend(folder, "evilsd", "1.0", never)
        url = index.file_url(sdist.name) if kind == "http" else sdist.as_uri()
        wheel(files, "evilwheel", "1.0", {"evilwheel/__init__.py": ""}, requires=(f"evilsd @ {url}",))
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        settings = make_settings(tmp_path / "data", backend=backend)  # source builds on: the default
        with TestClient(create_app(settings)) as client:
            body = {"language": "python", "packages": {"evilwheel": "1.0"}, "code": REPORT}
            answer = client.post("/v1/evaluate", json=body)
            assert answer.status_code == 422, answer.text
            error = answer.json()["error"]
            assert error["type"] == "BuildError", error
            assert "evilsd" in error["message"] and url in error["message"], error["message"]
            assert not marker.exists(), marker.read_text()
            assert not [p for p in index.asked if p.startswith(("/ran/", f"/files/{sdist.name}"))], index.asked
            assert_healthy(client)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_build_from_a_trickling_index_ends_at_its_own_time_limit(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28, item 7: a trickling index (a byte every 0.2 s: pip's own read timeout never fires)
    held a build, and the build threads, for minutes. A build ends at its own ``build_timeout_s``,
    killed with everything it started (the build sandbox's pid namespace, the box's ``timeout``); a
    clear 422, nothing of it left running, and the service goes on."""
    files = tmp_path / "index"
    files.mkdir()
    with loopback_index(files) as index:
        slow = wheel(files, "trickle", "1.0", {"trickle/__init__.py": "# " + "x" * 4000 + "\n"})
        index.trickle.add(slow.name)
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        # uids of this test's own: the default base's build uid is every other service's too, and the other test
        # process's builds run under it (what is looked for below is this service's build, not any build)
        settings = make_settings(tmp_path / "data", backend=backend, build_timeout_s=4, sandbox_uid_base=300_000)
        with TestClient(create_app(settings)) as client:
            body = {"language": "python", "packages": {"trickle": "1.0"}, "code": REPORT}
            answer = client.post("/v1/evaluate", json=body)
            assert answer.status_code == 422, answer.text
            error = answer.json()["error"]
            assert error["type"] == "BuildError" and "longer than 4 s" in error["message"], error
            assert f"/files/{slow.name}" in index.asked
            from evaluator_host.builds.build_sandbox import build_uid

            uid = build_uid(settings.sandbox_uid_base)
            # killed processes may take a moment to be gone from /proc
            wait_until(
                lambda: not _processes_of(uid),
                10,
                0.1,
                what=lambda: f"the build uid's processes to go: {_processes_of(uid)}",
            )
            assert_healthy(client)


def _processes_of(uid: int) -> list[str]:
    """Pids of this machine's processes whose real uid is ``uid`` (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            uids = next((line.split()[1:] for line in status.splitlines() if line.startswith("Uid:")), [])
            if uids and int(uids[0]) == uid:
                found.append(entry.name)
    return found


def test_without_namespaces_installs_take_wheels_only_and_still_refuse_direct_urls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process backend's rlimits mode has no build sandbox: whatever ``allow_sdist_builds`` says,
    no package code runs there — sdists are not built, and a direct-URL dependency is refused before
    pip prepares it (its code never runs); a plain wheel still installs."""
    import asyncio

    from evaluator_host.errors import BuildError
    from evaluator_host.sandbox.process.isolation import Isolation
    from evaluator_host.sandbox.process.runtimes import RuntimeBuilder

    files, marker = tmp_path / "index", tmp_path / "marker"
    files.mkdir()
    with loopback_index(files) as index:
        never = NEVER.format(marker=str(marker), port=index.port)
        sdist = sdist_with_backend(files, "evilsd", "1.0", never)
        wheel(
            files,
            "evilwheel",
            "1.0",
            {"evilwheel/__init__.py": ""},
            requires=(f"evilsd @ {index.file_url(sdist.name)}",),
        )
        wheel(files, "plain", "1.0", {"plain/__init__.py": ""})
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        rlimits = Isolation("rlimits", (), uid_drop=False, pids_cgroup=None)
        builder = RuntimeBuilder(make_settings(tmp_path / "data", allow_sdist_builds=True), rlimits)
        with pytest.raises(BuildError) as refused:
            asyncio.run(builder.ensure("python", {"evilwheel": "1.0"}))
        assert "evilsd" in refused.value.message and sdist.name in refused.value.message, refused.value.message
        with pytest.raises(BuildError) as no_wheel:
            asyncio.run(builder.ensure("python", {"evilsd": "1.0"}))
        assert "evilsd==1.0 is published only as source" in no_wheel.value.message, no_wheel.value.message
        assert not marker.exists() and not [p for p in index.asked if p.startswith("/ran/")], index.asked
        assert "plain==1.0" in asyncio.run(builder.ensure("python", {"plain": "1.0"})).lock


def test_the_no_wheel_hint_is_given_only_when_that_is_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (issue 28): with source builds off, a version published only as an sdist answered
    "did you mean <an older version with a wheel>" and hid the real reason. Now: a pin that exists
    only as source says so (and suggests no other version); a pin that does not exist gets the
    "did you mean" and no "no wheel" hint."""
    files = tmp_path / "index"
    files.mkdir()
    with loopback_index(files) as index:
        wheel(files, "onlysrc", "0.5", {"onlysrc/__init__.py": ""})
        sdist_with_backend(files, "onlysrc", "1.0", "def probe():\n    return ''\n")
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        settings = make_settings(tmp_path / "data", backend="process", allow_sdist_builds=False)
        with TestClient(create_app(settings)) as client:

            def error(version: str) -> dict[str, Any]:
                body = {"language": "python", "packages": {"onlysrc": version}, "code": REPORT}
                answer = client.post("/v1/evaluate", json=body)
                assert answer.status_code == 422, answer.text
                return answer.json()["error"]  # type: ignore[no-any-return]

            source_only = error("1.0")
            assert "onlysrc==1.0 is published only as source" in source_only["message"], source_only
            assert "did you mean" not in source_only["message"], source_only
            missing = error("0.7")
            assert "did you mean onlysrc==0.5?" in missing["message"], missing
            assert "source" not in missing["message"], missing


def test_the_build_sandboxes_settings_carry_no_credentials() -> None:
    """The pip.conf and npmrc a build sandbox gets drop userinfo and tokens (the sandbox runs package
    code); the relay lets through the configured indexes and nothing else."""
    from evaluator_host.builds.build_sandbox import allowed_hosts, npmrc, pip_conf

    pip = {
        "index-url": "https://alice:s3cret@pypi.example/simple",
        "extra-index-url": "https://bob:t0ken@extra.example/simple file:///opt/pypi/simple",
        "proxy": "http://carol:pw@proxy.example:3128",
    }
    conf = pip_conf(pip, cert="/build/ca.pem", constraint=None)
    assert "s3cret" not in conf and "t0ken" not in conf and "proxy" not in conf, conf
    assert "https://pypi.example/simple" in conf and "https://extra.example/simple" in conf
    npm = {"registry": "https://dave:npmtok@registry.example/", "//registry.example/:_authToken": "npmtok"}
    assert "npmtok" not in npmrc(npm, cafile=None)
    allowed = allowed_hosts(pip, npm)
    assert allowed == {"pypi.example:443", "extra.example:443", "registry.example:443"}, allowed


def test_an_index_with_credentials_is_reached_over_tls_through_the_relay_which_adds_them(tmp_path: Path) -> None:
    """An ``https://user:token@host/simple`` index: the sandbox's pip.conf names ``http://host:443/simple``
    (no credentials, a trusted host) and the relay, on the host, opens TLS to the index — verified
    against the CA bundle — and adds ``Authorization``; a request without the relay's help gets a 401."""
    import http.server
    import ssl
    import subprocess
    import threading

    from evaluator_host.builds.build_relay import BuildRelay, relay_credentials
    from evaluator_host.builds.build_sandbox import allowed_hosts, pip_conf

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            seen.append(self.headers.get("Authorization"))
            ok = self.headers.get("Authorization") == "Basic dXNlcjp0MGtlbg=="  # user:t0ken
            body = b"<a href='/files/x-1.0.tar.gz'>x</a>" if ok else b""
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        config = {"index-url": f"https://user:t0ken@localhost:{port}/simple"}
        in_sandbox, upstreams = relay_credentials(config)
        conf = pip_conf(in_sandbox, cert=None, constraint=None)
        assert "t0ken" not in conf and f"index-url = http://localhost:{port}/simple" in conf, conf
        assert "trusted-host = localhost" in conf, conf
        relay = BuildRelay(allowed_hosts(in_sandbox, {}), upstreams, str(cert))
        try:
            with socket.socket(socket.AF_UNIX) as conn:
                conn.settimeout(10)
                conn.connect(str(relay.path))
                conn.sendall(f"GET http://localhost:{port}/simple/x/ HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
                answer = b""
                while chunk := conn.recv(65536):
                    answer += chunk
        finally:
            relay.close()
        assert answer.startswith(b"HTTP/1.0 200") and b"x-1.0.tar.gz" in answer, answer[:300]
        assert seen == ["Basic dXNlcjp0MGtlbg=="], seen
        import urllib.error
        import urllib.request

        plain = ssl.create_default_context(cafile=str(cert))
        with pytest.raises(urllib.error.HTTPError) as refused:  # the index itself wants them
            urllib.request.urlopen(f"https://localhost:{port}/simple/x/", context=plain, timeout=10)
        assert refused.value.code == 401
    finally:
        server.shutdown()
        server.server_close()


def test_the_build_relay_reaches_the_index_and_nothing_else(tmp_path: Path) -> None:
    """The build sandbox's one way out: to an allowed host:port it connects; anything else is a 403."""
    from evaluator_host.builds.build_relay import BuildRelay

    files = tmp_path / "index"
    files.mkdir()
    wheel(files, "plain", "1.0", {"plain/__init__.py": ""})
    with loopback_index(files) as index:
        relay = BuildRelay(frozenset({f"127.0.0.1:{index.port}"}))
        try:

            def ask(request: bytes) -> bytes:
                with socket.socket(socket.AF_UNIX) as conn:
                    conn.settimeout(10)
                    conn.connect(str(relay.path))
                    conn.sendall(request)
                    answer = b""
                    while chunk := conn.recv(65536):
                        answer += chunk
                    return answer

            ok = ask(f"GET {index.url}/plain/ HTTP/1.1\r\nHost: x\r\nAuthorization: Basic eA==\r\n\r\n".encode())
            assert ok.startswith(b"HTTP/1.0 200") and b"plain-1.0" in ok, ok[:200]
            other = free_port_listening()
            with other:
                port = other.getsockname()[1]
                for request in (
                    f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n",
                    f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n",
                    f"CONNECT localhost:{index.port} HTTP/1.1\r\n\r\n",
                    "GET /simple/ HTTP/1.1\r\n\r\n",
                ):
                    assert ask(request.encode()).startswith(b"HTTP/1.1 403"), request
                other.setblocking(False)
                with pytest.raises(BlockingIOError):
                    other.accept()
            assert len(relay.refused) == 4, relay.refused
        finally:
            relay.close()


def free_port_listening() -> socket.socket:
    """A listening socket on a free loopback port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return listener


ROUGE = (
    "from rouge_score import rouge_scorer\n\ndef evaluate(inputs, outputs, trace):\n"
    "    scorer = rouge_scorer.RougeScorer(['rouge1', 'rougeL'], use_stemmer=True)\n"
    "    scores = scorer.score(inputs['reference'], outputs)\n"
    "    return {'score': scores['rougeL'].fmeasure, 'rouge1': scores['rouge1'].fmeasure}\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_rouge_score_published_only_as_an_sdist_builds_and_scores(tmp_path: Path, backend: str) -> None:
    """Issue 28: ``rouge-score==0.1.2`` (the standard ROUGE package, an sdist only) answered a misleading
    "did you mean 0.0.4". With source builds on by default (in the build sandbox) it builds and runs."""
    with TestClient(create_app(make_settings(tmp_path / "data", backend=backend))) as client:
        result = evaluate(
            client,
            ROUGE,
            packages={"rouge-score": "0.1.2"},
            inputs={"reference": "the cat sat on the mat"},
            outputs="the cat sat on a mat",
            settings={"timeout_s": 120},
        )
        assert result["status"] == "ok", result
        assert 0.7 < result["score"] < 1.0 and 0.7 < result["details"]["rouge1"] < 1.0, result


_USERNS_BUILD = """
import asyncio, json, sys
from pathlib import Path
from evaluator_host.sandbox.process.isolation import probe
from evaluator_host.sandbox.process.runtimes import RuntimeBuilder
from evaluator_host.settings import Settings

settings = Settings(data_dir=Path(sys.argv[1]), allow_sdist_builds=True)
isolation = probe(settings.process_isolation, settings.sandbox_uid_base)
builder = RuntimeBuilder(settings, isolation)
runtime = asyncio.run(builder.ensure("python", {"sbprobe": sys.argv[2]}))
namespace = {}
exec((Path(runtime.location) / "site" / "sbprobe" / "__init__.py").read_text(), namespace)
print(json.dumps({"mode": isolation.mode, "host_maps": isolation.host_maps, "seen": json.loads(namespace["RESULT"])}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the userns mode as root needs root")
def test_in_the_userns_mode_as_root_a_build_runs_at_the_build_uid_not_the_hosts_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root without CAP_SYS_ADMIN (a container's default) where user namespaces work: the ``userns`` mode,
    whose namespace root is the host's root. A build there runs at the build uid (the service writes the
    namespace's id maps, as for workers), never as the host's uid 0, and sees no data dir."""
    import subprocess
    import sys

    from tests.support import REPO

    drop = ["setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin", "--"]
    probe_only = "from evaluator_host.sandbox.process.isolation import probe; print(probe().mode)"
    mode = subprocess.run([*drop, sys.executable, "-c", probe_only], cwd=REPO, capture_output=True, text=True)
    if mode.stdout.strip() != "userns":
        pytest.skip(f"no user namespaces without CAP_SYS_ADMIN here ({mode.stdout.strip()} {mode.stderr[-300:]})")
    files, data = tmp_path / "index", tmp_path / "data"
    files.mkdir()
    with socket.socket() as listener, loopback_index(files) as index:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        version = f"1.0.{uuid.uuid4().int % 10**8}"
        probe = PROBE.format(
            secret=str(data / "secrets.key"), outside=str(tmp_path / "x"), port=listener.getsockname()[1]
        )
        sdist_with_backend(files, "sbprobe", version, probe)
        data.mkdir()
        (data / "secrets.key").write_text("not for builds")
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        done = subprocess.run(
            [*drop, sys.executable, "-c", _USERNS_BUILD, str(data), version],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["mode"] == "userns" and out["host_maps"] is True, out
    seen = out["seen"]
    assert seen["uid"] != 0 and seen["euid"] != 0, seen
    assert seen["secret"] in ("FileNotFoundError", "PermissionError") and seen["direct"] != "connected", seen


def test_relay_folders_a_killed_service_left_are_swept_and_live_or_young_ones_stay(tmp_path: Path) -> None:
    """A SIGKILLed service never closes its build relays: their folders (a socket nobody listens on)
    are removed by the next builder's start, once a minute old; a live relay's folder, and a young
    one (a relay may be between its folder and its socket), stay."""
    old = time.time() - 120

    def folder(name: str, listening: bool, age: float | None = old) -> tuple[Path, socket.socket]:
        made = tmp_path / f"evh-relay-{name}"
        made.mkdir()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix_sockets.bind(server, made / "relay.sock")  # (any tmp_path's length, as the relay's own)
        if listening:
            server.listen()
        else:
            server.close()  # (what a killed process leaves: the socket file, no one behind it)
        if age is not None:
            os.utime(made, (age, age))
        return made, server

    dead, _ = folder("dead", listening=False)
    live, live_server = folder("live", listening=True)
    young, _ = folder("young", listening=False, age=None)
    gone = tmp_path / "evh-relay-nosocket"
    gone.mkdir()
    os.utime(gone, (old, old))
    other = tmp_path / "unrelated"
    other.mkdir()
    try:
        assert build_relay.sweep_stale(tmp_path) == 2
        assert not dead.exists() and not gone.exists()
        assert live.exists() and young.exists() and other.exists()
    finally:
        live_server.close()


TWO_LINKS = (
    "import flinka, flinkb\n\ndef evaluate(inputs, outputs, trace):\n"
    "    return {'score': 1, 'from': [flinka.WHERE, flinkb.WHERE]}\n"
)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_build_finds_packages_in_each_of_two_find_links_folders(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (issue 47, also found): with two ``find-links`` entries in the operator's pip settings
    every uv build failed ("Failed to read `--find-links` directory: /opt/wheels /x"): the entries were
    handed to uv space-separated, which it reads as one path. Each folder's wheel is found now."""
    first, second = tmp_path / "links-a", tmp_path / "links-b"
    first.mkdir()
    second.mkdir()
    version = f"1.0.{uuid.uuid4().int % 10**8}"  # a runtime no earlier run built (docker images stay)
    wheel(first, "flinka", version, {"flinka/__init__.py": "WHERE = 'a'\n"})
    wheel(second, "flinkb", version, {"flinkb/__init__.py": "WHERE = 'b'\n"})
    monkeypatch.setenv("PIP_FIND_LINKS", f"{first} {second}")
    pins = {"flinka": version, "flinkb": version}
    with TestClient(create_app(make_settings(tmp_path / "data", backend=backend))) as client:
        try:
            result = evaluate(client, TWO_LINKS, packages=pins, settings={"timeout_s": 60})
            assert result["status"] == "ok", result
            assert result["details"]["from"] == ["a", "b"], result
        finally:
            _remove_runtime(client, "python", pins)
