"""A rule's budgets under load (issue 51): ``scores_per_minute`` holds its pace, and a judge's 429s slow the
rule down without a row failed.

Both against the real service (``evaluator-host serve``, process backend, SQLite in a fresh data dir), the
traffic real OTLP/HTTP JSON to ``POST /v1/traces`` (two-span traces, ``TRACES_PER_POST`` a request, paced
by a sender thread), the outcome read from the service's own ``online_scores`` table once it is done.

* :func:`measure_pace` — a rule of ``scores_per_minute: 600`` (``BUDGET_SPM``) on a trivial evaluator under
  50 traces/s (``BUDGET_RATE``) for 60 s (``BUDGET_SECONDS``): waits until every trace is scored (the
  backlog drains at the budget: five minutes for 3,000); every trace must end ``scored`` (none dropped);
  the pace is the scores of each full minute from the first score, and the most in any 60-s window.
* :func:`measure_429` — a loopback OpenAI-compatible judge (``tests/support/llm_server.py``) that takes
  ``JUDGE_AT_ONCE`` calls at once and answers 429 (``Retry-After: 0.5``) to any more, each answer after
  ``JUDGE_DELAY_S``; the evaluator is async (its rows of a round await the judge together), its client
  retries a 429 twice after ``Retry-After`` as an SDK does, then fails. The traffic is more than the judge
  answers, so the rule always has rows waiting; unslowed, its rounds put twice the judge's limit in flight
  at once (``max_in_flight`` 16 a worker): half the calls refused, as the first seconds show. The egress
  proxy sees the 429s (plain ``http://`` through the proxy), the rule's window halves and widens again
  (AIMD); the figures are the calls refused in the first 10 s, the first minute and after it, and the rows
  failed for a rate limit (must be 0).

Run alone: ``.venv/bin/python -m bench.budget_bench`` (``BUDGET_MODE=pace|429|both``, default both).
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import serving, verdict

SPM = int(os.environ.get("BUDGET_SPM", "600"))
RATE = float(os.environ.get("BUDGET_RATE", "50"))
SECONDS = float(os.environ.get("BUDGET_SECONDS", "60"))
TRACES_PER_POST = 5
JUDGE_AT_ONCE, JUDGE_DELAY_S = 8, 0.5
# traffic of the 429 run: traces/s, seconds — more than the judge answers (JUDGE_AT_ONCE / JUDGE_DELAY_S = 16/s),
# so the rule has a backlog and would send all it can the whole run
JUDGE_RATE, JUDGE_SECONDS = 24.0, 60.0
SCORING_SLOTS = 4  # online_scoring_concurrency (the default): 4 rounds x 64 rows could be in flight
FAST = {
    "EVALUATOR_HOST_BACKEND": "process",
    "EVALUATOR_HOST_ONLINE_QUIET_PERIOD_S": "0.5",
}

JUDGE = """import asyncio, json, os
from urllib.parse import urlsplit

PROXY = urlsplit(os.environ["HTTP_PROXY"])
BASE = os.environ["OPENAI_BASE_URL"]


