"""Egress end to end, on each backend: an evaluator reaches what it declared and its workspace allows,
through the service's proxy, and nothing else. The targets are servers this test starts on loopback,
named ``api.openai.com`` / ``blocked.example.com`` for the proxy only (``egress_hosts``)."""

from __future__ import annotations

import http.server
import json
import secrets
import ssl
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.sandbox.process.isolation import probe
from tests.support.backends import BACKENDS
from tests.support.service import make_settings
from tests.support.tls import certificate

ADMIN = "egress-operator"


class _Pong(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        seen: list[dict[str, str]] | None = getattr(self.server, "seen", None)
        if seen is not None:  # the server stands for a model API: what did it get?
            seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
        body = f"pong {self.path}".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


def _serve(tls: ssl.SSLContext | None = None) -> tuple[http.server.ThreadingHTTPServer, int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pong)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, int(server.server_address[1])


@pytest.fixture(scope="module", params=BACKENDS)
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if request.param == "process" and probe().mode == "rlimits":
        pytest.skip("the process backend has no namespaces here (not root, no user namespaces): no egress to test")
    tmp = tmp_path_factory.mktemp(f"egress-{request.param}")
    tls, pem = certificate(tmp, "api.openai.com")
    servers = [_serve(), _serve(), _serve(tls), _serve(tls)]
    (_, allowed), (_, blocked), (_, secure), (model_api, injected) = servers
    model_api.seen = []  # type: ignore[attr-defined]
    hosts = {"api.openai.com": "127.0.0.1", "blocked.example.com": "127.0.0.1"}
    settings = make_settings(
        tmp / "data",
        backend=request.param,
        admin_key=ADMIN,
        egress_hosts=hosts,
        ca_bundle=tmp / "api.openai.com.pem",  # what the proxy verifies destinations with (stands for the system's)
    )
    with TestClient(create_app(settings)) as client:
        op = {"Authorization": f"Bearer {ADMIN}"}
        ws = client.post("/v1/workspaces", json={"name": "judges"}, headers=op).json()
        key = client.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "k"}, headers=op).json()["key"]
        allow = [f"api.openai.com:{allowed}", f"api.openai.com:{secure}", f"api.openai.com:{injected}"]
        assert client.patch(f"/v1/workspaces/{ws['id']}", json={"network_allow": allow}, headers=op).status_code == 200
        secret = f"sk-test-{secrets.token_hex(16)}"
        put = client.put(
            "/v1/secrets/OPENAI_API_KEY", json={"value": secret}, headers={"Authorization": f"Bearer {key}"}
        )
        assert put.status_code == 204
        yield {
            "client": client,
            "headers": {"Authorization": f"Bearer {key}"},
            "op": op,
            "ws": ws["id"],
            "allowed": allowed,
            "blocked": blocked,
            "secure": secure,
            "pem": pem,
            "injected": injected,
            "allow": allow,
            "seen": model_api.seen,  # type: ignore[attr-defined]
            "secret": secret,
        }
    for server, _port in servers:
        server.shutdown()


FETCH_PY = """import json, ssl, urllib.request
def evaluate(inputs, outputs, trace):
    got = {}
    for url in inputs["urls"]:
        try:
            context = ssl.create_default_context(cadata=inputs["ca"]) if url.startswith("https") else None
            got[url] = urllib.request.urlopen(url, timeout=10, context=context).read().decode()
        except Exception as exc:
            got[url] = f"{type(exc).__name__}: {exc}"
    return {"score": 1.0, "got": got}
"""
FETCH_JS = """export async function evaluate(inputs, outputs, trace) {
  const got = {}
  for (const url of inputs.urls) {
    try {
      got[url] = await (await fetch(url)).text()
    } catch (err) {
      got[url] = `${err.name}: ${err.cause ?? err.message}`
    }
  }
  return { score: 1, got }
}
"""
DIRECT_PY = """import socket
def evaluate(inputs, outputs, trace):
    try:
        socket.create_connection(("127.0.0.1", inputs["port"]), timeout=3).close()
        return {"score": 1.0, "label": "connected"}
    except OSError as exc:
        return {"score": 0.0, "label": type(exc).__name__}
"""


