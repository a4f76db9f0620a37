"""The async-judge benchmark section (called by bench/run.py, or ``python -m bench.async_bench [backend]``).

An LLM-judge-shaped evaluator: one call per row to a judge that answers after a fixed 200 ms (a loopback
HTTP server this bench starts, on asyncio: it never is the bottleneck), reached through the service's
egress proxy (the judge is named ``judge.test`` for the proxy, ``EVALUATOR_HOST_EGRESS_HOSTS``). Against
the real service started as a subprocess, in one run:

* the evaluator written ``async def`` (its rows await together, ``max_in_flight`` per worker), a job of
  ``N_ROWS`` rows with ``PARALLELISM`` workers: rows/s from ``POST /v1/jobs`` to ``succeeded``, against
  the in-flight ideal ``workers × max_in_flight / 0.2 s`` (capped by the rows) and the goal;
* baseline, the same evaluator written sync (``urllib``, one row per worker at a time), a job of
  ``N_BASELINE`` rows with the same workers (its rows/s does not depend on the count: 200 ms each);
* the service's CPU seconds (``/proc/<pid>/stat``, egress proxy included) per row of the async job;
* with ``ASYNC_BENCH_HOPS=1``, one more job of the same rows with the evaluator stamping its own times
  (``TIMED_CODE``: the same client, ``time.time()`` before the connect, after it and after the answer,
  returned in ``details``) and the judge its own (a request's head read, its answer written): where a
  row's time beyond the judge's 200 ms goes, hop by hop, and the CPU per row of each process on the path
  (the service, each of its sandbox processes on the process backend — a container's are not its
  descendants —, this one). One clock: the sandbox shares the host's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.async_outside import outside
from bench.common import serving, verdict
from bench.procs import cpu_s, descendants, spy

N_ROWS, N_BASELINE, LATENCY_S = 2_000, 100, 0.2
PARALLELISM, IN_FLIGHT = 2, 64
GOAL_RPS, GOAL_RATIO = 250.0, 0.95  # issue 55: ≥ 0.95× the in-flight ideal (issue 31: 0.8×)
ADMIN = "bench-admin"

ASYNC_CODE = """import asyncio, json, os
from urllib.parse import urlsplit

PROXY = urlsplit(os.environ["HTTP_PROXY"])


async def evaluate(inputs, outputs, trace):
    url = inputs["url"]
    reader, writer = await asyncio.open_connection(PROXY.hostname, PROXY.port)
    writer.write(f"GET {url} HTTP/1.1\\r\\nHost: {urlsplit(url).netloc}\\r\\nConnection: close\\r\\n\\r\\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    verdict = json.loads(data.partition(b"\\r\\n\\r\\n")[2])
    return {"score": 1.0 if verdict["ok"] else 0.0}
"""

# ASYNC_CODE with its own times returned (ASYNC_BENCH_HOPS=1): t0 before the connect, t1 after it, t2 after the answer
TIMED_CODE = (
    ASYNC_CODE.replace("    url = inputs[", "    t0 = time.time()\n    url = inputs[")
    .replace("    writer.write(", "    t1 = time.time()\n    writer.write(")
    .replace("    writer.close()", "    t2 = time.time()\n    writer.close()")
    .replace("import asyncio, json, os", "import asyncio, json, os, time")
    .replace("0.0}", '0.0, "t0": t0, "t1": t1, "t2": t2}')
)

SYNC_CODE = """import json, urllib.request


def evaluate(inputs, outputs, trace):
    verdict = json.loads(urllib.request.urlopen(inputs["url"], timeout=10).read())
    return {"score": 1.0 if verdict["ok"] else 0.0}
"""


@dataclass
class AsyncFigures:
    backend: str = ""
    async_rps: float = 0.0
    sync_rps: float = 0.0
    async_row_ms: float = 0.0  # mean duration of a row, as its result says (the judge call and the path to it)
    sync_row_ms: float = 0.0
    judge_peak: int = 0  # requests the judge held at once, at most (async job)
    cpu_ms_per_row: float = 0.0  # the service's CPU per row of the async job
    bench_ms_per_row: float = 0.0  # this process's (the judge's and the client's)
    hops: list[tuple[str, float, float, float]] = field(default_factory=list)  # (hop, mean, p50, p90 ms)
    cpu: list[tuple[str, float]] = field(default_factory=list)  # (process, CPU ms per row) of the timed job
    hops_rps: float = 0.0
    outside_rps: float = 0.0  # the same code in host processes straight to the judge (bench/async_outside.py)
    outside_row_ms: float = 0.0


class Judge:
    """A loopback judge on its own asyncio loop (a thread): every request answered after ``LATENCY_S``."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.now = self.peak = 0
        self.port = 0
        self.times: dict[bytes, tuple[float, float]] | None = None  # path -> (head read, answer written)
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._answer, "127.0.0.1", 0, backlog=1024))
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            arrived = time.time()
            self.now += 1
            self.peak = max(self.peak, self.now)
            await asyncio.sleep(LATENCY_S)
            self.now -= 1
            body = b'{"ok": true}'
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                b"connection: close\r\n\r\n%s" % (len(body), body)
            )
            if self.times is not None:
                self.times[head.split(b" ", 2)[1]] = (arrived, time.time())
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


