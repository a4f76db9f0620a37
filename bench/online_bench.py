"""Online ingestion: spans stored per second by ``POST /v1/traces``, against the receive-and-drop floor.

The real service (``evaluator-host serve``, SQLite in a fresh data dir, an API key) takes OTLP/HTTP
protobuf bodies of 512 spans each (the Python SDK's ``BatchSpanProcessor`` batch) from several
concurrent exporters — processes of their own, each sending bodies it serialized before the clock
started (with ``opentelemetry-proto``, every span id new: a duplicate would cost less), so the
client's encoding is not measured. Each trace has 4 spans (a SERVER root, 3 children) carrying
GenAI attributes like an instrumented LLM app's (~1.2 KB of protobuf per span). The baseline of
the same run is the same endpoint of the same service with ``EVALUATOR_HOST_ONLINE_STORE_SPANS=false``:
auth, reading, decoding and checking every span, the answer — everything but the store. The
service's CPU is read from ``/proc/<pid>/stat`` (user + system) around the timed part.

Run alone: ``.venv/bin/python -m bench.online_bench``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from bench import ingest_ceiling
from bench.common import REPO, free_port, serving, wait_healthy

BATCH = 512
EXPORTERS = int(os.environ.get("ONLINE_EXPORTERS", "4"))
BODIES = int(os.environ.get("ONLINE_BODIES", "40"))  # per exporter: 40 x 512 x 4 = 81,920 spans a run
TARGET = 10_000.0
KEY = "bench-online-key"
_PROMPT = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "What is the capital of France? " * 4}]}])
_ANSWER = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Paris is the capital. " * 6}]}])


def _kv(key: str, value: str | int) -> KeyValue:
    return KeyValue(
        key=key, value=AnyValue(int_value=value) if isinstance(value, int) else AnyValue(string_value=value)
    )


def body(rng: random.Random) -> bytes:
    """One protobuf body: 512 spans, 128 traces of 4, fresh ids."""
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.extend([_kv("service.name", "bench-chat"), _kv("deployment.environment", "b")])
    scope = resource_spans.scope_spans.add()
    scope.scope.name = "bench"
    now = time.time_ns()
    for _ in range(BATCH // 4):
        trace_id = rng.randbytes(16)
        root = rng.randbytes(8)
        for i in range(4):
            span = scope.spans.add()
            span.trace_id = trace_id
            span.span_id = root if i == 0 else rng.randbytes(8)
            if i:
                span.parent_span_id = root
            span.name = "chat" if i == 0 else f"llm-{i}"
            span.kind = 2 if i == 0 else 3
            span.start_time_unix_nano = now + i * 1000
            span.end_time_unix_nano = now + 5_000_000 - i * 1000
            span.status.code = 1
            span.attributes.extend(
                [
                    _kv("gen_ai.operation.name", "chat"),
                    _kv("gen_ai.system", "openai"),
                    _kv("gen_ai.request.model", "gpt-4o-mini"),
                    _kv("gen_ai.usage.input_tokens", 42),
                    _kv("gen_ai.usage.output_tokens", 17),
                    _kv("gen_ai.input.messages", _PROMPT),
                    _kv("gen_ai.output.messages", _ANSWER),
                    _kv("user.id", "u-123"),
                ]
            )
    return bytes(request.SerializeToString())


def _exporter(args: tuple[str, int, int, multiprocessing.synchronize.Barrier]) -> tuple[int, int, float]:
    """One exporter process: serialize its bodies, wait for the others, send them all; (spans, errors, s)."""
    base, seed, n, barrier = args
    rng = random.Random(seed)
    bodies = [body(rng) for _ in range(n)]
    headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {KEY}"}
    errors = 0
    with httpx.Client(base_url=base, timeout=60, headers=headers) as client:
        client.get("/healthz")
        barrier.wait()
        started = time.perf_counter()
        for payload in bodies:
            if client.post("/v1/traces", content=payload).status_code != 200:
                errors += 1
        took = time.perf_counter() - started
    return n * BATCH, errors, took


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    name: str
    spans: int
    errors: int
    seconds: float
    cpu_s: float

    @property
    def rate(self) -> float:
        return self.spans / self.seconds

    @property
    def cpu_per_1000(self) -> float:
        return self.cpu_s / self.spans * 1000

    def row(self) -> str:
        return (
            f"| {self.name} | {self.spans:,} | {self.rate:,.0f} | {self.cpu_per_1000 * 1000:.0f} ms | {self.errors} |"
        )


def _drive(name: str, base: str, proc: subprocess.Popen[bytes], profile: Path | None = None) -> Run:
    """Send every exporter's bodies to ``base`` at once; the run's figures (``profile``: py-spy records the
    serving process meanwhile, a flame graph SVG written there)."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Manager().Barrier(EXPORTERS + 1)
    with ctx.Pool(EXPORTERS) as pool:
        pending = pool.map_async(_exporter, [(base, 1000 * i + 7, BODIES, barrier) for i in range(EXPORTERS)])
        barrier.wait()  # every exporter has its bodies: the clock starts
        spy = _spy(proc.pid, profile) if profile is not None else None
        cpu0, t0 = _cpu_s(proc.pid), time.perf_counter()
        results = pending.get(timeout=600)
        cpu1, took = _cpu_s(proc.pid), time.perf_counter() - t0
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=120)
    return Run(name, sum(r[0] for r in results), sum(r[1] for r in results), took, cpu1 - cpu0)