def _evaluate(
    world: dict[str, Any],
    code: str,
    network: list[Any],
    inputs: dict[str, Any],
    language: str = "python",
    **more: Any,
) -> dict[str, Any]:
    body = {"language": language, "code": code, "network": network, "inputs": inputs, **more}
    response = world["client"].post("/v1/evaluate", json=body, headers=world["headers"])
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_a_declared_allowed_host_is_reached_and_an_undeclared_one_is_refused(world: dict[str, Any]) -> None:
    ok, no = f"http://api.openai.com:{world['allowed']}/v1/ping", f"http://blocked.example.com:{world['blocked']}/"
    result = _evaluate(world, FETCH_PY, [f"api.openai.com:{world['allowed']}"], {"urls": [ok, no], "ca": ""})
    got = result["details"]["got"]
    assert got[ok] == "pong /v1/ping"
    assert got[no].startswith("HTTPError: HTTP Error 403")
    log = result["details"]["egress"]
    assert {(e["host"], e["status"].split(":")[0]) for e in log} == {
        (f"api.openai.com:{world['allowed']}", "ok"),
        (f"blocked.example.com:{world['blocked']}", "refused"),
    }
    assert any("egress proxy refused 1 connection" in w for w in result["warnings"])


def test_tls_goes_through_a_connect_tunnel_end_to_end(world: dict[str, Any]) -> None:
    url = f"https://api.openai.com:{world['secure']}/v1/models"
    result = _evaluate(world, FETCH_PY, [f"api.openai.com:{world['secure']}"], {"urls": [url], "ca": world["pem"]})
    assert result["details"]["got"][url] == "pong /v1/models"
    (entry,) = result["details"]["egress"]
    assert entry["host"] == f"api.openai.com:{world['secure']}" and entry["bytes_in"] > 500  # a TLS handshake


def test_node_fetch_uses_the_proxy_too(world: dict[str, Any]) -> None:
    ok = f"http://api.openai.com:{world['allowed']}/js"
    result = _evaluate(world, FETCH_JS, [f"api.openai.com:{world['allowed']}"], {"urls": [ok]}, "javascript")
    assert result["details"]["got"][ok] == "pong /js"
    assert result["details"]["egress"][0]["status"] in ("ok", "open")  # fetch keeps its connection alive
    assert not any("refused" in w for w in result["warnings"])


THREADS_PY = """import threading, urllib.request
def evaluate(inputs, outputs, trace):
    got = urllib.request.urlopen(inputs["url"], timeout=10).read().decode()
    return {"score": 1.0, "got": got, "threads": [t.name for t in threading.enumerate()]}
"""


def test_a_python_worker_hands_its_proxy_port_to_the_service_and_runs_no_forwarder(world: dict[str, Any]) -> None:
    """sandbox/egress/handoff.py: the service accepts the sandbox's 127.0.0.1:3128 itself (a container's
    too); the harness keeps no forwarder thread, and connections are judged and logged as ever."""
    url = f"http://api.openai.com:{world['allowed']}/handed"
    result = _evaluate(world, THREADS_PY, [f"api.openai.com:{world['allowed']}"], {"url": url})
    assert result["details"]["got"] == "pong /handed"
    assert "egress-forwarder" not in result["details"]["threads"]
    assert [(e["host"], e["status"]) for e in result["details"]["egress"]] == [
        (f"api.openai.com:{world['allowed']}", "ok")
    ]


def test_the_proxy_is_the_only_way_out(world: dict[str, Any]) -> None:
    declared = [f"api.openai.com:{world['allowed']}"]
    direct = _evaluate(world, DIRECT_PY, declared, {"port": world["allowed"]})
    assert direct["label"] in ("ConnectionRefusedError", "OSError", "TimeoutError")  # the sandbox's own loopback
    url = f"http://api.openai.com:{world['allowed']}/"
    without = _evaluate(world, FETCH_PY, [], {"urls": [url], "ca": ""})
    assert without["details"]["got"][url].startswith("URLError")  # no network declared: no network at all
    assert "egress" not in without["details"]