def _job(
    client: httpx.Client, headers: dict[str, str], evaluator_id: str, rows: list[dict[str, Any]]
) -> tuple[float, float]:
    """(rows/s of a job over ``rows``, POST → succeeded; the mean duration of its first 1,000 rows, ms)."""
    body = {"evaluator_id": evaluator_id, "rows": rows, "parallelism": PARALLELISM}
    start = time.perf_counter()
    response = client.post("/v1/jobs", json=body, headers=headers)
    response.raise_for_status()
    job_id = response.json()["id"]
    while True:
        job = client.get(f"/v1/jobs/{job_id}", params={"wait_s": 60}, headers=headers).json()
        if job["status"] not in ("queued", "running"):
            break
    elapsed = time.perf_counter() - start
    data = client.get(f"/v1/jobs/{job_id}/results", params={"limit": 1000}, headers=headers).json()["data"]
    if job["status"] != "succeeded" or job["progress"]["failed"]:
        failed = [r["result"] for r in data if r["result"]["status"] != "ok"][:1]
        raise RuntimeError(f"the bench job did not succeed: {json.dumps(job)[:600]} {json.dumps(failed)[:3000]}")
    return len(rows) / elapsed, statistics.fmean(r["result"]["duration_ms"] for r in data)


def measure(backend: str = "process") -> AsyncFigures:
    figures = AsyncFigures(backend=backend)
    judge = Judge()
    env = {
        "EVALUATOR_HOST_BACKEND": backend,
        "EVALUATOR_HOST_ADMIN_KEY": ADMIN,
        "EVALUATOR_HOST_EGRESS_HOSTS": json.dumps({"judge.test": "127.0.0.1"}),
        "EVALUATOR_HOST_MAX_IN_FLIGHT": str(IN_FLIGHT),
    }
    try:
        with (
            tempfile.TemporaryDirectory(prefix="evaluator-host-bench-") as data_dir,
            serving(data_dir, env) as (base, proc),
            httpx.Client(base_url=base, timeout=600) as client,
        ):
            op = {"Authorization": f"Bearer {ADMIN}"}
            ws = client.post("/v1/workspaces", json={"name": "bench"}, headers=op).json()
            key = client.post(f"/v1/workspaces/{ws['id']}/keys", json={"name": "k"}, headers=op).json()["key"]
            dest = f"judge.test:{judge.port}"
            client.patch(f"/v1/workspaces/{ws['id']}", json={"network_allow": [dest]}, headers=op).raise_for_status()
            headers = {"Authorization": f"Bearer {key}"}
            ids = {}
            for name, code in (("async", ASYNC_CODE), ("sync", SYNC_CODE), ("timed", TIMED_CODE)):
                body = {"name": f"judge-{name}", "language": "python", "code": code, "network": [dest]}
                created = client.post("/v1/evaluators", json=body, headers=headers)
                created.raise_for_status()
                ids[name] = created.json()["id"]
            rows = [{"url": f"http://{dest}/judge/{i}"} for i in range(N_ROWS)]
            _job(client, headers, ids["async"], rows[: PARALLELISM * 4 * IN_FLIGHT])  # warm: every lane's worker
            judge.peak = 0
            cpu, mine = cpu_s(proc.pid), time.process_time()
            spies = spy([proc.pid]) if os.environ.get("ASYNC_BENCH_SPY") else []
            figures.async_rps, figures.async_row_ms = _job(client, headers, ids["async"], rows)
            figures.cpu_ms_per_row = (cpu_s(proc.pid) - cpu) * 1000 / N_ROWS
            figures.bench_ms_per_row = (time.process_time() - mine) * 1000 / N_ROWS
            figures.judge_peak = judge.peak
            for recording in spies:
                recording.wait(timeout=60)
            # the baseline: the same code outside the sandbox, straight to the same judge, right after
            figures.outside_rps, figures.outside_row_ms = outside(
                ASYNC_CODE, [r["url"] for r in rows], judge.port, PARALLELISM, IN_FLIGHT
            )
            if os.environ.get("ASYNC_BENCH_HOPS"):
                _hops(figures, client, headers, ids["timed"], dest, judge, proc.pid)
            _job(client, headers, ids["sync"], rows[:PARALLELISM])  # warm
            figures.sync_rps, figures.sync_row_ms = _job(client, headers, ids["sync"], rows[:N_BASELINE])
    finally:
        judge.stop()
    return figures