async def call(prompt):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": prompt}]}).encode()
    host = urlsplit(BASE).netloc
    reader, writer = await asyncio.open_connection(PROXY.hostname, PROXY.port)
    writer.write(f"POST {BASE}/chat/completions HTTP/1.1\\r\\nHost: {host}\\r\\nContent-Type: application/json\\r\\n"
                 f"Content-Length: {len(body)}\\r\\nConnection: close\\r\\n\\r\\n".encode() + body)
    await writer.drain()
    head = await reader.readuntil(b"\\r\\n\\r\\n")  # read to its length, not its end: a judge may keep it open
    lines = head.decode("latin-1").split("\\r\\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    payload = await reader.readexactly(int(headers.get("content-length", "0")))
    writer.close()
    return int(lines[0].split()[1]), headers, payload


async def evaluate(inputs, outputs, trace):
    for attempt in range(3):  # as an SDK does: a 429 retried twice, after its Retry-After
        status, headers, payload = await call(outputs)
        if status != 429:
            break
        if attempt < 2:
            await asyncio.sleep(float(headers.get("retry-after", "1")))
    if status != 200:
        raise RuntimeError(f"the judge answered {status}")
    answer = json.loads(payload)
    return 1.0 if answer["choices"][0]["message"]["content"] == "A: " + outputs else 0.0
"""


def _trace(i: int, now_ns: int) -> dict[str, Any]:
    trace_id = os.urandom(16).hex()
    root, child = os.urandom(8).hex(), os.urandom(8).hex()
    out = {"key": "ag.data.outputs", "value": {"stringValue": f"answer-{i}"}}
    return {
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "bench-budget"}}]},
        "scopeSpans": [
            {
                "spans": [
                    {
                        "traceId": trace_id,
                        "spanId": root,
                        "name": "chat",
                        "kind": 2,
                        "attributes": [out],
                        "startTimeUnixNano": str(now_ns),
                        "endTimeUnixNano": str(now_ns + 5_000_000),
                    },
                    {
                        "traceId": trace_id,
                        "spanId": child,
                        "parentSpanId": root,
                        "name": "llm",
                        "kind": 3,
                        "startTimeUnixNano": str(now_ns + 1000),
                        "endTimeUnixNano": str(now_ns + 4_000_000),
                    },
                ]  # fmt: skip
            }
        ],
    }


def send(base: str, rate: float, seconds: float) -> int:
    """Send ``rate`` traces/s for ``seconds`` (posts of :data:`TRACES_PER_POST`); how many were accepted."""
    total = int(rate * seconds)
    sent = 0
    started = time.monotonic()
    with httpx.Client(base_url=base, timeout=30) as client:
        while sent < total:
            n = min(TRACES_PER_POST, total - sent)
            batch = {"resourceSpans": [_trace(sent + k, time.time_ns()) for k in range(n)]}
            got = client.post("/v1/traces", json=batch)
            if got.status_code != 200:
                raise RuntimeError(f"POST /v1/traces answered {got.status_code}: {got.text[:300]}")
            sent += n
            time.sleep(max(0.0, started + sent / rate - time.monotonic()))
    return sent


Row = tuple[str, str | None, str | None, str | None]  # state, status, scored_at, "error type: message"


def _rows(data_dir: str, rule: str) -> list[Row]:
    """(state, status, scored_at, error type) of the rule's rows, from the service's database."""
    with sqlite3.connect(Path(data_dir) / "evaluator-host.db") as db:
        rows = db.execute("SELECT state, status, scored_at, result FROM online_scores WHERE rule_id = ?", (rule,))
        out = []
        for state, status, scored_at, result in rows:
            error = (json.loads(result).get("error") or {}) if result else {}
            out.append((state, status, scored_at, f"{error.get('type')}: {error.get('message')}" if error else None))
        return out


def _rule(client: httpx.Client, body: dict[str, Any], limits: dict[str, Any] | None) -> str:
    made = client.post("/v1/evaluators", json=body)
    made.raise_for_status()
    rule = client.post("/v1/online-rules", json={"evaluator_id": made.json()["id"], "limits": limits})
    rule.raise_for_status()
    return str(rule.json()["id"])


def _wait_done(data_dir: str, rule: str, total: int, timeout_s: float) -> list[Row]:
    deadline = time.monotonic() + timeout_s
    while True:
        rows = _rows(data_dir, rule)
        if sum(1 for r in rows if r[0] in ("done", "dropped")) >= total or time.monotonic() > deadline:
            return rows
        time.sleep(1.0)


@dataclass
class Pace:
    traces: int
    scored: int
    dropped: int
    minutes: list[int]  # scores in each full minute from the first score
    max_window: int  # the most scores in any 60-s window
    pace: float  # scores a minute over the full minutes
    wall_s: float


def measure_pace() -> Pace:
    with tempfile.TemporaryDirectory(prefix="evh-bench-budget-") as data_dir, serving(data_dir, FAST) as (base, _p):
        with httpx.Client(base_url=base, timeout=60) as client:
            code = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
            body = {"name": "one", "language": "python", "code": code}
            rule = _rule(client, body, {"scores_per_minute": SPM})
            started = time.monotonic()
            traces = send(base, RATE, SECONDS)
            rows = _wait_done(data_dir, rule, traces, 60 * (traces / SPM) + 240)
            wall = time.monotonic() - started
    times = sorted(datetime.fromisoformat(r[2]).timestamp() for r in rows if r[0] == "done" and r[2])
    first = times[0] if times else 0.0
    full = int((times[-1] - first) // 60) if times else 0
    minutes = [sum(1 for t in times if first + 60 * m <= t < first + 60 * (m + 1)) for m in range(full)]
    most, j = 0, 0
    for i, t in enumerate(times):  # sliding 60-s window
        while times[j] <= t - 60:
            j += 1
        most = max(most, i - j + 1)
    pace = sum(minutes) / len(minutes) if minutes else 0.0
    done = sum(1 for r in rows if r[0] == "done" and r[1] == "ok")
    return Pace(traces, done, sum(1 for r in rows if r[0] == "dropped"), minutes, most, pace, wall)


def _spread(values: list[int]) -> tuple[int, float, int]:
    return (min(values), sum(values) / len(values), max(values)) if values else (0, 0.0, 0)


@dataclass
class Limited:
    traces: int
    scored: int
    failed_rate: int  # rows stored failed for a rate limit
    failed: int  # rows stored with any other failure
    start_calls: int  # the first 10 s: before the window has come down
    start_refused: int
    first_calls: int
    first_refused: int
    later_calls: int
    later_refused: int
    peak: int
    wall_s: float
    window: tuple[int, float, int]  # the rule's window after the first minute: min, mean, max


def measure_429() -> Limited:
    from tests.support.llm_server import llm_server

    with llm_server(delay_s=JUDGE_DELAY_S) as judge, tempfile.TemporaryDirectory(prefix="evh-bench-429-") as data_dir:
        judge.max_in_flight, judge.retry_after = JUDGE_AT_ONCE, 0.5
        host = f"llm.local:{judge.port}"
        env = {
            **FAST,
            "EVALUATOR_HOST_NETWORK_ALLOW": host,
            "EVALUATOR_HOST_EGRESS_HOSTS": json.dumps({"llm.local": "127.0.0.1"}),
            "EVALUATOR_HOST_ONLINE_SCORING_CONCURRENCY": str(SCORING_SLOTS),
        }
        with serving(data_dir, env) as (base, _p), httpx.Client(base_url=base, timeout=60) as client:
            body = {
                "name": "judge",
                "language": "python",
                "code": JUDGE,
                "network": [host],
                "settings": {"env": {"OPENAI_BASE_URL": f"http://{host}/v1"}, "max_in_flight": 2 * JUDGE_AT_ONCE},
            }
            rule = _rule(client, body, None)
            started = time.monotonic()
            sender = threading.Thread(target=send, args=(base, JUDGE_RATE, JUDGE_SECONDS))
            sender.start()
            windows: list[tuple[float, int]] = []  # (when, the rule's window) every 0.5 s: its pace
            stop = threading.Event()

            def sample() -> None:
                with httpx.Client(base_url=base, timeout=30) as c:
                    while not stop.wait(0.5):
                        pace = c.get(f"/v1/online-rules/{rule}/stats", params={"bucket": 60}).json()["pace"]
                        windows.append((time.monotonic(), int(pace["concurrency"])))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            sender.join()
            traces = int(JUDGE_RATE * JUDGE_SECONDS)
            rows = _wait_done(data_dir, rule, traces, 900)
            wall = time.monotonic() - started
            stop.set()
            sampler.join(10)
        statuses = list(judge.statuses)
    t0 = statuses[0][0] if statuses else 0.0
    start = [s for t, s in statuses if t < t0 + 10]
    first = [s for t, s in statuses if t < t0 + 60]
    later = [s for t, s in statuses if t >= t0 + 60]
    done = [r for r in rows if r[0] == "done"]
    rate_failed = sum(1 for r in done if r[1] != "ok" and ("429" in str(r[3]) or str(r[3]).startswith("RateLimited")))
    return Limited(
        traces=traces,
        scored=sum(1 for r in done if r[1] == "ok"),
        failed_rate=rate_failed,
        failed=sum(1 for r in done if r[1] != "ok"),
        start_calls=len(start),
        start_refused=sum(1 for s in start if s == 429),
        first_calls=len(first),
        first_refused=sum(1 for s in first if s == 429),
        later_calls=len(later),
        later_refused=sum(1 for s in later if s == 429),
        peak=judge.peak,
        wall_s=wall,
        window=_spread([w for t, w in windows if t >= started + 60]),
    )


PACE_SECTION = """
## Online budgets: `scores_per_minute` under load (issue 51)

One service (process backend, SQLite), one rule of `scores_per_minute: {spm}` on a trivial evaluator;
{rate:g} traces/s of OTLP/HTTP JSON (two-span traces) for {seconds:g} s: {traces:,} traces. The backlog
drains at the budget; the run ends when every row is done ({wall:.0f} s in all).

| traces | scored | dropped | scores in each full minute from the first | most in any 60 s | pace |
|---|---|---|---|---|---|
| {traces:,} | {scored:,} | {dropped} | {minutes} | {most} | **{pace:.0f}/min** ({off:+.1f}% of the budget) |

Every trace scored, none dropped: **{all_scored}**; pace within 10% of the budget: **{within}**; never
over the budget in any 60 s: **{never_over}**. `python -m bench.budget_bench` runs this section (`BUDGET_MODE=pace`,
`BUDGET_SPM`, `BUDGET_RATE`, `BUDGET_SECONDS`).
"""

LIMITED_SECTION = """
## Online budgets: a judge that answers 429 (issue 51)

A loopback OpenAI-compatible judge that takes {at_once} calls at once and answers 429 (`Retry-After: 0.5`)
to any more, each answer after {delay:g} s; the rule's evaluator is async (`max_in_flight`
{in_flight}: a round's rows await the judge together) and its client retries a 429 twice after
`Retry-After`, as an SDK does, then fails; no `RateLimited` anywhere — the egress proxy reads the
429s (plain `http://`). {rate:g} traces/s for {seconds:g} s ({traces:,} traces: more than the judge
answers, so the rule always has rows waiting), process backend, SQLite,
`online_scoring_concurrency` {slots}; the run ends when every row is done ({wall:.0f} s).

| calls in the first 10 s | refused | in the first minute | refused | after it | refused | most at once | rows scored |
|---|---|---|---|---|---|---|---|
{row}

Rows failed for a rate limit: **{failed_rate}**; failed otherwise: {other}. The rule's window (its
`pace.concurrency`, sampled every 0.5 s) after the first minute: {w_min} to {w_max} rows at once, {w_mean:.1f} on
average (its ceiling: {ceiling}).

