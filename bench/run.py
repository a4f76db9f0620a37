"""Benchmarks of the evaluator-host service; writes docs/benchmarks.md. Run with ``make bench``.

One run measures, against the real service started as a subprocess on a free port:
warm single-evaluation latency over HTTP, a process-per-evaluation baseline, the first
call of never-seen evaluators, and the RSS of the warm harness workers.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "benchmarks.md"
CODE = 'def evaluate(inputs, outputs, trace):\n    return outputs == inputs.get("correct_answer")\n'
INPUTS = {"question": "2+2?", "correct_answer": "4"}
WARMUP, N_WARM, N_BASELINE, N_FIRST = 50, 1000, 100, 30
TARGET_WARM_P50_MS, TARGET_FIRST_P50_MS, TARGET_RSS_MB = 3.0, 100.0, 40.0


def pct(values: list[float], p: float) -> float:
    """The p-th percentile, linear interpolation between closest ranks."""
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def harness_pids(service_pid: int) -> list[int]:
    """Worker harnesses: the grandchildren of the service (service -> unshare -> harness)."""
    return [g for c in children(service_pid) for g in children(c)]


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def evaluate(client: httpx.Client, code: str) -> tuple[float, dict[str, object]]:
    body = {"language": "python", "code": code, "inputs": INPUTS, "outputs": "4", "trace": None}
    start = time.perf_counter()
    response = client.post("/v1/evaluate", json=body)
    elapsed = (time.perf_counter() - start) * 1000
    response.raise_for_status()
    result = response.json()
    if result.get("status") != "ok" or result.get("score") != 1.0:
        raise RuntimeError(f"unexpected result: {result}")
    return elapsed, result


def baseline_once() -> float:
    call = f"\nimport json\nprint(json.dumps(evaluate({INPUTS!r}, '4', None)))\n"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-I", "-S", "-c", CODE + call], capture_output=True, text=True, check=True)
    elapsed = (time.perf_counter() - start) * 1000
    if done.stdout.strip() != "true":
        raise RuntimeError(f"baseline printed {done.stdout!r}")
    return elapsed


def wait_healthy(client: httpx.Client, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"service exited with code {proc.returncode}")
        try:
            response = client.get("/healthz", timeout=2)
            if response.status_code == 200:
                health: dict[str, object] = response.json()
                return health
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("service did not become healthy")


def measure(proc: subprocess.Popen[bytes], client: httpx.Client) -> dict[str, object]:
    health = wait_healthy(client, proc)
    for _ in range(WARMUP):
        evaluate(client, CODE)
    warm, server = [], []
    for _ in range(N_WARM):
        elapsed, result = evaluate(client, CODE)
        warm.append(elapsed)
        server.append(float(result["duration_ms"]))  # type: ignore[arg-type]
    workers = [r for r in (rss_mb(p) for p in harness_pids(proc.pid)) if r is not None]
    service_rss = rss_mb(proc.pid) or 0.0
    baseline = [baseline_once() for _ in range(N_BASELINE)]
    tag = time.time_ns()
    first = [evaluate(client, f"# bench {tag} evaluator {i}\n{CODE}")[0] for i in range(N_FIRST)]
    final = client.get("/healthz").json()
    return {"health": health, "final": final, "warm": warm, "server": server, "baseline": baseline,
            "first": first, "workers": workers, "service_rss": service_rss}


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def render(m: dict[str, list[float]], info: dict[str, object]) -> tuple[str, str]:
    warm, base, first, workers = m["warm"], m["baseline"], m["first"], m["workers"]
    w50, b50, f50 = pct(warm, 50), pct(base, 50), pct(first, 50)
    rss_max = max(workers) if workers else float("nan")
    rss_min = min(workers) if workers else float("nan")
    summary = (
        f"warm p50 {w50:.2f} ms (target <= {TARGET_WARM_P50_MS:g}: {verdict(w50 <= TARGET_WARM_P50_MS)}) | "
        f"baseline p50 {b50:.1f} ms, ratio {b50 / w50:.1f}x | "
        f"first call p50 {f50:.1f} ms (target <= {TARGET_FIRST_P50_MS:g}: {verdict(f50 <= TARGET_FIRST_P50_MS)}) | "
        f"worker RSS {rss_min:.1f}-{rss_max:.1f} MB (target <= {TARGET_RSS_MB:g}: "
        f"{verdict(bool(workers) and rss_max <= TARGET_RSS_MB)})"
    )
    doc = f"""# Benchmarks