def _hops(
    f: AsyncFigures, client: httpx.Client, headers: dict[str, str], evaluator_id: str, dest: str, judge: Judge, pid: int
) -> None:
    """The timed job (``ASYNC_BENCH_HOPS=1``, module docstring): per-hop times and per-process CPU into ``f``."""
    rows = [{"url": f"http://{dest}/timed/{i}"} for i in range(N_ROWS)]
    _job(client, headers, evaluator_id, rows[: PARALLELISM * 4 * IN_FLIGHT])  # warm: the timed evaluator bound
    judge.times = {}
    pids = descendants(pid)
    cpu, mine = {p: cpu_s(p) for p in pids}, time.process_time()
    start = time.perf_counter()
    body = {"evaluator_id": evaluator_id, "rows": rows, "parallelism": PARALLELISM}
    job_id = client.post("/v1/jobs", json=body, headers=headers).json()["id"]
    while client.get(f"/v1/jobs/{job_id}", params={"wait_s": 60}, headers=headers).json()["status"] == "running":
        pass
    f.hops_rps = N_ROWS / (time.perf_counter() - start)
    for p in pids:
        with contextlib.suppress(OSError):
            used = (cpu_s(p) - cpu[p]) * 1000 / N_ROWS
            if used > 0.005:
                name = "service" if p == pid else Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0].decode()
                f.cpu.append((f"{name} ({p})", used))
    f.cpu.append(("bench: judge + client", (time.process_time() - mine) * 1000 / N_ROWS))
    times, judge.times = judge.times, None
    results = [
        r["result"]
        for offset in range(0, N_ROWS, 1000)
        for r in client.get(
            f"/v1/jobs/{job_id}/results", params={"limit": 1000, "offset": offset}, headers=headers
        ).json()["data"]
    ]
    spans: dict[str, list[float]] = {name: [] for name in HOPS}
    for i, result in enumerate(results):
        d, (arrived, answered) = result["details"], times[f"/timed/{i}".encode()]
        t0, t1, t2 = d["t0"], d["t1"], d["t2"]
        for name, ms in zip(
            HOPS,
            (
                result["duration_ms"] - (t2 - t0) * 1000,
                (t1 - t0) * 1000,
                (arrived - t1) * 1000,
                (answered - arrived) * 1000,
                (t2 - answered) * 1000,
                result["duration_ms"],
            ),
            strict=True,
        ):
            spans[name].append(ms)
    for name, xs in spans.items():
        xs.sort()
        f.hops.append((name, statistics.fmean(xs), xs[len(xs) // 2], xs[int(len(xs) * 0.9)]))


HOPS = (
    "the harness: the row started → the evaluator's first line, its return → its reply",
    "connect to the in-sandbox forwarder (asyncio.open_connection)",
    "request: forwarder → service's egress proxy → judge (its head read)",
    "the judge (asyncio.sleep(0.2))",
    "answer: judge → proxy → forwarder → the evaluator's read() done",
    "the row (its result's duration_ms)",
)


def ideal() -> float:
    """The in-flight ideal: every worker's ``max_in_flight`` rows each ``LATENCY_S``, capped by the rows."""
    return min(float(N_ROWS), PARALLELISM * IN_FLIGHT / LATENCY_S)


def render(f: AsyncFigures) -> tuple[str, str]:
    """(section, summary line) for docs/benchmarks.md."""
    best = ideal()
    ok = f.async_rps >= GOAL_RPS and f.async_rps >= GOAL_RATIO * best
    at_latency = min(float(N_ROWS), PARALLELISM * IN_FLIGHT / (f.async_row_ms / 1000))
    summary = (
        f"- {f.backend}, async judge evaluator (one {LATENCY_S * 1000:.0f} ms call per row through the egress proxy), "
        f"{N_ROWS:,}-row job, {PARALLELISM} workers × max_in_flight {IN_FLIGHT}: **{f.async_rps:,.0f} rows/s** = "
        f"{f.async_rps / best:.2f}× the in-flight ideal {best:,.0f} (goal ≥ {GOAL_RPS:.0f} and ≥ {GOAL_RATIO}×: "
        f"{verdict(ok)}; rows took {f.async_row_ms:.0f} ms each on this loaded machine, "
        f"{f.async_rps / at_latency:.2f}× the ideal at that latency); the same evaluator written sync: "
        f"{f.sync_rps:,.1f} rows/s ({f.async_rps / f.sync_rps:.0f}×); the same code outside the sandbox "
        f"{f.outside_rps:,.0f} rows/s ({f.outside_rps / best:.2f}× the ideal; the job "
        f"{f.async_rps / f.outside_rps:.2f}× it)"
    )
    section = "\n".join(
        [
            f"## Async judge evaluators ({f.backend} backend)",
            "",
            f"An evaluator that calls an LLM judge once per row: a loopback judge this bench starts (asyncio, "
            f"answering every request after {LATENCY_S * 1000:.0f} ms), reached through the service's egress "
            "proxy. Written `async def` (a minimal HTTP client on asyncio streams, through `HTTP_PROXY`), its rows "
            f"await together: up to `max_in_flight` ({IN_FLIGHT}) per worker. A job of {N_ROWS:,} inline rows, "
            f"`parallelism: {PARALLELISM}`, after a warm-up job (workers bound); POST → succeeded. Baseline in "
            f"the same run: the same evaluator written sync (`urllib`), one row per worker at a time, "
            f"{N_BASELINE} rows, same workers; and the same async code outside the sandbox ({PARALLELISM} host "
            f"processes, {IN_FLIGHT} rows in flight each as a sliding window, straight to the same judge: "
            "`bench/async_outside.py`). The in-flight ideal is workers × max_in_flight / "
            f"{LATENCY_S:g} s, capped by the rows; a row's time is its result's `duration_ms` (mean of the first "
            "1,000), the judge's 200 ms plus the path to it (the service's egress proxy, accepting on the sandbox's "
            "own port, then the judge). "
            "`python -m bench.async_bench [process|docker]` runs this section alone (`ASYNC_BENCH_SPY=1`: py-spy "
            "records the service during the job).",
            "",
            "| evaluator | rows | rows/s | ÷ in-flight ideal | row, ms | ÷ ideal at that row time "
            "| judge's peak in flight | CPU per row: service / judge + client |",
            "|---|---|---|---|---|---|---|---|",
            f"| async def, in flight | {N_ROWS:,} | **{f.async_rps:,.0f}** | {f.async_rps / best:.2f} "
            f"(ideal {best:,.0f}; goal ≥ {GOAL_RPS:.0f} rows/s and ≥ {GOAL_RATIO}×: {verdict(ok)}) | "
            f"{f.async_row_ms:.0f} | {f.async_rps / at_latency:.2f} | {f.judge_peak} | "
            f"{f.cpu_ms_per_row:.2f} / {f.bench_ms_per_row:.2f} ms |",
            f"| sync def (baseline) | {N_BASELINE} | {f.sync_rps:,.1f} | "
            f"{f.sync_rps / (PARALLELISM / LATENCY_S):.2f} of its own ideal {PARALLELISM / LATENCY_S:g} | "
            f"{f.sync_row_ms:.0f} | — | — | — |",
            f"| the same async code outside the sandbox (baseline) | {N_ROWS:,} | {f.outside_rps:,.0f} | "
            f"{f.outside_rps / best:.2f} | {f.outside_row_ms:.0f} | — | — | — |",
            "",
            f"The job ÷ the same code outside the sandbox, in the same run: **{f.async_rps / f.outside_rps:.2f}×**.",
            f"Async ÷ sync: **{f.async_rps / f.sync_rps:.0f}×**.",
            *_render_hops(f),
        ]
    )
    return "\n" + section + "\n", summary


def _render_hops(f: AsyncFigures) -> list[str]:
    """The per-hop table of a timed run (``ASYNC_BENCH_HOPS=1``), or nothing."""
    if not f.hops:
        return []
    return [
        "",
        f"Where a row's time goes (`ASYNC_BENCH_HOPS=1`: the timed job, {N_ROWS:,} rows, {f.hops_rps:,.0f} rows/s):",
        "",
        "| hop | mean, ms | p50 | p90 |",
        "|---|---|---|---|",
        *(f"| {name} | {mean:.1f} | {p50:.1f} | {p90:.1f} |" for name, mean, p50, p90 in f.hops),
        "",
        "CPU per row of the timed job: " + ", ".join(f"{name} {ms:.2f} ms" for name, ms in f.cpu) + ".",
    ]


if __name__ == "__main__":
    figures = measure(sys.argv[1] if len(sys.argv) > 1 else "process")
    body, head = render(figures)
    print(head)
    print(body)