def _spy(pid: int, out: Path) -> subprocess.Popen[bytes] | None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        return None
    fmt = ["--format", "raw"] if out.suffix == ".txt" else []  # collapsed stacks: a profile to read as text
    argv = [spy, "record", "-p", str(pid), "-r", "250", "--nonblocking", *fmt, "-o", str(out)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run(name: str, store: bool, database_url: str | None = None, profile: Path | None = None) -> Run:
    """One scenario against a fresh service (``database_url``: PostgreSQL's; None: SQLite in the data dir)."""
    env = {"EVALUATOR_HOST_API_KEYS": KEY, "EVALUATOR_HOST_BACKEND": "process"}
    if database_url:
        env["EVALUATOR_HOST_DATABASE_URL"] = database_url
    if not store:
        env["EVALUATOR_HOST_ONLINE_STORE_SPANS"] = "false"
    with (
        tempfile.TemporaryDirectory(prefix="evaluator-host-bench-") as data_dir,
        serving(data_dir, env) as (base, proc),
    ):
        if store:
            _rules(base)
        return _drive(name, base, proc, profile)


def _rules(base: str) -> None:
    """A span-level rule (every chat span of 1% of the traces) and a session-level one (sessions by ``user.id``,
    scored once quiet for an hour: not within the run), so that routing works on every trace as it arrives."""
    code = "def evaluate(inputs, outputs, trace):\n    return 1.0\n"
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=base, timeout=60, headers=headers) as client:
        made = client.post("/v1/evaluators", json={"name": "bench", "language": "python", "code": code})
        evaluator = made.raise_for_status().json()["id"]
        chat = {"attributes": [{"key": "gen_ai.operation.name", "equals": "chat"}]}
        for rule in (
            {"evaluator_id": evaluator, "target": {"level": "span"}, "filter": chat, "sampling_rate": 0.01},
            {"evaluator_id": evaluator, "target": {"level": "session", "session_key": "user.id", "quiet_s": 3600}},
        ):
            client.post("/v1/online-rules", json=rule).raise_for_status()


def floor() -> Run:
    """The bare endpoint (``bench/online_floor.py``: receive, decode with the same proto package, drop)."""
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "bench.online_floor:app", "--port", str(port)]
    proc = subprocess.Popen([*argv, "--log-level", "warning", "--no-access-log"], cwd=REPO)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc, "the bare endpoint", timeout_s=60)
        return _drive("bare endpoint: receive, decode, drop (the floor)", base, proc)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


