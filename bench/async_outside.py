"""The async-judge bench's baseline outside the sandbox (``bench/async_bench.py``; issue 55).

The same evaluator code the job runs, run by plain host processes straight to the same judge: no service,
no sandbox, no egress proxy. ``workers`` processes (the job's ``parallelism``), each awaiting its share of the
rows ``in_flight`` at a time (a sliding window: a row starts as soon as one ends, the best a worker could
do), the host's interpreter and default event loop as in the harness. The evaluator's ``HTTP_PROXY`` names
the judge itself, which answers a proxy-style request line like any other. Rows/s from the moment every
process is ready (imports done, told to go at once) to the last row's answer; a row's time is the
evaluator call's, as the job's ``duration_ms`` is.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

__all__ = ["outside"]

_RUNNER = """import asyncio, json, sys, time
CODE, urls, in_flight = json.loads(sys.argv[1])
space = {}
exec(compile(CODE, "evaluator.py", "exec"), space)
evaluate = space["evaluate"]

async def main():
    gate, took = asyncio.Semaphore(in_flight), []
    async def one(url):
        async with gate:
            started = time.perf_counter()
            verdict = await evaluate({"url": url}, None, None)
            assert verdict["score"] == 1.0, verdict
            took.append(time.perf_counter() - started)
    print("ready", flush=True)
    sys.stdin.readline()
    began = time.time()
    await asyncio.gather(*(one(url) for url in urls))
    print(json.dumps([began, time.time(), took]), flush=True)

asyncio.run(main())
"""


def outside(code: str, urls: list[str], judge_port: int, workers: int, in_flight: int) -> tuple[float, float]:
    """(rows/s, mean row ms) of ``code``'s ``evaluate`` over ``urls`` in ``workers`` host processes, each
    ``in_flight`` rows at a time, straight to the judge on ``judge_port`` (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["HTTP_PROXY"] = f"http://127.0.0.1:{judge_port}"
    shares = [urls[i::workers] for i in range(workers)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RUNNER, json.dumps([code, share, in_flight])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for share in shares
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        done = []
        for proc in procs:
            assert proc.stdout is not None
            done.append(json.loads(proc.stdout.readline()))
            proc.wait(timeout=60)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    began, ended = min(d[0] for d in done), max(d[1] for d in done)
    took = [t for d in done for t in d[2]]
    return len(took) / (ended - began), statistics.fmean(took) * 1000