def test_only_the_workspaces_allowlist_may_be_declared_and_it_binds_at_once(world: dict[str, Any]) -> None:
    client, headers = world["client"], world["headers"]
    body = {"name": "x", "language": "python", "code": FETCH_PY, "network": [f"blocked.example.com:{world['blocked']}"]}
    refused = client.post("/v1/evaluators", json=body, headers=headers)
    assert refused.status_code == 422 and refused.json()["error"]["type"] == "EgressError"
    for entry in ("10.0.0.1:80", "localhost:80", "api.openai.com"):
        bad = client.post("/v1/evaluators", json={**body, "network": [entry]}, headers=headers)
        assert bad.status_code == 422, entry
    dest = f"api.openai.com:{world['allowed']}"
    ev = client.post("/v1/evaluators", json={**body, "network": [dest]}, headers=headers).json()
    url = f"http://{dest}/"
    run = {"inputs": {"urls": [url], "ca": ""}}
    assert (
        client.post(f"/v1/evaluators/{ev['id']}/evaluate", json=run, headers=headers).json()["details"]["got"][url]
        == "pong /"
    )
    allow = [f"api.openai.com:{world['secure']}"]  # the operator takes the entry away: its warm worker loses it now
    client.patch(f"/v1/workspaces/{world['ws']}", json={"network_allow": allow}, headers=world["op"])
    try:
        after = client.post(f"/v1/evaluators/{ev['id']}/evaluate", json=run, headers=headers).json()
        assert after["details"]["got"][url].startswith("HTTPError: HTTP Error 403")
        assert "network_allow" in after["details"]["egress"][0]["status"]
    finally:
        client.patch(f"/v1/workspaces/{world['ws']}", json={"network_allow": world["allow"]}, headers=world["op"])


def test_the_saved_evaluator_says_where_declared_and_used_network_differ(world: dict[str, Any]) -> None:
    client, headers = world["client"], world["headers"]
    dest = f"api.openai.com:{world['allowed']}"
    body = {"name": "w", "language": "python", "code": FETCH_PY}
    undeclared = client.post("/v1/evaluators", json=body, headers=headers).json()
    assert undeclared["capabilities"]["network"] and undeclared["network"] == []
    assert any("declares no `network`" in w for w in undeclared["warnings"])
    matching = client.post("/v1/evaluators", json={**body, "network": [dest]}, headers=headers).json()
    assert matching["network"] == [dest] and not any("network" in w for w in matching["warnings"])
    quiet = {**body, "code": "def evaluate(inputs, outputs, trace):\n    return 1.0\n", "network": [dest]}
    unused = client.post("/v1/evaluators", json=quiet, headers=headers).json()
    assert any("sees no network use" in w for w in unused["warnings"])


# -- a model API key the evaluator never sees: the proxy sets the header ------------------------

