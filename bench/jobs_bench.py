"""The batch-jobs benchmark section (docker backend; called by bench/run.py, or ``python -m bench.jobs_bench``).

In one run, against the real service started as a subprocess:

* per language (Python, JavaScript, TypeScript), the **first job of a never-seen evaluator**
  (its code differs by a comment from every earlier one, so no worker of it exists), 100,000
  rows with a trivial evaluator: wall time from ``POST /v1/jobs`` to ``succeeded`` (a long poll,
  ``GET /v1/jobs/{id}?wait_s=60``, answered when the job ends) and the time to the first committed
  row (``progress.done > 0``, polled every 2 ms until then); median of 3 never-seen evaluators;
* baseline, same evaluators, same run: one ``POST /v1/evaluators/{id}/evaluate`` per row
  over one keep-alive connection;
* a 1,000,000-row job: the service's peak RSS (sampled every 100 ms, and VmHWM) while
  the dataset is uploaded, the job runs, and all results stream back as NDJSON.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.common import serve, status_mb, verdict

N_ROWS, N_BASELINE, N_RUNS, N_BIG = 100_000, 2_000, 3, 1_000_000
TARGETS = {"python": 60_000.0, "javascript": 40_000.0, "typescript": 40_000.0}
FIRST_ROW_TARGET_MS = 150.0
CODES = {
    "python": "def evaluate(inputs, outputs, trace):\n    return outputs == inputs['expected']\n",
    "javascript": "function evaluate(inputs, outputs, trace) {\n  return outputs === inputs.expected\n}\n",
    "typescript": (
        "function evaluate(inputs: { expected: string }, outputs: string, trace: unknown): boolean {\n"
        "  return outputs === inputs.expected\n}\n"
    ),
}


@dataclass
class JobFigures:
    health: dict[str, Any] = field(default_factory=dict)
    job_rps: dict[str, list[float]] = field(default_factory=dict)  # rows/s, POST → succeeded
    first_row_ms: dict[str, list[float]] = field(default_factory=dict)  # POST → first committed row
    per_call_rps: dict[str, float] = field(default_factory=dict)  # rows/s, one HTTP call per row
    big_rows: int = 0
    big_upload_s: float = 0.0
    big_job_s: float = 0.0
    big_export_s: float = 0.0
    big_export_lines: int = 0
    rss_idle_mb: float = 0.0
    rss_peak_mb: float = 0.0  # sampled during upload + job + export
    rss_hwm_mb: float = 0.0  # the kernel's high-water mark at the end
    big_dataset_mb: float = 0.0


def _rows(n: int) -> Iterator[bytes]:
    for i in range(n):
        answer = "4" if i % 2 else "5"
        yield json.dumps({"id": i, "question": f"question {i}", "expected": "4", "model_expression": answer}).encode()


def _jsonl(n: int) -> bytes:
    return b"\n".join(_rows(n)) + b"\n"


def _mb(pid: int, key: str) -> float:
    return status_mb(pid, key) or 0.0


class _Sampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0.0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, _mb(self.pid, "VmRSS"))
            self.stop.wait(0.1)


def _create(client: httpx.Client, language: str, tag: str = "") -> str:
    comment = "#" if language == "python" else "//"
    code = f"{comment} {tag}\n{CODES[language]}" if tag else CODES[language]
    body = {"name": f"bench-{language}", "language": language, "code": code}
    response = client.post("/v1/evaluators", json=body)
    response.raise_for_status()
    return str(response.json()["id"])


def _upload(client: httpx.Client, data: bytes | Iterator[bytes]) -> dict[str, Any]:
    response = client.post("/v1/datasets", content=data, headers={"content-type": "application/jsonl"})
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


def _run_job(
    client: httpx.Client, evaluator_id: str, dataset_id: str, first_row: list[float] | None = None
) -> tuple[float, dict[str, Any]]:
    """(seconds from POST to a finished job, the job); appends the ms to its first committed row to ``first_row``."""
    body = {"evaluator_id": evaluator_id, "dataset_id": dataset_id, "field_mapping": {"outputs": "model_expression"}}
    start = time.perf_counter()
    response = client.post("/v1/jobs", json=body)
    response.raise_for_status()
    job_id = response.json()["id"]
    seen_first = first_row is None
    while True:
        # every 2 ms until the first row is committed (when that is measured), then a long poll
        params = {"wait_s": 60} if seen_first else None
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}", params=params).json()
        if not seen_first and job["progress"]["done"] > 0:
            seen_first = True
            assert first_row is not None
            first_row.append((time.perf_counter() - start) * 1000)
        if job["status"] not in ("queued", "running"):
            elapsed = time.perf_counter() - start
            break
        if not seen_first:
            time.sleep(0.002)
    if job["status"] != "succeeded" or job["progress"]["done"] != job["progress"]["total"]:
        raise RuntimeError(f"the bench job did not succeed: {job}")
    if abs(job["aggregate"]["score"]["mean"] - 0.5) > 1e-9:
        raise RuntimeError(f"unexpected aggregate: {job['aggregate']}")
    return elapsed, job


def _per_call(client: httpx.Client, evaluator_id: str, n: int) -> float:
    rows = [json.loads(line) for line in _rows(n)]
    start = time.perf_counter()
    for row in rows:
        body = {"inputs": row, "outputs": row["model_expression"]}
        response = client.post(f"/v1/evaluators/{evaluator_id}/evaluate", json=body)
        if response.status_code != 200 or response.json()["status"] != "ok":
            raise RuntimeError(response.text)
    return n / (time.perf_counter() - start)


def measure(big_rows: int = N_BIG) -> JobFigures:
    figures = JobFigures(big_rows=big_rows)
    with serve("docker") as (base_url, _data_dir, proc), httpx.Client(base_url=base_url, timeout=3600) as client:
        figures.health = client.get("/healthz").json()
        small = _upload(client, _jsonl(N_ROWS))["id"]
        _run_job(client, _create(client, "python", "warm-up"), small)  # the service's own first job
        tag = time.time_ns()
        for language in CODES:
            firsts = figures.first_row_ms[language] = []
            runs = figures.job_rps[language] = []
            for run in range(N_RUNS):  # each a never-seen evaluator: no worker of it exists yet
                evaluator_id = _create(client, language, f"never seen {tag} {run}")
                runs.append(N_ROWS / _run_job(client, evaluator_id, small, firsts)[0])
            figures.per_call_rps[language] = _per_call(client, evaluator_id, N_BASELINE)
        python_id = _create(client, "python")
        figures.rss_idle_mb = _mb(proc.pid, "VmRSS")
        sampler = _Sampler(proc.pid)
        sampler.start()
        start = time.perf_counter()
        big = _upload(client, _rows_stream(big_rows))
        figures.big_upload_s = time.perf_counter() - start
        figures.big_dataset_mb = big["bytes"] / 1e6
        figures.big_job_s, _job = _run_job(client, python_id, big["id"])
        start = time.perf_counter()
        with client.stream("GET", f"/v1/jobs/{_job['id']}/results", params={"format": "ndjson"}) as stream:
            figures.big_export_lines = sum(1 for _ in stream.iter_lines())
        figures.big_export_s = time.perf_counter() - start
        sampler.stop.set()
        sampler.join()
        figures.rss_peak_mb = sampler.peak
        figures.rss_hwm_mb = _mb(proc.pid, "VmHWM")
    return figures


def _rows_stream(n: int) -> Iterator[bytes]:
    block: list[bytes] = []
    for line in _rows(n):
        block.append(line)
        if len(block) == 10_000:
            yield b"\n".join(block) + b"\n"
            block = []
    if block:
        yield b"\n".join(block) + b"\n"


def render(f: JobFigures) -> tuple[str, str]:
    """(section, summary lines) for docs/benchmarks.md."""
    lines = [
        "| language | first job rows/s (median of 3) | runs | first committed row, ms (median) "
        "| one HTTP call per row, rows/s | job ÷ per-call | target |",
        "|---|---|---|---|---|---|---|",
    ]
    summary = []
    for language, runs in f.job_rps.items():
        median = statistics.median(runs)
        first = statistics.median(f.first_row_ms[language])
        per_call = f.per_call_rps[language]
        ok = median >= TARGETS[language]
        ok_first = first <= FIRST_ROW_TARGET_MS
        lines.append(
            f"| {language} | **{median:,.0f}** | {', '.join(f'{r:,.0f}' for r in runs)} | {first:.0f} "
            f"(≤ {FIRST_ROW_TARGET_MS:.0f}: {verdict(ok_first)}) | {per_call:,.0f} | {median / per_call:.0f}× | "
            f"≥ {TARGETS[language]:,.0f}: {verdict(ok)} |"
        )
        summary.append(
            f"- docker, first job of a never-seen evaluator, {N_ROWS:,} rows, {language}: **{median:,.0f} rows/s** "
            f"POST → succeeded (target ≥ {TARGETS[language]:,.0f}: {verdict(ok)}), first committed row after "
            f"{first:.0f} ms (≤ {FIRST_ROW_TARGET_MS:.0f}: {verdict(ok_first)}); one HTTP call per row: "
            f"{per_call:,.0f} rows/s ({median / per_call:.0f}×)"
        )
    summary.append(
        f"- docker, {f.big_rows:,}-row job: service peak RSS **{max(f.rss_peak_mb, f.rss_hwm_mb):.0f} MB** "
        f"(idle {f.rss_idle_mb:.0f} MB) through upload, job ({f.big_rows / f.big_job_s:,.0f} rows/s) and NDJSON export"
    )
    section = "\n".join(
        [
            "## Batch jobs (docker backend)",
            "",
            f"A {N_ROWS:,}-row JSONL dataset, uploaded once; a trivial evaluator per language "
            '(`outputs == inputs.expected`), `field_mapping: {"outputs": "model_expression"}`, default '
            "parallelism. Each job is the **first job of a never-seen evaluator** (its code differs by a "
            "comment from every earlier one: no worker of it exists; its runtime's spares may). Wall time "
            "from `POST /v1/jobs` to `status: succeeded`: polled every 2 ms until the first committed row, "
            "then one long poll (`GET /v1/jobs/{id}?wait_s=60`, answered when the job ends; until this "
            "run's version the bench polled every 10 ms, ~10% of a core between client and service). "
            f"Baseline in the same run: {N_BASELINE:,} rows, one "
            "`POST /v1/evaluators/{id}/evaluate` per row over one keep-alive connection.",
            "",
            *lines,
            "",
            f"### {f.big_rows:,} rows: memory stays flat",
            "",
            "The service's RSS (`/proc/<pid>/status`, sampled every 100 ms, plus the kernel's VmHWM) while a "
            f"{f.big_dataset_mb:.0f} MB JSONL dataset is streamed up, the job runs, and every result streams back "
            "as NDJSON.",
            "",
            "| phase | figure |",
            "|---|---|",
            f"| upload ({f.big_dataset_mb:.0f} MB, streamed) | {f.big_upload_s:.1f} s |",
            f"| job, POST → succeeded | {f.big_job_s:.1f} s ({f.big_rows / f.big_job_s:,.0f} rows/s) |",
            f"| NDJSON export ({f.big_export_lines:,} lines) | {f.big_export_s:.1f} s |",
            f"| service RSS before | {f.rss_idle_mb:.0f} MB |",
            f"| service RSS peak (sampled / VmHWM) | **{f.rss_peak_mb:.0f} MB / {f.rss_hwm_mb:.0f} MB** |",
        ]
    )
    return "\n" + section + "\n", "\n".join(summary)


if __name__ == "__main__":
    import sys

    rows = int(sys.argv[1]) if len(sys.argv) > 1 else N_BIG
    figures = measure(rows)
    body, head = render(figures)
    print(head)
    print(body)
