"""A loopback OpenAI-compatible server for model-target tests and the bench: a real HTTP/1.1 server
(asyncio on a thread of its own, keep-alive) speaking ``POST /v1/chat/completions``. Its own cost per call
is tens of microseconds, so a fixed ``delay_s`` is what a call takes (http.server's threads and header
parser added ~50 ms a round of 64 calls in the bench).

What it answers: ``{"choices": [{"message": {"role": "assistant", "content": "A: <last user message>"},
"finish_reason": "stop"}], "usage": {...}}`` after ``delay_s``. What a test can script:

* ``plan(prompt, [429, 500, 200])``: the statuses the calls whose last user message is ``prompt`` get,
  in turn (then 200); a 429 carries ``Retry-After: retry_after`` (seconds, or an HTTP date if a str);
* ``hold``: an Event; while it is clear, calls whose prompt ``held(prompt)`` says so wait for it (and,
  with ``drop_held`` set when they wake, end their connection without an answer);
* a planned 401 echoes the request's ``Authorization`` header in its body (a hostile endpoint);
* ``echo_auth``: a 200's text ends with the request's ``Authorization`` header (a hostile endpoint that
  echoes the key in a successful answer);
* ``status_all``: every call gets this status (a wrong key: 401), ``models``: a call naming a model not in
  it gets 404 ``model_not_found`` (OpenAI's answer);
* a request with ``tools`` (function calling, as ``autoevals``' classifiers send) is answered with a
  ``tool_calls`` message calling the first tool with ``{"choice": ..., "reasons": ...}``: the choice is
  ``choose(prompt, choices)`` (the tool's ``choice`` enum; by default its first entry);
* ``max_in_flight``: a judge with a concurrency limit — a call arriving while that many are being
  answered gets 429 at once (``Retry-After``), and every call's (arrival, status) is in ``statuses``;
* it counts, per prompt, the calls received and the answers written in full (``received``,
  ``answered``), the most calls in flight at once (``peak``), and keeps every request's headers.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["LLMServer", "llm_server"]


class LLMServer:
    """The server's state (see the module docstring); ``port`` once started."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.retry_after: float | str = 1
        self.lock = threading.Lock()
        self.received: Counter[str] = Counter()
        self.arrivals: dict[str, list[float]] = {}  # per prompt: when each call arrived (time.monotonic)
        self.answered: Counter[str] = Counter()
        self.headers: list[dict[str, str]] = []
        self.bodies: list[dict[str, Any]] = []
        self.in_flight = 0
        self.peak = 0
        self.hold = threading.Event()
        self.hold.set()
        self.held: Callable[[str], bool] = lambda _prompt: False
        self.drop_held = False
        self.echo_auth = False
        self.status_all: int | None = None
        self.models: set[str] | None = None
        self.max_in_flight: int | None = None
        self.statuses: list[tuple[float, int]] = []  # with max_in_flight: every call's (arrival, status)
        self.choose: Callable[[str, list[str]], str] = lambda _prompt, choices: choices[0] if choices else ""
        self._plans: dict[str, list[int]] = {}
        self.port = 0

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


async def _serve_connection(server: LLMServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """HTTP/1.1 with keep-alive: one request after the other on the connection, until the client closes it."""
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, path = lines[0].split(" ")[:2]
            headers = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip()] = value.strip()
            lower = {k.lower(): v for k, v in headers.items()}
            body = await reader.readexactly(int(lower.get("content-length", "0")))
            answer = await _answer(server, method, path, headers, body)
            if answer is None:  # a held call dropped: no answer, the connection ends
                return
            writer.write(answer)
            await writer.drain()
            if path.endswith("/chat/completions") and answer.startswith(b"HTTP/1.1 200"):
                with server.lock:
                    server.answered[_prompt(json.loads(body or b"{}"))] += 1
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()


def _prompt(body: dict[str, Any]) -> str:
    users = [m.get("content", "") for m in body.get("messages") or [] if m.get("role") == "user"]
    return str(users[-1]) if users else ""