SNOOP_PY = r"""import os, socket, ssl, stat, urllib.request
def _look(text, where, prefix, seen):
    if prefix in text:
        seen.append(where)

def evaluate(inputs, outputs, trace):
    prefix, dest = inputs["prefix"], inputs["dest"]
    # an ordinary client, the default TLS context (SSL_CERT_FILE), its own Authorization header
    request = urllib.request.Request(f"https://{dest}/v1/models", headers={"Authorization": "Bearer guess"})
    got = urllib.request.urlopen(request, timeout=10).read().decode()
    seen, answers = [], []
    for name, value in os.environ.items():
        _look(f"{name}={value}", f"env {name}", prefix, seen)
    count = 0
    paths = [f"/proc/{p}/{f}" for p in ("self", "1") for f in ("environ", "cmdline")]
    for root in ("/sandbox", "/tmp", "/etc", "/root", "/home", "/var", "/run", "/opt"):
        for folder, _dirs, files in os.walk(root):
            paths += [os.path.join(folder, name) for name in files]
    for path in paths[:20000]:
        count += 1
        try:
            if not path.startswith("/proc/") and not stat.S_ISREG(os.stat(path).st_mode):
                continue  # a FIFO or a device would block
            with open(path, "rb") as fh:
                _look(fh.read(4 << 20).decode("latin-1"), path, prefix, seen)
        except OSError:
            pass
    # what the proxy says back: plain http to it, a tunnel without TLS, a bad request, a second one
    try:
        urllib.request.urlopen(f"http://{dest}/", timeout=10).read()
    except Exception as exc:
        answers.append(f"{exc} {exc.read().decode() if hasattr(exc, 'read') else ''}")
    for then in (b"NOT TLS\r\n\r\n", b"BROKEN\r\n\r\n", b"GET /again HTTP/1.1\r\nHost: x\r\n\r\n"):
        sock = socket.create_connection(("127.0.0.1", 3128), timeout=10)
        sock.sendall(f"CONNECT {dest} HTTP/1.1\r\n\r\n".encode())
        answers.append(sock.recv(65536).decode("latin-1"))
        try:
            if then == b"NOT TLS\r\n\r\n":
                sock.sendall(then)
            else:
                context = ssl.create_default_context()
                context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
                sock = context.wrap_socket(sock, server_hostname=dest.split(":")[0])
                answers.append(str(sock.getpeercert(binary_form=True)))
                sock.sendall(then)
            while chunk := sock.recv(65536):
                answers.append(chunk.decode("latin-1"))
        except Exception as exc:
            answers.append(repr(exc))
        finally:
            sock.close()
    for where, text in [("answers", "\n".join(answers)), ("got", got)]:
        _look(text, where, prefix, seen)
    return {"score": 1.0, "got": got, "seen": seen, "answers": answers, "files": count}
"""
SNOOP_JS = r"""import fs from 'node:fs'
import path from 'node:path'
export async function evaluate(inputs, outputs, trace) {
  const { prefix, dest } = inputs
  const got = await (await fetch(`https://${dest}/v1/js`, { headers: { authorization: 'Bearer guess' } })).text()
  const seen = []
  for (const [name, value] of Object.entries(process.env)) {
    if (`${name}=${value}`.includes(prefix)) seen.push(`env ${name}`)
  }
  let count = 0
  const walk = (dir) => {
    let entries = []
    try { entries = fs.readdirSync(dir, { withFileTypes: true }) } catch { return }
    for (const entry of entries) {
      const full = path.join(dir, entry.name)
      if (entry.isDirectory()) walk(full)
      else if (entry.isFile() && ++count < 20000) {
        try {
          if (fs.statSync(full).size < 4 << 20 && fs.readFileSync(full, 'latin1').includes(prefix)) seen.push(full)
        } catch {}
      }
    }
  }
  for (const root of ['/sandbox', '/tmp', '/etc']) walk(root)
  return { score: 1, got, seen, files: count }
}
"""


def _injecting(world: dict[str, Any]) -> tuple[str, list[Any]]:
    dest = f"api.openai.com:{world['injected']}"
    return dest, [{"host": dest, "headers": {"Authorization": "Bearer {{secret:OPENAI_API_KEY}}"}}]


@pytest.mark.parametrize("language", ["python", "javascript"])
def test_the_proxy_sets_the_secret_header_and_the_evaluator_cannot_read_the_secret_anywhere(
    world: dict[str, Any], language: str
) -> None:
    dest, network = _injecting(world)
    secret, seen = world["secret"], world["seen"]
    before = len(seen)
    code = SNOOP_PY if language == "python" else SNOOP_JS
    inputs = {"prefix": secret[:12], "dest": dest}
    result = _evaluate(world, code, network, inputs, language, settings={"timeout_s": 60})
    assert result["status"] == "ok", (result.get("error"), result["stderr"][-2000:])
    assert result["details"]["got"] == ("pong /v1/models" if language == "python" else "pong /v1/js")
    assert result["details"]["seen"] == [] and result["details"]["files"] > 10  # it looked, and found nothing
    answer = json.dumps(result)
    assert secret not in answer and secret[:12] not in answer and "[secret OPENAI_API_KEY]" not in answer
    # the model API got the real key, for its own name, whatever the code sent
    got = seen[before]
    assert got["authorization"] == f"Bearer {secret}" and got["host"] == dest
    injected = [e for e in result["details"]["egress"] if e.get("injected")]
    assert injected and all(e["injected"] == ["Authorization"] for e in injected)
    if language == "python":  # the proxy's own answers were read too (and hold no value)
        assert any("only https" in a for a in result["details"]["answers"])
        assert any("400 Bad Request" in a for a in result["details"]["answers"])


