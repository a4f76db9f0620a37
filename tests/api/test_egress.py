"""Egress end to end, on each backend: an evaluator reaches what it declared and its workspace allows,
through the service's proxy, and nothing else. The targets are servers this test starts on loopback,
named ``api.openai.com`` / ``blocked.example.com`` for the proxy only (``egress_hosts``)."""

from __future__ import annotations

import datetime
import http.server
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from evaluator_host.sandbox.process.isolation import probe
from tests.conftest import BACKENDS, make_settings

ADMIN = "egress-operator"


class _Pong(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
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


def _certificate(tmp: Path) -> tuple[ssl.SSLContext, str]:
    """A self-signed certificate for api.openai.com: the server's context and the PEM clients trust."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "api.openai.com")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("api.openai.com")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    (tmp / "cert.pem").write_text(pem)
    (tmp / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp / "cert.pem", tmp / "key.pem")
    return context, pem


@pytest.fixture(scope="module", params=BACKENDS)
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if request.param == "process" and probe().mode == "rlimits":
        pytest.skip("the process backend has no namespaces here (not root, no user namespaces): no egress to test")
    tmp = tmp_path_factory.mktemp(f"egress-{request.param}")
    tls, pem = _certificate(tmp)
    servers = [_serve(), _serve(), _serve(tls)]
    (_, allowed), (_, blocked), (_, secure) = servers
    hosts = {"api.openai.com": "127.0.0.1", "blocked.example.com": "127.0.0.1"}
    settings = make_settings(tmp / "data", backend=request.param, admin_key=ADMIN, egress_hosts=hosts)
    with TestClient(create_app(settings)) as client:
        op = {"Authorization": f"Bearer {ADMIN}"}
        ws = client.post("/v1/workspaces", json={"name": "judges"}, headers=op).json()
        key = client.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "k"}, headers=op).json()["key"]
        allow = [f"api.openai.com:{allowed}", f"api.openai.com:{secure}"]
        assert client.patch(f"/v1/workspaces/{ws['id']}", json={"network_allow": allow}, headers=op).status_code == 200
        yield {
            "client": client,
            "headers": {"Authorization": f"Bearer {key}"},
            "op": op,
            "ws": ws["id"],
            "allowed": allowed,
            "blocked": blocked,
            "secure": secure,
            "pem": pem,
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
    world: dict[str, Any], code: str, network: list[str], inputs: dict[str, Any], language: str = "python"
) -> dict[str, Any]:
    body = {"language": language, "code": code, "network": network, "inputs": inputs}
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
        allow.append(dest)
        client.patch(f"/v1/workspaces/{world['ws']}", json={"network_allow": allow}, headers=world["op"])


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
