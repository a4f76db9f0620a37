"""The LLM-judge bench's end-to-end figure (``bench/judge_bench.py``; issue 55): a warm row's cost in a job of
the real service against the same code outside the sandbox.

Two evaluators pinned to the ``openai`` SDK, one chat completion per row against the loopback
OpenAI-compatible server: ``client`` keeps one ``OpenAI()`` client for the worker's life (a judge written
with the SDK), ``autoevals`` builds a client per row (as ``autoevals``' scorers do per call). In the sandbox:
jobs of the real service (``parallelism: 1``; through the egress proxy), POST → succeeded. Outside: the
same code and SDK version in a host process, the rows called one after another, straight to the server.
A *warm row* is the marginal cost: (time of the long run's rows − time of the short run's) ÷ the
difference (:func:`sizes`), each side measured the same way after a warm-up, so a job's fixed cost (its
POST, its first chunk's start, its commit and the poll that sees it end) and the process's start are not
in it. Against a server that answers at once (the path's own cost) and one that answers after 200 ms.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

__all__ = ["CODES", "DELAYS", "inside", "outside", "sizes"]

DELAYS = (0.0, 0.2)  # the server's answer: at once (the path's own cost shows), and after 200 ms (a judge's)
CODES = {
    "client": """import openai
_clients = {}

def evaluate(inputs, outputs, trace):
    base = inputs["base_url"]
    client = _clients.get(base) or _clients.setdefault(base, openai.OpenAI(api_key="sk-bench", base_url=base))
    said = client.chat.completions.create(model="m", messages=[{"role": "user", "content": inputs["q"]}])
    return 1.0 if said.choices[0].message.content == "A: " + inputs["q"] else 0.0
""",
    "autoevals": """import openai

def evaluate(inputs, outputs, trace):
    client = openai.OpenAI(api_key="sk-bench", base_url=inputs["base_url"])  # autoevals: a client per call
    said = client.chat.completions.create(model="m", messages=[{"role": "user", "content": inputs["q"]}])
    return 1.0 if said.choices[0].message.content == "A: " + inputs["q"] else 0.0
""",
}

_RUNNER = """import json, sys, time
code, base, short, long = json.loads(sys.argv[1])
space = {}
exec(compile(code, "evaluator.py", "exec"), space)
evaluate = space["evaluate"]

def run(n):
    started = time.perf_counter()
    for i in range(n):
        assert evaluate({"base_url": base, "q": f"row {i}"}, None, None) == 1.0
    return time.perf_counter() - started

run(short)  # warm: imports done, the first client and connection made
print(json.dumps([run(short), run(long)]))
"""


def sizes(delay_s: float) -> tuple[int, int]:
    """(short, long) row counts for a server answering after ``delay_s`` (fewer rows for a slow one)."""
    return (20, 220) if delay_s < 0.05 else (5, 45)


def _rows(base_url: str, n: int) -> list[dict[str, Any]]:
    return [{"base_url": base_url, "q": f"row {i}"} for i in range(n)]


def _job(client: httpx.Client, evaluator_id: str, rows: list[dict[str, Any]]) -> float:
    """Seconds from POST /v1/jobs to ``succeeded`` (every row scored 1.0, else ``RuntimeError``)."""
    started = time.perf_counter()
    created = client.post("/v1/jobs", json={"evaluator_id": evaluator_id, "rows": rows, "parallelism": 1})
    created.raise_for_status()
    job_id = created.json()["id"]
    while (job := client.get(f"/v1/jobs/{job_id}", params={"wait_s": 60}).json())["status"] in ("queued", "running"):
        pass
    took = time.perf_counter() - started
    if job["status"] != "succeeded" or job["progress"]["failed"]:
        raise RuntimeError(f"the judge bench's job did not succeed: {json.dumps(job)[:600]}")
    scores = client.get(f"/v1/jobs/{job_id}/results", params={"limit": 1000}).json()["data"]
    if any(r["result"]["score"] != 1.0 for r in scores):
        raise RuntimeError(f"the judge bench's rows were not all answered right: {json.dumps(scores[:2])[:600]}")
    return took


def inside(client: httpx.Client, evaluator_id: str, base_url: str, delay_s: float) -> float:
    """A warm row's ms in jobs of the real service (module docstring); the evaluator's worker warmed first."""
    n_short, n_long = sizes(delay_s)
    _job(client, evaluator_id, _rows(base_url, n_short))
    short = _job(client, evaluator_id, _rows(base_url, n_short))
    long = _job(client, evaluator_id, _rows(base_url, n_long))
    return (long - short) * 1000 / (n_long - n_short)


def outside(code: str, site: Path, base_url: str, delay_s: float) -> float:
    """A warm row's ms of ``code`` in a host process (``site``: where the SDK was installed), as :func:`inside`."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()} | {"PYTHONPATH": str(site)}
    n_short, n_long = sizes(delay_s)
    done = subprocess.run(
        [sys.executable, "-c", _RUNNER, json.dumps([code, base_url, n_short, n_long])],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    short, long = json.loads(done.stdout.splitlines()[-1])
    return float(long - short) * 1000 / (n_long - n_short)
