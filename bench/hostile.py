"""Hostile neighbours: many concurrent clients over good and hostile evaluators; nothing may break.

Twelve evaluators: six good ones (two each in Python, JavaScript and TypeScript) and six hostile
ones (raise, time out in a Python sleep, flood output, exhaust memory, loop forever in JavaScript,
return NaN; the timeouts 0.3 s, as issue 33 measured them). Every client loops over all twelve for
the duration; every answer must be HTTP 200 with the status its evaluator earns (the good ones ``ok``
with the right score) — or, for a hostile one, 429 ``Overloaded`` (admission per evaluator: its queue
is too long) — never a 5xx or a dropped connection. The service's RSS is sampled throughout, and each
evaluator's answer times (p50/p99, against issue 33's goal: a failing evaluator's p99 within 3 × its
timeout + 1 s, a good one's ≤ 300 ms, the mix ≥ 300 evaluations/s).

Each evaluator answers one call before the clients start (``SOAK_WARM=0``: none), so the figures are
those of a mix in steady use; otherwise the twelve first workers start (~1–1.6 s each, all at once on
two cores) inside the measured window and their queued calls are the good evaluators' p99. The first
call of a new evaluator is measured on its own elsewhere (docs/benchmarks.md).

``tests/faults/test_hostile_load.py`` runs it for a few seconds in ``make test``;
``make soak`` runs ``python -m bench.hostile`` (200 clients × 60 s by default, ``SOAK_CLIENTS``,
``SOAK_SECONDS``; backends as arguments, default ``process``) and prints the figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.common import serve, status_mb

GOOD = {
    "python": "def evaluate(inputs, outputs, trace):\n    return outputs == inputs['correct_answer']\n",
    "javascript": "function evaluate(inputs, outputs, trace) {\n  return outputs === inputs.correct_answer\n}\n",
    "typescript": (
        "export function evaluate(inputs: { correct_answer: string }, outputs: string, trace: unknown): boolean {\n"
        "  return outputs === inputs.correct_answer\n}\n"
    ),
}
# name: (code, settings, the status every answer must have); Python unless in JS_HOSTILE
HOSTILE: dict[str, tuple[str, dict[str, Any], str]] = {
    "raise": ("def evaluate(inputs, outputs, trace):\n    raise ValueError('no')\n", {}, "error"),
    "timeout": (
        "import time\n\ndef evaluate(inputs, outputs, trace):\n    time.sleep(5)\n",
        {"timeout_s": 0.3},
        "timeout",
    ),
    "flood": ("def evaluate(inputs, outputs, trace):\n    print('x' * 2_000_000)\n", {}, "output_limit"),
    "memory": (
        "def evaluate(inputs, outputs, trace):\n    b = bytearray(400 << 20)\n",
        {"memory_mb": 64},
        "memory_limit",
    ),
    "loop": ("function evaluate(inputs, outputs, trace) {\n  while (true) {}\n}\n", {"timeout_s": 0.3}, "timeout"),
    "nan": ("def evaluate(inputs, outputs, trace):\n    return float('nan')\n", {}, "invalid_result"),
}
JS_HOSTILE = {"loop"}
CASES = [
    ({"inputs": {"correct_answer": "4"}, "outputs": "4"}, 1.0),
    ({"inputs": {"correct_answer": "4"}, "outputs": "5"}, 0.0),
]


@dataclass
class Tally:
    """What the clients saw."""

    answers: Counter[str] = field(default_factory=Counter)  # "<evaluator>: <http status> <result status>"
    wrong: list[str] = field(default_factory=list)  # answers that were not what the evaluator earns
    connection_errors: int = 0
    server_errors: int = 0
    rss_mb: list[float] = field(default_factory=list)
    seconds: dict[str, list[float]] = field(default_factory=dict)  # evaluator -> each answer's time

    @property
    def total(self) -> int:
        return sum(self.answers.values())


def create_evaluators(client: httpx.Client) -> list[tuple[str, str, str | None]]:
    """The twelve evaluators: (name, path, expected status or None for a good one, scored by its case)."""
    made: list[tuple[str, str, str | None]] = []
    for copy in range(2):
        for language, code in GOOD.items():
            body: dict[str, Any] = {"name": f"good-{language}-{copy}", "language": language, "code": code}
            answer = client.post("/v1/evaluators", json=body)
            answer.raise_for_status()
            made.append((f"good-{language}", f"/v1/evaluators/{answer.json()['id']}/evaluate", None))
    for name, (code, settings, status) in HOSTILE.items():
        language = "javascript" if name in JS_HOSTILE else "python"
        body = {"name": f"hostile-{name}", "language": language, "code": code, "settings": settings}
        answer = client.post("/v1/evaluators", json=body)
        answer.raise_for_status()
        made.append((name, f"/v1/evaluators/{answer.json()['id']}/evaluate", status))
    return made


class Connection:
    """One client's keep-alive HTTP/1.1 connection, written and read by hand.

    The load generator shares the machine's two cores with the service. httpx's ``AsyncClient`` with
    200 connections took ~5 ms of CPU per request here (0.7 of a core at 140 requests/s), so the mix
    measured the client as much as the service; this takes a few tens of µs (as ``wrk`` does for
    ``bench/load_bench.py``, which cannot tell the answers of twelve evaluators apart)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """``POST path`` with the JSON ``body``: (HTTP status, answer body); ``OSError`` or
        ``asyncio.IncompleteReadError`` when the connection fails (the next call opens a new one)."""
        if self._writer is None or self._reader is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        reader, writer = self._reader, self._writer
        try:
            writer.write(
                b"POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (path.encode(), self.host.encode(), self.port, len(body), body)
            )
            head = await reader.readuntil(b"\r\n\r\n")
            fields = head.lower()
            at = fields.find(b"\r\ncontent-length:")
            if at < 0:
                raise OSError(f"an answer without Content-Length: {head[:200]!r}")
            length = int(fields[at + 17 : fields.index(b"\r\n", at + 2)])
            answer = await reader.readexactly(length)
            if b"\r\nconnection: close" in fields:
                self.close()
            return int(head[9:12]), answer
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