def test_an_env_secret_leaks_past_redaction_when_cut_and_an_injected_one_has_nothing_to_cut(
    world: dict[str, Any],
) -> None:
    """The known limit of env secrets (docs/security.md): redaction replaces whole values, so a slice
    of one goes out as it is. Injected, the code never has the value, so there is nothing to slice."""
    secret = world["secret"]
    code = (
        "import os\n"
        "def evaluate(inputs, outputs, trace):\n"
        "    value = os.environ.get('OPENAI_API_KEY', '')\n"
        "    return {'score': 1.0, 'reason': value[:6] + '|' + value[6:12]}\n"
    )
    dest, network = _injecting(world)
    env_form = _evaluate(world, code, [], {}, secrets=["OPENAI_API_KEY"])
    assert env_form["reason"] == f"{secret[:6]}|{secret[6:12]}"  # leaked: the known limit of env secrets
    injected_form = _evaluate(world, code, network, {})
    assert injected_form["reason"] == "|" and secret[:6] not in json.dumps(injected_form)


def test_network_headers_are_checked_when_declared(world: dict[str, Any]) -> None:
    client, headers = world["client"], world["headers"]
    dest, _ = _injecting(world)
    body = {"name": "h", "language": "python", "code": "def evaluate(inputs, outputs, trace):\n    return 1.0\n"}
    for bad in (
        {"Host": "x"},  # the proxy sets Host itself
        {"Authorization": "Bearer {{secret:NOPE NOPE}}"},
        {"Authorization": "a\r\nX-Evil: 1"},
        {"Authorization": "Bearer é"},
        {"Proxy-Authorization": "x"},
    ):
        answer = client.post(
            "/v1/evaluators", json={**body, "network": [{"host": dest, "headers": bad}]}, headers=headers
        )
        assert answer.status_code == 422, bad
    twice = [dest, {"host": dest, "headers": {"X-A": "1"}}]
    assert client.post("/v1/evaluators", json={**body, "network": twice}, headers=headers).status_code == 422
    missing = {"host": dest, "headers": {"Authorization": "Bearer {{secret:NOT_SET}}"}}
    saved = client.post("/v1/evaluators", json={**body, "network": [missing]}, headers=headers)
    assert saved.status_code == 201 and saved.json()["network"] == [missing]  # stored as declared: names only
    assert not any("egress proxy" in w for w in saved.json()["warnings"])
    both = client.post("/v1/evaluators", json={**body, "network": [missing], "secrets": ["NOT_SET"]}, headers=headers)
    assert any("also listed in `secrets`" in w for w in both.json()["warnings"])
    run = client.post(f"/v1/evaluators/{saved.json()['id']}/evaluate", json={"inputs": {}}, headers=headers)
    assert run.status_code == 422 and run.json()["error"]["type"] == "SecretError"
    assert "NOT_SET" in run.json()["error"]["message"]
    # a value that would split the header (set by the workspace itself): refused, never sent, never shown
    assert client.put("/v1/secrets/TWO_LINES", json={"value": "k1\r\nX-Evil: 1"}, headers=headers).status_code == 204
    split = {"host": dest, "headers": {"Authorization": "Bearer {{secret:TWO_LINES}}"}}
    inline = {"language": "python", "code": body["code"], "network": [split]}
    refused = client.post("/v1/evaluate", json=inline, headers=headers)
    assert refused.status_code == 422 and refused.json()["error"]["type"] == "SecretError"
    assert "X-Evil" not in refused.text
    assert _evaluate(world, body["code"], [dest], {})["score"] == 1.0  # and the service goes on
