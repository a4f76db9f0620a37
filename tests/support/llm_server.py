"""A loopback OpenAI-compatible server for model-target tests and the bench: a real HTTP/1.1 server
(threads, keep-alive) speaking ``POST /v1/chat/completions``.

What it answers: ``{"choices": [{"message": {"role": "assistant", "content": "A: <last user message>"},
"finish_reason": "stop"}], "usage": {...}}`` after ``delay_s``. What a test can script:

* ``plan(prompt, [429, 500, 200])``: the statuses the calls whose last user message is ``prompt`` get,
  in turn (then 200); a 429 carries ``Retry-After: retry_after`` (seconds, or an HTTP date if a str);
* ``hold``: an Event; while it is clear, calls whose prompt ``held(prompt)`` says so wait for it (and,
  with ``drop_held`` set when they wake, end their connection without an answer);
* a planned 401 echoes the request's ``Authorization`` header in its body (a hostile endpoint);
* it counts, per prompt, the calls received and the answers written in full (``received``,
  ``answered``), the most calls in flight at once (``peak``), and keeps every request's headers.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["LLMServer", "llm_server"]


class LLMServer:
    """The server's state (see the module docstring); ``port`` once started."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.retry_after: float | str = 1
        self.lock = threading.Lock()
        self.received: Counter[str] = Counter()
        self.answered: Counter[str] = Counter()
        self.headers: list[dict[str, str]] = []
        self.bodies: list[dict[str, Any]] = []
        self.in_flight = 0
        self.peak = 0
        self.hold = threading.Event()
        self.hold.set()
        self.held: Callable[[str], bool] = lambda _prompt: False
        self.drop_held = False
        self._plans: dict[str, list[int]] = {}
        self.port = 0
        self._httpd: ThreadingHTTPServer | None = None

    def plan(self, prompt: str, statuses: list[int]) -> None:
        with self.lock:
            self._plans[prompt] = list(statuses)

    def _status(self, prompt: str) -> int:
        with self.lock:
            plan = self._plans.get(prompt)
            return plan.pop(0) if plan else 200

    def calls(self) -> int:
        with self.lock:
            return sum(self.received.values())


def _handler(server: LLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def _send(self, status: int, body: bytes, extra: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in (extra or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if not self.path.endswith("/chat/completions"):
                self._send(404, b'{"error": {"message": "not found"}}')
                return
            messages = body.get("messages") or []
            users = [m.get("content", "") for m in messages if m.get("role") == "user"]
            prompt = str(users[-1]) if users else ""
            with server.lock:
                server.received[prompt] += 1
                server.headers.append(dict(self.headers.items()))
                server.bodies.append(body)
                server.in_flight += 1
                server.peak = max(server.peak, server.in_flight)
            try:
                if server.held(prompt):
                    server.hold.wait(120)
                    if server.drop_held:
                        self.close_connection = True
                        return
                if server.delay_s:
                    time.sleep(server.delay_s)
                status = server._status(prompt)
                if status == 429:
                    self._send(429, b'{"error": {"message": "slow down"}}', {"Retry-After": str(server.retry_after)})
                    return
                if status == 401:
                    echoed = json.dumps({"error": {"message": f"bad key: {self.headers.get('Authorization')}"}})
                    self._send(401, echoed.encode())
                    return
                if status != 200:
                    self._send(status, b'{"error": {"message": "upstream trouble"}}')
                    return
                text = f"A: {prompt}"
                answer = {
                    "id": "chatcmpl-test",
                    "object": "chat.completion",
                    "model": body.get("model"),
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                    ],
                    "usage": {
                        "prompt_tokens": len(prompt.split()) + 1,
                        "completion_tokens": len(text.split()),
                        "total_tokens": len(prompt.split()) + 1 + len(text.split()),
                    },
                }
                self._send(200, json.dumps(answer).encode())
                with server.lock:
                    server.answered[prompt] += 1
            finally:
                with server.lock:
                    server.in_flight -= 1

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # the bench opens 64+ connections at once


@contextmanager
def llm_server(delay_s: float = 0.0) -> Iterator[LLMServer]:
    """A started :class:`LLMServer` on 127.0.0.1 (a free port), shut down afterwards."""
    server = LLMServer(delay_s)
    httpd = _Server(("127.0.0.1", 0), _handler(server))
    server.port = int(httpd.server_address[1])
    server._httpd = httpd
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.hold.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)