Reproduce with `make bench` (runs `.venv/bin/python bench/run.py`, which rewrites this file).
Every figure below comes from one run of that command.

## Machine

| | |
|---|---|
| date | {info["date"]} |
| CPU | {info["cpu"]} |
| nproc | {info["nproc"]} |
| Python | {info["python"]} |
| backend | {info["backend"]} |
| isolation | {info["isolation"]} |

Timing on a small shared machine is noisy: run-to-run differences of tens of percent are normal.
That is why the process-per-evaluation baseline is measured in the same run as the service,
so the ratio between them stays meaningful even when absolute figures move.

## Method

The script starts the real service (`python -m evaluator_host.cli serve --port <free port>`) with a
fresh temporary `EVALUATOR_HOST_DATA_DIR`, waits for `/healthz`, and times `POST /v1/evaluate`
client-side (`time.perf_counter` around the request) on one keep-alive `httpx.Client` connection.
The evaluator is:

```python
{CODE.rstrip()}
```

## Results

| measurement | N | p50 ms | p90 ms | p99 ms | mean ms |
|---|---|---|---|---|---|
| warm evaluation over HTTP (after {WARMUP} warm-up calls) | {len(warm)} | {w50:.2f} | {pct(warm, 90):.2f} \
| {pct(warm, 99):.2f} | {statistics.fmean(warm):.2f} |
| ... of which `duration_ms` reported by the service | {len(m["server"])} | {pct(m["server"], 50):.2f} \
| {pct(m["server"], 90):.2f} | {pct(m["server"], 99):.2f} | {statistics.fmean(m["server"]):.2f} |
| baseline: new `python -I -S -c` process per evaluation | {len(base)} | {b50:.2f} | {pct(base, 90):.2f} \
| {pct(base, 99):.2f} | {statistics.fmean(base):.2f} |
| first call of a never-seen evaluator over HTTP | {len(first)} | {f50:.2f} | {pct(first, 90):.2f} \
| {pct(first, 99):.2f} | {statistics.fmean(first):.2f} |

Baseline p50 / warm p50 = **{b50 / w50:.1f}x**.

The {len(first)} never-seen evaluators differ only by a leading comment, so each one needs a new
sandboxed worker (namespaces, minimal root, harness start, code load). The pool keeps at most
{info["max_workers"]} warm workers by default, so during this phase the least recently used
workers are evicted: realistic for a service seeing many distinct evaluators.

Memory, read from `/proc/<pid>/status` (VmRSS) after the warm run: the harness workers are the
grandchildren of the service process (service -> `unshare` -> harness).

| process | count | RSS MB |
|---|---|---|
| harness worker | {len(workers)} | min {rss_min:.1f}, max {rss_max:.1f} |
| service process | 1 | {m["service_rss"]:.1f} |

## Targets

| target | measured | verdict |
|---|---|---|
| warm p50 <= {TARGET_WARM_P50_MS:g} ms | {w50:.2f} ms | {verdict(w50 <= TARGET_WARM_P50_MS)} |
| first call of a never-seen evaluator p50 <= {TARGET_FIRST_P50_MS:g} ms | {f50:.1f} ms \
| {verdict(f50 <= TARGET_FIRST_P50_MS)} |
| worker RSS <= {TARGET_RSS_MB:g} MB | max {rss_max:.1f} MB | {verdict(bool(workers) and rss_max <= TARGET_RSS_MB)} |
"""
    return doc, summary


def main() -> int:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="evaluator-host-bench-") as data_dir:
        env = {**os.environ, "EVALUATOR_HOST_DATA_DIR": data_dir}
        argv = [sys.executable, "-m", "evaluator_host.cli", "serve", "--port", str(port), "--log-level", "warning"]
        proc = subprocess.Popen(argv, cwd=REPO, env=env)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
                m = measure(proc, client)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    health = m.pop("health")
    assert isinstance(health, dict)
    info = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "nproc": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "backend": health.get("backend"),
        "isolation": health.get("isolation"),
        "max_workers": os.environ.get("EVALUATOR_HOST_MAX_WORKERS", "8"),
    }
    doc, summary = render(m, info)  # type: ignore[arg-type]
    DOC.write_text(doc)
    print(summary)
    print(f"workers at the end: {m['final']}; wrote {DOC.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