def _http(status: int, payload: bytes, extra: dict[str, str] | None = None) -> bytes:
    reason = {200: "OK", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests"}.get(status, "Error")
    head = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/json", f"Content-Length: {len(payload)}"]
    head += [f"{name}: {value}" for name, value in (extra or {}).items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + payload


async def _answer(server: LLMServer, method: str, path: str, headers: dict[str, str], raw: bytes) -> bytes | None:
    if method != "POST" or not path.endswith("/chat/completions"):
        return _http(404, b'{"error": {"message": "not found"}}')
    body = json.loads(raw or b"{}")
    prompt = _prompt(body)
    with server.lock:
        server.received[prompt] += 1
        server.arrivals.setdefault(prompt, []).append(time.monotonic())
        server.headers.append(headers)
        server.bodies.append(body)
        if server.max_in_flight is not None:
            over = server.in_flight >= server.max_in_flight
            server.statuses.append((time.monotonic(), 429 if over else 200))
            if over:
                refusal = b'{"error": {"message": "too many at once"}}'
                return _http(429, refusal, {"Retry-After": str(server.retry_after)})
        server.in_flight += 1
        server.peak = max(server.peak, server.in_flight)
    try:
        if server.held(prompt):
            await asyncio.get_running_loop().run_in_executor(None, server.hold.wait, 120)
            if server.drop_held:
                return None
        if server.delay_s:
            await asyncio.sleep(server.delay_s)
        status = server.status_all or server._status(prompt)
        if server.models is not None and body.get("model") not in server.models:
            missing = {
                "error": {"message": f"The model `{body.get('model')}` does not exist", "code": "model_not_found"}
            }
            return _http(404, json.dumps(missing).encode())
        if status == 429:
            return _http(429, b'{"error": {"message": "slow down"}}', {"Retry-After": str(server.retry_after)})
        if status == 401:
            echoed = json.dumps({"error": {"message": f"bad key: {headers.get('Authorization')}"}})
            return _http(401, echoed.encode())
        if status != 200:
            return _http(status, b'{"error": {"message": "upstream trouble"}}')
        text = f"A: {prompt}" + (f" (auth: {headers.get('Authorization')})" if server.echo_auth else "")
        words = len(prompt.split()) + 1
        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish = "stop"
        if body.get("tools"):
            message, finish = _tool_call(server, prompt, body["tools"][0]), "tool_calls"
        answer = {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": words,
                "completion_tokens": len(text.split()),
                "total_tokens": words + len(text.split()),
            },
        }
        return _http(200, json.dumps(answer).encode())
    finally:
        with server.lock:
            server.in_flight -= 1


def _tool_call(server: LLMServer, prompt: str, tool: dict[str, Any]) -> dict[str, Any]:
    """The assistant message calling ``tool`` (an OpenAI ``{"type": "function", "function": {...}}``) with
    the choice ``server.choose`` makes among the tool's ``choice`` enum."""
    function = tool.get("function") or {}
    properties = (function.get("parameters") or {}).get("properties") or {}
    choices = [str(c) for c in (properties.get("choice") or {}).get("enum") or []]
    arguments = {"choice": server.choose(prompt, choices), "reasons": f"judged: {prompt}"}
    call = {
        "id": "call-test",
        "type": "function",
        "function": {"name": function.get("name"), "arguments": json.dumps(arguments)},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


@contextmanager
def llm_server(delay_s: float = 0.0) -> Iterator[LLMServer]:
    """A started :class:`LLMServer` on 127.0.0.1 (a free port; its own event loop on a thread), shut down
    afterwards."""
    server = LLMServer(delay_s)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, asyncio.Server] = {}

    async def start() -> None:
        listener = await asyncio.start_server(lambda r, w: _serve_connection(server, r, w), "127.0.0.1", 0, backlog=512)
        holder["server"] = listener
        server.port = int(listener.sockets[0].getsockname()[1])
        started.set()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield server
    finally:
        server.hold.set()

        async def stop() -> None:
            holder["server"].close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