SECTION = """
## Online ingestion (OTLP/HTTP)

`POST /v1/traces` on the real service (an API key, process backend), {exporters} concurrent exporters
(processes) each sending {bodies} protobuf bodies of {batch} spans back to back (bodies serialized before the
clock starts, so client-side encoding is not measured; 4 spans per trace, 8 GenAI attributes per span, ~1.2 KB
per span, every id new). The stored runs have two rules routing as the spans arrive: a span-level rule (every
chat span of 1% of the traces) and a session-level rule (sessions by `user.id`, quiet for an hour: joined by
every trace, scored after the run). Baselines of the same run: the same service with
`EVALUATOR_HOST_ONLINE_STORE_SPANS=false` (auth, read, decode and check every span, answer; no store), and the
**floor**: a bare endpoint under the same uvicorn (`bench/online_floor.py`) that receives each body, decodes it
with the same proto package (`ExportTraceServiceRequest.FromString`) and drops it. CPU is the serving process's
user + system time over the run (PostgreSQL's server process is not in it). 1-minute load average {load:.1f}
on {nproc} cores at the start (a shared machine: the ratios to the floor matter more than the rates).

| scenario | spans | spans/s | service CPU per 1,000 spans | errors |
|---|---|---|---|---|
{rows}

Stored / floor (issue 55's goal: >= {goal:.2f}x): {ratios}.

Where a stored span's CPU goes, measured in-process (one thread, the same bodies, {stage_bodies} of them; CPU
time of the process per span — on PostgreSQL the client's only). The row *the span's protobuf bytes kept* is not
the service: it is what the receiver would cost if it stored each span as received and parsed it only when read
(`bench/ingest_ceiling.py`: ids, times, name and bounds read, no attribute made into a Python value; the same
store, schema and indexes), a lower bound of that design:

| database | decode (upb → checked span values) | row (`body` JSON) | store (insert, traces, usage, commit) | total |
|---|---|---|---|---|
{stages}

`python -m bench.online_bench` runs this section alone (`ONLINE_EXPORTERS`, `ONLINE_BODIES`;
`ONLINE_PROFILE=DIR` also records py-spy flame graphs of the stored runs there).
"""

GOAL = 0.15  # issue 55: stored spans/s at least this share of the floor's


@dataclass
class Stages:
    """CPU µs per span of each stage of the receive path, in-process."""

    database: str
    decode: float
    row: float
    store: float

    def row_text(self) -> str:
        total = self.decode + self.row + self.store
        return f"| {self.database} | {self.decode:.1f} µs | {self.row:.1f} µs | {self.store:.1f} µs | {total:.1f} µs |"


STAGE_BODIES = 40


def stages(database: str, url: str | None, steps: Any = None) -> Stages:
    """The in-process split of :data:`STAGE_BODIES` bodies' CPU (``url``: None, SQLite in a temporary dir).
    ``steps``: another receiver's ``(decode, rows)`` — ``decode(payload)`` what the body holds, ``rows(decoded)``
    the ``online_spans`` rows the store writes — in place of the service's (``otlp.decode``, ``ingest._row``)."""
    sys.path.insert(0, str(REPO))
    from evaluator_host.online.receive import otlp
    from evaluator_host.online.receive.ingest import _row
    from evaluator_host.settings import Settings
    from evaluator_host.store.db import make_engine, utcnow
    from evaluator_host.store.online.spans import OnlineSpanStore

    rng = random.Random(99)
    bodies = [body(rng) for _ in range(STAGE_BODIES)]
    with tempfile.TemporaryDirectory(prefix="evaluator-host-bench-") as data_dir:
        limits = otlp.Limits.of(Settings(data_dir=Path(data_dir)))
        decode, rows_of = steps or (
            lambda payload: otlp.decode(payload, otlp.PROTOBUF, limits).spans,
            lambda decoded: [_row(r.span, r.service_name, r.scope) for r in decoded],
        )
        engine = make_engine(url or f"sqlite:///{data_dir}/stages.db")
        store = OnlineSpanStore(engine)
        spent = [0.0, 0.0, 0.0]
        for payload in bodies:
            t0 = time.process_time()
            decoded = decode(payload)
            t1 = time.process_time()
            rows = rows_of(decoded)
            t2 = time.process_time()
            assert len(rows) == BATCH, f"{len(rows)} of a body's {BATCH} spans made rows: a split of spans not stored"
            store.write_within("ws_bench", rows, utcnow(), None)
            t3 = time.process_time()
            for i, took in enumerate((t1 - t0, t2 - t1, t3 - t2)):
                spent[i] += took
        engine.dispose()
    n = STAGE_BODIES * BATCH / 1e6
    return Stages(database, spent[0] / n, spent[1] / n, spent[2] / n)


