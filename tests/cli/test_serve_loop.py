"""``evaluator-host serve`` runs on uvicorn's own event loop: uvloop, where it is installed (it is a dependency),
as ``uvicorn.run`` chose it before the service started its components around uvicorn's server
(issue 55: the default asyncio loop had crept in, a slower loop under every egress connection and request).
And on that loop, the served service's egress holds end to end: a Python worker hands its proxy port to its
gate (no forwarder thread), a declared and allowed host is reached, an undeclared one refused, each logged."""

from __future__ import annotations

import http.server
import importlib.util
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evaluator_host.sandbox.process.isolation import probe
from tests.support.backends import BACKENDS
from tests.support.service import serving

FETCH_PY = """import threading, urllib.error, urllib.request
def evaluate(inputs, outputs, trace):
    got = {}
    for url in inputs["urls"]:
        try:
            got[url] = urllib.request.urlopen(url, timeout=10).read().decode()
        except urllib.error.HTTPError as exc:
            got[url] = f"HTTP {exc.code}"
    return {"score": 1.0, "got": got, "threads": [t.name for t in threading.enumerate()]}
"""


class _Pong(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        body = f"pong {self.path}".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def pong() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pong)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(importlib.util.find_spec("uvloop") is None, reason="uvloop is not installed")
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_served_service_runs_on_uvloop_and_its_egress_is_judged_there(
    backend: str, pong: int, tmp_path: Path
) -> None:
    if backend == "process" and probe().mode == "rlimits":
        pytest.skip("the process backend has no namespaces here: no egress to test")
    allowed, other = f"api.openai.com:{pong}", f"blocked.example.com:{pong}"
    env = {
        "EVALUATOR_HOST_EGRESS_HOSTS": json.dumps({"api.openai.com": "127.0.0.1", "blocked.example.com": "127.0.0.1"}),
        "EVALUATOR_HOST_NETWORK_ALLOW": allowed,
    }
    with serving(tmp_path / "data", backend=backend, env=env) as (client, proc):
        # the loop's extension module is mapped into the serving process only when a uvloop loop was made
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        assert "uvloop/loop." in maps, "the service runs on the default asyncio loop, not uvloop"
        ok, no = f"http://{allowed}/ping", f"http://{other}/"
        body = {"language": "python", "code": FETCH_PY, "network": [allowed], "inputs": {"urls": [ok, no]}}
        result = client.post("/v1/evaluate", json=body, timeout=300).json()
        assert result["status"] == "ok", result
        assert result["details"]["got"] == {ok: "pong /ping", no: "HTTP 403"}
        assert "egress-forwarder" not in result["details"]["threads"]  # the port was handed to the gate
        assert [(e["host"], e["status"].split(":")[0]) for e in result["details"]["egress"]] == [
            (allowed, "ok"),
            (other, "refused"),
        ]