0 rows failed for rate limits: **{no_failed}**; fewer than 5% of calls refused after the first minute:
**{under5}**. `python -m bench.budget_bench` runs this section (`BUDGET_MODE=429`).
"""


def render_pace(p: Pace) -> str:
    return PACE_SECTION.format(
        spm=SPM, rate=RATE, seconds=SECONDS, traces=p.traces, wall=p.wall_s, scored=p.scored, dropped=p.dropped,
        minutes=", ".join(str(m) for m in p.minutes) or "-", most=p.max_window, pace=p.pace,
        off=100 * (p.pace - SPM) / SPM, all_scored=verdict(p.scored == p.traces and not p.dropped),
        within=verdict(abs(p.pace - SPM) <= 0.1 * SPM), never_over=verdict(p.max_window <= SPM),
    )  # fmt: skip


def render_429(x: Limited) -> str:
    return LIMITED_SECTION.format(
        at_once=JUDGE_AT_ONCE, delay=JUDGE_DELAY_S, in_flight=2 * JUDGE_AT_ONCE, rate=JUDGE_RATE,
        seconds=JUDGE_SECONDS, traces=x.traces, slots=SCORING_SLOTS, wall=x.wall_s,
        row=(
            f"| {x.start_calls:,} | {x.start_refused:,} ({100 * x.start_refused / max(1, x.start_calls):.1f}%) "
            f"| {x.first_calls:,} | {x.first_refused:,} ({100 * x.first_refused / max(1, x.first_calls):.1f}%) "
            f"| {x.later_calls:,} | {x.later_refused:,} (**{100 * x.later_refused / max(1, x.later_calls):.1f}%**) "
            f"| {x.peak} | {x.scored:,} / {x.traces:,} |"
        ),
        failed_rate=x.failed_rate, other=x.failed - x.failed_rate, w_min=x.window[0], w_mean=x.window[1],
        w_max=x.window[2], ceiling=64 * SCORING_SLOTS,
        no_failed=verdict(x.failed_rate == 0 and x.scored == x.traces),
        under5=verdict(x.later_refused < 0.05 * max(1, x.later_calls)),
    )  # fmt: skip


def main() -> int:
    mode = os.environ.get("BUDGET_MODE", "both")
    if mode in ("429", "both"):
        print(render_429(measure_429()))
    if mode in ("pace", "both"):
        print(render_pace(measure_pace()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