@dataclass
class Figures:
    """One run of the section: the stored runs (SQLite, PostgreSQL when a server could be started), the
    service's own receive-and-drop, the bare floor, the load average when it started, the in-process split."""

    stored: list[Run]
    dropped: Run
    floor: Run
    load: float
    stages: list[Stages]


def _postgres() -> tuple[Any, str] | tuple[None, None]:
    """A throwaway PostgreSQL server (tests/support/pg.py) and a fresh database's URL; (None, None) without one."""
    sys.path.insert(0, str(REPO))
    try:
        from tests.support.pg import Cluster

        cluster = Cluster()
    except Exception as exc:  # no PostgreSQL binaries here: the section has SQLite only
        print(f"online_bench: no PostgreSQL ({exc})", file=sys.stderr)
        return None, None
    return cluster, cluster.database()


def measure(profile_dir: Path | None = None) -> Figures:
    """Every scenario of the section, one after the other (``profile_dir``: py-spy flame graphs of the
    stored runs, ``online-ingest-sqlite.svg`` and ``online-ingest-postgresql.svg``)."""
    load = os.getloadavg()[0]
    flame = (lambda db: profile_dir / f"online-ingest-{db}.svg") if profile_dir else (lambda db: None)
    stored = [run("stored, span- and session-level rules routing (SQLite)", True, profile=flame("sqlite"))]
    split = [
        stages("SQLite", None),
        stages("SQLite, the span's protobuf bytes kept (a ceiling)", None, ingest_ceiling.STEPS),
    ]
    cluster, url = _postgres()
    if cluster is not None:
        try:
            stored.append(run("stored, the same (PostgreSQL)", True, url, profile=flame("postgresql")))
            split.append(stages("PostgreSQL", cluster.database()))
        finally:
            cluster.stop()
    dropped = run("the service, receive-and-drop (`ONLINE_STORE_SPANS=false`)", False)
    return Figures(stored, dropped, floor(), load, split)


def render(figures: Figures) -> str:
    """The docs/benchmarks.md section."""
    floor_rate = figures.floor.rate
    ratios = "; ".join(
        f"{r.name.rsplit('(', 1)[-1].rstrip(')')} **{r.rate / floor_rate:.3f}x** "
        f"({'met' if r.rate >= GOAL * floor_rate and not r.errors else 'MISSED'})"
        for r in figures.stored
    )
    return SECTION.format(
        exporters=EXPORTERS,
        bodies=BODIES,
        batch=BATCH,
        load=figures.load,
        nproc=len(os.sched_getaffinity(0)),
        rows="\n".join(r.row() for r in (*figures.stored, figures.dropped, figures.floor)),
        goal=GOAL,
        ratios=ratios,
        stage_bodies=STAGE_BODIES,
        stages="\n".join(s.row_text() for s in figures.stages),
    )


def main() -> int:
    profile = os.environ.get("ONLINE_PROFILE")
    print(render(measure(Path(profile) if profile else None)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
