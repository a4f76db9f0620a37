"""Online scoring at rate steps, from outside: OTLP/JSON traces in, stored scores out; lag, CPU per trace, ceiling.

The real service (process backend, SQLite, every online setting at its default) with one rule and a trivial
Python evaluator. For each rate of ``SCORING_RATE`` (a comma list, traces/s; default ``1000,3000,5000``) the
bench posts OTLP/JSON bodies to ``POST /v1/traces`` for ``SCORING_SECONDS`` (default 20), one body per
``TICK`` holding that tick's traces, each trace of ``SCORING_SPANS`` spans (default 2: a ``chat`` root
around one GenAI ``llm`` child; more: that many ``llm`` children). The span end times are the send time,
so a trace's lag is its stored score's ``scored_at`` − the time its body was posted (one machine, one
clock): receiver, assembly (the settle period, 0.25 s, is in it), routing, claiming, running and
storing. ``SCORING_LEVEL=span``: the rule is span-level over the ``llm`` spans (one score per LLM span,
its lag counted per score).

A step *holds* when every score is stored within ``DRAIN_S`` after the feed ends and its lag p99 is
≤ ``HOLD_P99_S`` (the backlog did not grow). ``SCORING_CEILING=1`` then goes on past the last rate
(×1.25 a step, at most 6 more) until one does not hold: the ceiling is the last rate that held.

CPU per trace (the figure the shared machine's load does not move much): the service's and its sandbox
workers' CPU seconds (``/proc``, every process under the service) from the step's first post until its
last score is stored, over the traces sent — µs per trace.

Run alone: ``SCORING_MODE=steps .venv/bin/python -m bench.scoring_bench`` (or ``-m bench.scoring_steps``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select

from bench.common import Pace, pct, serving
from bench.procs import cpu_s, tree_cpu_s
from evaluator_host.store.db import as_utc, make_engine
from evaluator_host.store.online.rows import OnlineScoreRow as S

RATES = [int(r) for r in os.environ.get("SCORING_RATE", "1000,3000,5000").split(",")]
SECONDS = int(os.environ.get("SCORING_SECONDS", "20"))
SPANS = int(os.environ.get("SCORING_SPANS", "2"))
LEVEL = os.environ.get("SCORING_LEVEL", "trace")
CEILING = os.environ.get("SCORING_CEILING", "0") == "1"
CODE = "def evaluate(inputs, outputs, trace):\n    return outputs == '4'\n"
TICK = 0.1
DRAIN_S = 10.0
HOLD_P99_S = 2.0

_ROOT = (
    '{{"traceId":"{t}","spanId":"{r}","name":"chat","kind":1,"startTimeUnixNano":"{s}","endTimeUnixNano":"{e}",'
    '"attributes":[{{"key":"ag.data.inputs","value":{{"stringValue":"2+2?"}}}},'
    '{{"key":"ag.data.outputs","value":{{"stringValue":"4"}}}}]}}'
)
_LLM = (
    '{{"traceId":"{t}","spanId":"{c}","parentSpanId":"{r}","name":"llm","kind":3,"startTimeUnixNano":"{s}",'
    '"endTimeUnixNano":"{e}","attributes":[{{"key":"gen_ai.operation.name","value":{{"stringValue":"chat"}}}},'
    '{{"key":"gen_ai.request.model","value":{{"stringValue":"m"}}}},'
    '{{"key":"gen_ai.prompt","value":{{"stringValue":"2+2?"}}}},'
    '{{"key":"gen_ai.completion","value":{{"stringValue":"4"}}}}]}}'
)
_HEAD = '{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"bench-app"}}]},'


def _body(n: int, ns: int) -> tuple[bytes, list[str]]:
    """One OTLP/JSON body of ``n`` traces ended at ``ns``; its trace ids."""
    spans, ids = [], []
    for _ in range(n):
        t, r = os.urandom(16).hex(), os.urandom(8).hex()
        ids.append(t)
        for _ in range(SPANS - 1):
            spans.append(_LLM.format(t=t, r=r, c=os.urandom(8).hex(), s=ns - 1000, e=ns - 10))
        spans.append(_ROOT.format(t=t, r=r, s=ns - 2000, e=ns))
    body = _HEAD + '"scopeSpans":[{"scope":{"name":"bench"},"spans":[' + ",".join(spans) + "]}]}]}"
    return body.encode(), ids


def _done(engine: Any, rule: str) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(select(func.count()).where(S.rule_id == rule, S.state == "done")) or 0)


def step(client: httpx.Client, engine: Any, pid: int, rule: str, rate: int) -> dict[str, Any]:
    """Feed ``rate`` traces/s for ``SECONDS``; wait for every score; the figures of the step."""
    before = _done(engine, rule)
    sent: dict[str, float] = {}
    per_tick = max(1, round(rate * TICK))
    load0 = os.getloadavg()[0]
    cpu0, own0 = tree_cpu_s(pid), cpu_s(pid)
    spy = None
    if os.environ.get("SCORING_SPY"):  # a profile of the service process (raw stacks, py-spy of the venv)
        argv = [str(Path(sys.executable).with_name("py-spy")), "record", "-p", str(pid), "-d", str(SECONDS - 2)]
        argv += ["-r", "100", "--gil", "-f", "raw", "-o", f"{os.environ['SCORING_SPY']}-{rate}.txt", "--nonblocking"]
        spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pace = Pace(round(SECONDS / TICK), TICK)
    for _ in pace:
        at = time.time()
        body, ids = _body(per_tick, time.time_ns())
        client.post("/v1/traces", content=body, headers={"content-type": "application/json"}).raise_for_status()
        sent.update((t, at) for t in ids)
    fed_s, behind = time.monotonic() - pace.start, pace.behind
    want = before + len(sent) * (SPANS - 1 if LEVEL == "span" else 1)
    deadline = time.monotonic() + DRAIN_S
    while (got := _done(engine, rule)) < want and time.monotonic() < deadline:
        time.sleep(0.1)
    drained = got >= want
    while (got := _done(engine, rule)) < want and time.monotonic() < deadline + 120:
        time.sleep(0.2)  # past the drain bound: not held, but the next step starts on an empty queue
    cpu, own = tree_cpu_s(pid) - cpu0, cpu_s(pid) - own0
    if spy is not None:
        spy.wait(60)
    query = select(S.trace_id, S.scored_at).where(S.rule_id == rule, S.state == "done")
    with engine.connect() as conn:
        lags = [as_utc(s).timestamp() - sent[t] for t, s in conn.execute(query) if t in sent]
    p50, p99 = (pct(lags, 50), pct(lags, 99)) if lags else (None, None)
    return {
        "rate": rate,
        "sent": len(sent),
        "scores": len(lags),
        "fed_rate": len(sent) / fed_s,
        "behind_s": behind,
        "lag_p50_s": p50,
        "lag_p99_s": p99,
        "lag_max_s": max(lags) if lags else None,
        "cpu_us_per_trace": cpu / max(len(sent), 1) * 1e6,
        "service_cpu_us_per_trace": own / max(len(sent), 1) * 1e6,
        "held": drained and p99 is not None and p99 <= HOLD_P99_S,
        "load": (load0, os.getloadavg()[0]),
        "at": time.strftime("%H:%M UTC", time.gmtime()),
    }


def measure_steps() -> list[dict[str, Any]]:
    """Every step of ``SCORING_RATE`` (then the ceiling search when asked) on one service."""
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="evaluator-host-bench-steps-") as data_dir:
        with serving(data_dir, {"EVALUATOR_HOST_BACKEND": "process"}) as (base, proc):
            with httpx.Client(base_url=base, timeout=60) as client:
                ev = client.post("/v1/evaluators", json={"name": "trivial", "language": "python", "code": CODE})
                ev_id = ev.json()["id"]
                body = {"cases": [{"inputs": {"q": "2+2?"}, "outputs": "4"}]}
                for _ in range(20):  # the runtime warm, as it is for a service already scoring
                    client.post(f"/v1/evaluators/{ev_id}/evaluate", json=body).raise_for_status()
                rule: dict[str, Any] = {"evaluator_id": ev_id, "sampling_rate": 1.0}
                if LEVEL == "span":
                    rule["target"] = {"level": "span"}
                    rule["filter"] = {"attributes": [{"key": "gen_ai.operation.name", "equals": "chat"}]}
                made = client.post("/v1/online-rules", json=rule)
                made.raise_for_status()
                engine = make_engine(f"sqlite:///{data_dir}/evaluator-host.db")
                rates = list(RATES)
                while rates:
                    rate = rates.pop(0)
                    runs.append(step(client, engine, proc.pid, made.json()["id"], rate))
                    print(json.dumps(runs[-1]), flush=True)
                    grown = len(runs) - len(RATES)
                    if CEILING and not rates and runs[-1]["held"] and grown < 6:
                        rates.append(round(rate * 1.25))
                engine.dispose()
    return runs


def render_steps(runs: list[dict[str, Any]]) -> str:
    """The rows of docs/benchmarks.md's table for these steps, and the ceiling line."""
    rows = []
    for r in runs:
        p50 = "-" if r["lag_p50_s"] is None else f"{r['lag_p50_s'] * 1000:.0f} ms"
        p99 = "-" if r["lag_p99_s"] is None else f"{r['lag_p99_s'] * 1000:.0f} ms"
        rows.append(
            f"| {r['rate']} ({r['fed_rate']:.0f} sent) | {p50} | {p99} | {r['cpu_us_per_trace']:.0f} µs | "
            f"{r['scores']} scores | {'held' if r['held'] else 'NOT held'} | {r['at']}, load "
            f"{r['load'][0]:.1f}→{r['load'][1]:.1f} |"
        )
    held = [r["rate"] for r in runs if r["held"]]
    above = [r["rate"] for r in runs if not r["held"] and r["rate"] > max(held or [0])]
    ceiling = (f"ceiling ≥ {max(held)} traces/s" if held else "no step held") + (f", < {min(above)}" if above else "")
    head = "| traces/s (sent/s) | lag p50 | lag p99 | CPU / trace (service + workers) | | | |\n"
    head += "|---|---|---|---|---|---|---|\n"
    return head + "\n".join(rows) + f"\n\n{SPANS} spans a trace, {LEVEL}-level rule: {ceiling}.\n"


if __name__ == "__main__":
    print(render_steps(measure_steps()))