async def _client(
    base: str, evaluators: list[tuple[str, str, str | None]], until: float, offset: int, tally: Tally
) -> None:
    address = httpx.URL(base)
    connection = Connection(address.host, address.port or 80)
    bodies = [(json.dumps(body).encode(), score) for body, score in CASES]
    turn = offset
    try:
        while time.monotonic() < until:
            name, path, expected = evaluators[turn % len(evaluators)]
            body, score = bodies[turn % len(bodies)]
            turn += 1
            started = time.monotonic()
            try:
                code, text = await connection.post(path, body)
                tally.seconds.setdefault(name, []).append(time.monotonic() - started)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
                tally.connection_errors += 1
                tally.wrong.append(f"{name}: {type(exc).__name__} {exc}")
                continue
            if code >= 500:
                tally.server_errors += 1
            payload = json.loads(text)
            status = payload.get("status") if code == 200 else payload.get("error", {}).get("type")
            tally.answers[f"{name}: {code} {status}"] += 1
            good = code == 200 and (status == expected if expected else status == "ok" and payload["score"] == score)
            good = good or bool(expected and code == 429 and status == "Overloaded")
            if not good and len(tally.wrong) < 50:
                tally.wrong.append(f"{name}: {code} {text[:300]!r}")
    finally:
        connection.close()


async def _sample_rss(pid: int, until: float, tally: Tally) -> None:
    while time.monotonic() < until:
        if (rss := status_mb(pid)) is not None:
            tally.rss_mb.append(rss)
        await asyncio.sleep(0.25)


async def hammer(base: str, pid: int, clients: int, seconds: float, warm: bool = False) -> Tally:
    """``clients`` concurrent clients over the twelve evaluators for ``seconds``; the service is ``pid``;
    ``warm``: each evaluator answered one call first (its answer not counted)."""
    with httpx.Client(base_url=base, timeout=120) as setup:
        evaluators = create_evaluators(setup)
        for _, path, _ in evaluators if warm else ():
            setup.post(path, json=CASES[0][0])
    tally = Tally()
    until = time.monotonic() + seconds
    await asyncio.gather(
        _sample_rss(pid, until, tally), *(_client(base, evaluators, until, k, tally) for k in range(clients))
    )
    return tally


def report(backend: str, clients: int, seconds: float, tally: Tally) -> str:
    rss = tally.rss_mb or [0.0]
    lines = [
        f"## Hostile neighbours: {backend}, {clients} clients × {seconds:.0f} s, 6 good + 6 hostile evaluators",
        "",
        f"answers: {tally.total} ({tally.total / seconds:,.0f}/s); 5xx: {tally.server_errors}; "
        f"connection errors: {tally.connection_errors}; wrong answers: {len(tally.wrong)}",
        f"service RSS MB: first {rss[0]:.0f}, peak {max(rss):.0f}, last {rss[-1]:.0f} ({len(rss)} samples)",
        "",
        "| evaluator | answers | p50 ms | p99 ms |",
        "|---|---|---|---|",
        *(
            f"| {name} | {len(times)} | {_pct(times, 50) * 1000:.0f} | {_pct(times, 99) * 1000:.0f} |"
            for name, times in sorted(tally.seconds.items())
        ),
        "",
        "| evaluator: HTTP status, result status | answers |",
        "|---|---|",
        *(f"| {key} | {n} |" for key, n in sorted(tally.answers.items())),
    ]
    lines += [f"wrong: {w}" for w in tally.wrong[:10]]
    return "\n".join(lines)


def _pct(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))] if ordered else 0.0


def main(backends: list[str]) -> int:
    clients = int(os.environ.get("SOAK_CLIENTS", "200"))
    seconds = float(os.environ.get("SOAK_SECONDS", "60"))
    warm = os.environ.get("SOAK_WARM", "1") != "0"
    failed = False
    for backend in backends:
        with serve(backend) as (base, data, proc):
            tally = asyncio.run(hammer(base, proc.pid, clients, seconds, warm))
            print(report(backend, clients, seconds, tally))
            failed |= bool(tally.server_errors or tally.connection_errors or tally.wrong)
        if backend == "docker":  # the service has stopped: none of its containers may stay
            left = _containers_left(data)
            print(f"containers of the service left 10 s after it stopped: {left}")
            failed |= left > 0
    return 1 if failed else 0


def _containers_left(data_dir: str) -> int:
    """The managed containers of the service that ran on ``data_dir``, once they had 10 s to go."""
    import docker

    from evaluator_host.sandbox.docker.engine import Engine
    from evaluator_host.settings import Settings

    owner = Engine(Settings(data_dir=data_dir)).owner
    client = docker.from_env(timeout=30)
    try:
        deadline = time.monotonic() + 10
        while True:
            left = client.api.containers(all=True, filters={"label": f"evaluator-host.owner={owner}"})
            if not left or time.monotonic() > deadline:
                return len(left)
            time.sleep(0.5)
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["process"]))
