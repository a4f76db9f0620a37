"""A loopback stand-in for Langfuse's score API (its server stack — ClickHouse, Redis, S3 — cannot run here).

It follows Langfuse's public API reference (the OpenAPI document Langfuse serves at
``/generated/api/openapi.yml``; request type ``CreateScoreRequest`` / ``ScoreBody`` of ``@langfuse/core``
4.x, Langfuse server v3) for exactly the calls evaluator-host makes:

* ``POST /api/public/scores`` — HTTP Basic authorization (username the public key, password the secret
  key; 401 otherwise); a JSON object whose fields are among ``id``, ``traceId``, ``sessionId``,
  ``observationId``, ``datasetRunId``, ``name`` (required), ``value`` (required: a number, or a string for
  ``CATEGORICAL``), ``comment``, ``metadata``, ``environment``, ``dataType`` (``NUMERIC`` | ``BOOLEAN`` |
  ``CATEGORICAL``), ``configId`` (400 for anything else: an unknown field, a wrong type, a ``BOOLEAN``
  that is not 0 or 1); answers 200 ``{"id": …}``. Scores are **upserted on** ``id`` (Langfuse's documented
  behaviour), a random id given when none is sent;
* ``GET /api/public/scores/{scoreId}`` — the stored score (404 when unknown).

``fail_next`` makes the next requests answer 503 (``store_then_fail``: store the score, then answer 503
— the answer lost after the write), to prove retries and that a retried score is recorded once.
``hold`` (an event) keeps each score's request waiting, unanswered and unstored, until it is set (``held``
counts the requests that reached it): a delivery in flight, for its sender to be killed meanwhile.
``down()`` closes the listening socket (a connection is refused: the endpoint is down), ``up()`` listens on
the same port again, the stored scores kept.
"""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["LangfuseStandIn", "langfuse_stand_in"]

FIELDS = {
    "id": str, "traceId": str, "sessionId": str, "observationId": str, "datasetRunId": str, "name": str,
    "value": (int, float, str), "comment": str, "metadata": dict, "environment": str, "dataType": str, "configId": str,
}  # fmt: skip
DATA_TYPES = ("NUMERIC", "BOOLEAN", "CATEGORICAL")


def check(body: Any) -> str | None:
    """Why ``body`` is not a valid ``CreateScoreRequest`` (None: it is)."""
    if not isinstance(body, dict):
        return "body must be an object"
    for name, value in body.items():
        if name not in FIELDS:
            return f"unknown field {name!r}"
        if value is not None and (isinstance(value, bool) or not isinstance(value, FIELDS[name])):
            return f"{name}: wrong type {type(value).__name__}"
    if not body.get("name") or "value" not in body:
        return "name and value are required"
    kind = body.get("dataType")
    if kind is not None and kind not in DATA_TYPES:
        return f"dataType {kind!r}"
    value = body["value"]
    if kind in ("NUMERIC", "BOOLEAN") and not isinstance(value, int | float):
        return f"a {kind} score's value is a number"
    if kind == "BOOLEAN" and value not in (0, 1):
        return "a BOOLEAN score's value is 0 or 1"
    if kind == "CATEGORICAL" and not isinstance(value, str):
        return "a CATEGORICAL score's value is a string"
    return None


@dataclass
class LangfuseStandIn:
    public_key: str
    secret_key: str
    port: int = 0
    scores: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)  # every POST body, as sent
    refused: list[str] = field(default_factory=list)
    fail_next: int = 0
    store_then_fail: bool = False
    hold: threading.Event | None = None
    held: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    down: Callable[[], None] = lambda: None  # set by langfuse_stand_in
    up: Callable[[], None] = lambda: None

    def authorized(self, header: str | None) -> bool:
        want = base64.b64encode(f"{self.public_key}:{self.secret_key}".encode()).decode()
        return header == f"Basic {want}"


@contextmanager
def langfuse_stand_in(public_key: str, secret_key: str) -> Iterator[LangfuseStandIn]:
    """The stand-in serving on 127.0.0.1 (a free port) until the block ends."""
    state = LangfuseStandIn(public_key, secret_key)

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # noqa: N802 - the http.server hook
            raw = self.rfile.read(int(self.headers.get("content-length", 0)))
            if self.path != "/api/public/scores":
                return self._answer(404, {"message": "not found"})
            if not state.authorized(self.headers.get("authorization")):
                return self._answer(401, {"message": "Invalid credentials"})
            if not (self.headers.get("content-type") or "").startswith("application/json"):
                return self._answer(415, {"message": "application/json expected"})
            try:
                body = json.loads(raw)
            except ValueError:
                return self._answer(400, {"message": "invalid JSON"})
            why = check(body)
            if (hold := state.hold) is not None:
                with state.lock:
                    state.held += 1
                hold.wait(120)
            with state.lock:
                state.requests.append(body)
                if why is not None:
                    state.refused.append(why)
                    return self._answer(400, {"message": why})
                if state.fail_next and not state.store_then_fail:
                    state.fail_next -= 1
                    return self._answer(503, {"message": "unavailable"})
                score_id = body.get("id") or str(uuid.uuid4())
                state.scores[score_id] = {**body, "id": score_id}  # upserted on id
                if state.fail_next:
                    state.fail_next -= 1
                    return self._answer(503, {"message": "unavailable after the write"})
            return self._answer(200, {"id": score_id})

        def do_GET(self) -> None:  # noqa: N802
            prefix = "/api/public/scores/"
            if not self.path.startswith(prefix):
                return self._answer(404, {"message": "not found"})
            if not state.authorized(self.headers.get("authorization")):
                return self._answer(401, {"message": "Invalid credentials"})
            with state.lock:
                found = state.scores.get(self.path[len(prefix) :])
            self._answer(200 if found else 404, found or {"message": "score not found"})

        def log_message(self, *_args: Any) -> None:
            pass

    servers: list[ThreadingHTTPServer] = []

    def up() -> None:
        if not servers:
            server = ThreadingHTTPServer(("127.0.0.1", state.port), Handler)  # allow_reuse_address: the same port
            state.port = int(server.server_address[1])
            threading.Thread(target=server.serve_forever, daemon=True).start()
            servers.append(server)

    def down() -> None:
        while servers:
            server = servers.pop()
            server.shutdown()
            server.server_close()

    state.up, state.down = up, down
    up()
    try:
        yield state
    finally:
        down()
