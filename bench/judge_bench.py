"""The LLM-judge client benchmark (process backend; called by bench/run.py, or ``python -m bench.judge_bench``).

An evaluator pinned to the ``openai`` SDK builds ``OpenAI()`` clients and runs autoevals-style rows (a new
client per scorer call, as ``autoevals`` does, then one chat completion) against a loopback OpenAI-compatible
server (``tests/support/llm_server.py``): once in the sandbox of the real service (a subprocess; the calls go
through the egress proxy, the host named ``llm.test`` by ``EGRESS_HOSTS``, allowed by ``NETWORK_ALLOW``), and
once outside it — the same code, the same SDK version (``pip install --target``), the host's interpreter,
straight to the server. Figures: the medians of each, and sandbox ÷ outside (goal ≤ 1.2×, issue 48).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench import judge_rows
from bench.common import serving, verdict

REPO = Path(__file__).resolve().parents[1]
OPENAI = "3.57.0"  # the SDK version both sides run
CLIENTS, ROWS, RUNS, GOAL = 20, 20, 3, 1.2
CODE = """import statistics, time
import openai

def evaluate(inputs, outputs, trace):
    base = inputs["base_url"]
    builds, rows = [], []
    for _ in range(inputs["clients"]):
        started = time.perf_counter()
        openai.OpenAI(api_key="sk-bench", base_url=base)
        builds.append(time.perf_counter() - started)
    for i in range(inputs["rows"]):
        started = time.perf_counter()
        client = openai.OpenAI(api_key="sk-bench", base_url=base)  # autoevals: a client per scorer call
        said = client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"row {i}"}])
        assert said.choices[0].message.content == f"A: row {i}"
        rows.append(time.perf_counter() - started)
    return {"score": 1.0, "build_ms": statistics.median(builds) * 1000, "row_ms": statistics.median(rows) * 1000}
