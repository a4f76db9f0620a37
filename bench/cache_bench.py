"""The result-cache benchmark section (process backend; called by bench/run.py, or ``python -m bench.cache_bench``).

In one run, against the real service started as a subprocess: a 100,000-row dataset uploaded once; for each
evaluator (a trivial one, and a realistic one doing about 1 ms of pure computation per row: the issue's
"100k-row job" for both; ``CACHE_BENCH_SLOW_ROWS`` runs the second over fewer rows), a job over it
(the first run: nothing cached) and the same job again (every row answered from the cache): rows/s of each,
``POST /v1/jobs`` to ``succeeded``, and their ratio (goal ≥ 5×). Then the cache's disk per row: the
logical bytes it counts (``result_cache_usage``) and the SQLite pages of its table and index (``dbstat``).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.common import serve

N_ROWS = 100_000
# the ~1 ms evaluator's job: 100,000 rows of it take a minute on a quiet 2-core machine (several under load)
SLOW_ROWS = int(os.environ.get("CACHE_BENCH_SLOW_ROWS", N_ROWS))
CODES = {
    "trivial": "def evaluate(inputs, outputs, trace):\n    return outputs == inputs['expected']\n",
    "~1 ms of work": (
        "def evaluate(inputs, outputs, trace):\n"
        "    acc = 0\n"
        "    for i in range(25_000):\n"
        "        acc = (acc + i * i) % 1_000_003\n"
        "    return {'score': float(outputs == inputs['expected']), 'acc': acc}\n"
    ),
}


@dataclass
class CacheFigures:
    health: dict[str, Any] = field(default_factory=dict)
    first_rps: dict[str, float] = field(default_factory=dict)
    uncached_rps: dict[str, float] = field(default_factory=dict)  # the same evaluator with settings.cache false
    cached_rps: dict[str, float] = field(default_factory=dict)
    cached_rows: dict[str, int] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    entries: int = 0
    logical_bytes: int = 0
    page_bytes: int = 0
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)


def _jsonl(n: int) -> bytes:
    return b"".join(
        b'{"q":"question %d","model_expression":"%d","expected":"%d"}\n' % (i, i % 7, i % 3) for i in range(n)
    )


def _run(client: httpx.Client, evaluator_id: str, dataset_id: str) -> tuple[float, dict[str, Any]]:
    body = {"evaluator_id": evaluator_id, "dataset_id": dataset_id, "field_mapping": {"outputs": "model_expression"}}
    start = time.perf_counter()
    response = client.post("/v1/jobs", json=body)
    response.raise_for_status()
    job_id = response.json()["id"]
    while True:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}", params={"wait_s": 60}).json()
        if job["status"] not in ("queued", "running"):
            break
    if job["status"] != "succeeded":
        raise RuntimeError(f"job {job_id} ended {job['status']}: {job.get('error')}")
    return time.perf_counter() - start, job


def measure(rows: int = N_ROWS) -> CacheFigures:
    figures = CacheFigures()
    with serve("process") as (base_url, data_dir, _proc), httpx.Client(base_url=base_url, timeout=3600) as client:
        figures.health = client.get("/healthz").json()
        dataset = client.post("/v1/datasets", content=_jsonl(rows), headers={"content-type": "application/jsonl"})
        dataset.raise_for_status()
        datasets = {"trivial": dataset.json()["id"]}
        slow = client.post(
            "/v1/datasets", content=_jsonl(min(rows, SLOW_ROWS)), headers={"content-type": "application/jsonl"}
        )
        slow.raise_for_status()
        datasets["~1 ms of work"] = slow.json()["id"]
        for name, code in CODES.items():
            dataset_id = datasets[name]
            n = rows if name == "trivial" else min(rows, SLOW_ROWS)
            figures.rows[name] = n
            body = {"name": f"bench-cache {name}", "language": "python", "code": f"# {time.time_ns()}\n{code}"}
            created = client.post("/v1/evaluators", json=body)
            created.raise_for_status()
            evaluator_id = created.json()["id"]
            seconds, _ = _run(client, evaluator_id, dataset_id)
            figures.first_rps[name] = n / seconds
            # the baseline: the same code, cache off (what the cache's writes cost a first run)
            off = {**body, "code": f"# {time.time_ns()}\n{code}", "settings": {"cache": False}}
            created_off = client.post("/v1/evaluators", json=off)
            created_off.raise_for_status()
            seconds, _ = _run(client, created_off.json()["id"], dataset_id)
            figures.uncached_rps[name] = n / seconds
            seconds, job = _run(client, evaluator_id, dataset_id)
            figures.cached_rps[name] = n / seconds
            figures.cached_rows[name] = int(job["progress"].get("cached", 0))
        db = sqlite3.connect(f"file:{os.path.join(data_dir, 'evaluator-host.db')}?mode=ro", uri=True)
        try:
            figures.entries, figures.logical_bytes = db.execute(
                "SELECT COALESCE(SUM(entries), 0), COALESCE(SUM(bytes), 0) FROM result_cache_usage"
            ).fetchone()
            figures.page_bytes = db.execute(
                "SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name IN ('result_cache', 'ix_result_cache_used')"
            ).fetchone()[0]
        finally:
            db.close()
    figures.load = os.getloadavg()
    return figures


def render(figures: CacheFigures) -> tuple[str, str]:
    """The docs/benchmarks.md section and a one-line summary."""
    lines = [
        "\n## Result cache: a re-run job over the same dataset\n",
        f"Process backend, {figures.rows.get('trivial', N_ROWS):,} rows uploaded once (the ~1 ms evaluator: the first "
        f"{figures.rows.get('~1 ms of work', SLOW_ROWS):,} of them); "
        "per evaluator a first job (nothing cached) and the same "
        "job again (every row answered from the cache: `progress.cached`), rows/s from `POST /v1/jobs` to "
        "`succeeded`, in the same run (goal: the re-run ≥ 5× the first); and the first run of the same code with "
        "`settings.cache: false` (what adding the rows to the cache costs a first run). The trivial evaluator's "
        "rows take under `result_cache_min_row_ms` (0.05 ms) each: they are not added (a re-run runs them again: "
        "running one costs what looking it up would).\n",
        "| evaluator | rows | first run, rows/s | cache off, rows/s | first ÷ cache off | "
        "re-run from the cache, rows/s | rows cached | × first | goal ≥ 5× |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name in CODES:
        ratio = figures.cached_rps[name] / figures.first_rps[name]
        if figures.cached_rows[name]:
            verdict = "met" if ratio >= 5 else "MISS"
        else:
            verdict = "not cached: cheaper than a lookup"
        lines.append(
            f"| {name} | {figures.rows[name]:,} | {figures.first_rps[name]:,.0f} | "
            f"{figures.uncached_rps[name]:,.0f} | {figures.first_rps[name] / figures.uncached_rps[name]:.2f}× | "
            f"{figures.cached_rps[name]:,.0f} | {figures.cached_rows[name]:,} | {ratio:.1f}× | {verdict} |"
        )
    per_row = figures.page_bytes / max(figures.entries, 1)
    logical = figures.logical_bytes / max(figures.entries, 1)
    lines += [
        "",
        f"The cache's disk: {figures.entries:,} entries, {logical:.0f} bytes a row as it counts them (the stored "
        f"result + the 32-byte key) and **{per_row:.0f} bytes a row** in SQLite pages (table and index, "
        "`dbstat`).",
        "",
        f"Load average at the end: {figures.load[0]:.2f} / {figures.load[1]:.2f} / {figures.load[2]:.2f} on "
        f"{len(os.sched_getaffinity(0))} cores, shared with other engineers' work: compare the two columns of one "
        "row, not runs.\n",
    ]
    summary = ", ".join(
        f"{name}: {figures.first_rps[name]:,.0f} → {figures.cached_rps[name]:,.0f} rows/s" for name in CODES
    )
    return "\n".join(lines), f"result cache: {summary}; {per_row:.0f} B/row on disk"


if __name__ == "__main__":
    section, summary = render(measure(int(sys.argv[1]) if len(sys.argv) > 1 else N_ROWS))
    print(section)
    print(summary)