"""


@dataclass
class JudgeFigures:
    inside_build: list[float] = field(default_factory=list)  # ms, median of CLIENTS per run
    outside_build: list[float] = field(default_factory=list)
    inside_row: list[float] = field(default_factory=list)  # ms, median of ROWS per run
    outside_row: list[float] = field(default_factory=list)
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)
    # a warm row end to end (bench/judge_rows.py), per evaluator kind: [(sandbox ms, outside ms), ...] per run
    warm: dict[str, list[tuple[float, float]]] = field(default_factory=dict)


def _outside(site: Path, base_url: str) -> dict[str, float]:
    script = CODE + ("\nimport json, sys\nprint(json.dumps(evaluate(json.loads(sys.argv[1]), None, None)))\n")
    inputs = json.dumps({"base_url": base_url, "clients": CLIENTS, "rows": ROWS})
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()} | {"PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-c", script, inputs], capture_output=True, text=True, env=env, timeout=300, check=True
    )
    answer: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return answer


def measure() -> JudgeFigures:
    sys.path.insert(0, str(REPO))
    from tests.support.llm_server import llm_server

    figures = JudgeFigures()
    with llm_server() as llm, tempfile.TemporaryDirectory(prefix="evh-bench-judge-") as tmp:
        site = Path(tmp) / "site"
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--target", str(site), f"openai=={OPENAI}"],
            check=True,
            timeout=600,
        )
        host = f"llm.test:{llm.port}"
        env = {
            "EVALUATOR_HOST_BACKEND": "process",
            "EVALUATOR_HOST_EGRESS_HOSTS": json.dumps({"llm.test": "127.0.0.1"}),
            "EVALUATOR_HOST_NETWORK_ALLOW": host,
        }
        with serving(str(Path(tmp) / "data"), env) as (base, _proc), httpx.Client(base_url=base, timeout=900) as client:
            body = {
                "language": "python",
                "code": CODE,
                "packages": {"openai": OPENAI},
                "network": [host],
                "settings": {"timeout_s": 120},
                "inputs": {"base_url": f"http://{host}/v1", "clients": CLIENTS, "rows": ROWS},
            }
            warm = client.post("/v1/evaluate", json=body).json()  # builds the runtime, warms the worker
            if warm.get("status") != "ok":
                raise RuntimeError(f"the judge bench's evaluator failed: {warm}")
            for run in range(RUNS):
                inside = client.post("/v1/evaluate", json=body).json()
                if inside.get("status") != "ok":
                    raise RuntimeError(f"the judge bench's evaluator failed: {inside}")
                outside = _outside(site, f"http://127.0.0.1:{llm.port}/v1")
                figures.inside_build.append(inside["details"]["build_ms"])
                figures.inside_row.append(inside["details"]["row_ms"])
                figures.outside_build.append(outside["build_ms"])
                figures.outside_row.append(outside["row_ms"])
                print(
                    f"judge bench run {run + 1}: OpenAI() {figures.inside_build[-1]:.1f} ms in the sandbox, "
                    f"{figures.outside_build[-1]:.1f} ms outside; a row {figures.inside_row[-1]:.1f} / "
                    f"{figures.outside_row[-1]:.1f} ms"
                )
            base_url = f"http://{host}/v1"
            evaluator = {k: v for k, v in body.items() if k not in ("inputs", "code")}
            for kind, code in judge_rows.CODES.items():
                made = client.post("/v1/evaluators", json=evaluator | {"name": f"judge-{kind}", "code": code})
                made.raise_for_status()
                for delay in judge_rows.DELAYS:
                    llm.delay_s, name = delay, f"{kind}, server {delay * 1000:.0f} ms"
                    for run in range(RUNS):  # alternately, in the same minutes
                        pair = (
                            judge_rows.inside(client, made.json()["id"], base_url, delay),
                            judge_rows.outside(code, site, f"http://127.0.0.1:{llm.port}/v1", delay),
                        )
                        figures.warm.setdefault(name, []).append(pair)
                        print(f"judge bench warm row, {name}, run {run + 1}: {pair[0]:.2f} ms in a job, {pair[1]:.2f}")
                llm.delay_s = 0.0
    figures.load = os.getloadavg()
    return figures


def render(f: JudgeFigures) -> tuple[str, str]:
    """(section, summary line) for docs/benchmarks.md."""
    build = statistics.median(f.inside_build) / statistics.median(f.outside_build)
    row = statistics.median(f.inside_row) / statistics.median(f.outside_row)
    warm = {kind: _median_ratio(pairs) for kind, pairs in f.warm.items()}
    summary = (
        f"- LLM judge clients (openai {OPENAI}): `OpenAI()` built in the sandbox **{build:.2f}×** the time outside, "
        f"an autoevals-style row (a client per call + one completion) **{row:.2f}×** "
        f"(goal ≤ {GOAL}×: {verdict(build <= GOAL and row <= GOAL)}); a warm row end to end (a job of the service "
        "against the same code outside): "
        + ", ".join(f"{kind} **{ratio:.2f}×** ({verdict(ratio <= GOAL)})" for kind, ratio in warm.items())
        + f" (goal ≤ {GOAL}×; a server answering at once shows the path's own cost, which no judge has)"
    )
    lines = [
        "## LLM judge clients in the sandbox (process backend)",
        "",
        f"An evaluator pinned to `openai=={OPENAI}` builds {CLIENTS} `OpenAI()` clients, then runs {ROWS} "
        "autoevals-style rows (a new client per scorer call, as `autoevals` does, and one chat completion) "
        "against a loopback OpenAI-compatible server: in the sandbox of the real service (through the egress "
        "proxy; an open service whose `NETWORK_ALLOW` names the host) and outside it (the same code and SDK "
        "version, the host's interpreter, straight to the server), alternately in the same run. Medians per "
        f"run, ms. Load average at the end: {f.load[0]:.1f} / {f.load[1]:.1f} / {f.load[2]:.1f} (a shared "
        "machine: the ratio is the figure).",
        "",
        "| run | `OpenAI()` sandbox | outside | ÷ | row sandbox | outside | ÷ |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {i + 1} | {ib:.1f} | {ob:.1f} | {ib / ob:.2f}× | {ir:.1f} | {orow:.1f} | {ir / orow:.2f}× |"
            for i, (ib, ob, ir, orow) in enumerate(
                zip(f.inside_build, f.outside_build, f.inside_row, f.outside_row, strict=True)
            )
        ),
        f"| **median** | | | **{build:.2f}×** | | | **{row:.2f}×** (goal ≤ {GOAL}×: "
        f"{verdict(build <= GOAL and row <= GOAL)}) |",
        "",
        "Why it was slower (issue 48: ~78 ms against ~20 ms a client, a warm autoevals row 0.5-1.0 s against "
        "0.15 s): httpx makes one TLS context per proxy variable (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`) "
        "besides its own, each parsing the whole CA bundle named by `SSL_CERT_FILE`. The sandbox now sets no "
        "`ALL_PROXY` and names the CAs as a hashed directory (`SSL_CERT_DIR`, `REQUESTS_CA_BUNDLE`): a context "
        "reads a certificate only when a handshake looks it up.",
        *_render_warm(f),
    ]
    return "\n" + "\n".join(lines) + "\n", summary


def _median_ratio(pairs: list[tuple[float, float]]) -> float:
    return statistics.median(inside for inside, _ in pairs) / statistics.median(outside for _, outside in pairs)


def _render_warm(f: JudgeFigures) -> list[str]:
    """The end-to-end table (``bench/judge_rows.py``): a warm row in a job against the same code outside."""
    if not f.warm:
        return []
    return [
        "",
        f"**A warm row end to end** (issue 55; `bench/judge_rows.py`): the same server, one chat completion a row, "
        "as jobs of the service (`parallelism: 1`, POST → succeeded) and as a host process calling the same "
        "code row after row; a warm row is (time of a long run − time of a short one) ÷ their difference in rows "
        f"on each side ({judge_rows.sizes(0.0)} rows against a server answering at once, {judge_rows.sizes(0.2)} "
        "against one answering after 200 ms; a job's fixed cost and a process's start left out). `client`: one "
        "`OpenAI()` for the worker's life; `autoevals`: a client per row. ms per row:",
        "",
        "| evaluator | run | in a job (sandbox) | outside | ÷ |",
        "|---|---|---|---|---|",
        *(
            f"| {kind} | {i + 1} | {inside:.2f} | {outside:.2f} | {inside / outside:.2f}× |"
            for kind, pairs in f.warm.items()
            for i, (inside, outside) in enumerate(pairs)
        ),
        *(
            f"| **{kind}, median** | | | | **{_median_ratio(pairs):.2f}×** (goal ≤ {GOAL}×: "
            f"{verdict(_median_ratio(pairs) <= GOAL)}) |"
            for kind, pairs in f.warm.items()
        ),
    ]


if __name__ == "__main__":
    figures = measure()
    body, head = render(figures)
    print(head)
    print(body)
