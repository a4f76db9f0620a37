"""Online ingestion over OTLP/gRPC against OTLP/HTTP, in the same run on the same service.

One real service (``evaluator-host serve``, SQLite in a fresh data dir, an API key) serves both
``POST /v1/traces`` and ``TraceService/Export`` (``EVALUATOR_HOST_OTLP_GRPC_PORT``). The bodies are
``bench/online_bench.py``'s (512 spans of 4-span GenAI traces, serialized before the clock starts,
every id new), sent by concurrent exporter processes back to back: over HTTP with ``httpx``, over
gRPC as the raw serialized ``ExportTraceServiceRequest`` on one channel per exporter (what the SDK's
gRPC exporter puts on the wire). The passes alternate HTTP, gRPC, gRPC, HTTP so that neither protocol
always meets the larger table; each protocol's figure is its two passes together. Both store every
span (the same ``Ingest`` use case): the difference is the transport.

Run alone: ``.venv/bin/python -m bench.grpc_bench`` (``GRPC_EXPORTERS``, ``GRPC_BODIES`` per pass).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import os
import random
import sys
import tempfile
import time

import grpc
import httpx

from bench.common import free_port, serving
from bench.online_bench import BATCH, KEY, Run, _cpu_s, body

EXPORTERS = int(os.environ.get("GRPC_EXPORTERS", "4"))
BODIES = int(os.environ.get("GRPC_BODIES", "20"))  # per exporter and pass: 2 passes x 4 x 20 x 512 = 81,920 spans
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _exporter(args: tuple[str, str, int, int, multiprocessing.synchronize.Barrier]) -> tuple[int, int, float]:
    """One exporter process over ``protocol``: serialize its bodies, wait, send them; (spans, errors, s)."""
    protocol, target, seed, n, barrier = args
    rng = random.Random(seed)
    bodies = [body(rng) for _ in range(n)]
    errors = 0
    if protocol == "http":
        headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {KEY}"}
        with httpx.Client(base_url=target, timeout=60, headers=headers) as client:
            client.get("/healthz")
            barrier.wait()
            started = time.perf_counter()
            for payload in bodies:
                errors += client.post("/v1/traces", content=payload).status_code != 200
            took = time.perf_counter() - started
        return n * BATCH, errors, took
    metadata = (("authorization", f"Bearer {KEY}"),)
    with grpc.insecure_channel(target) as channel:
        export = channel.unary_unary(EXPORT)
        grpc.channel_ready_future(channel).result(timeout=30)
        barrier.wait()
        started = time.perf_counter()
        for payload in bodies:
            try:
                export(payload, metadata=metadata, timeout=60)
            except grpc.RpcError:
                errors += 1
        took = time.perf_counter() - started
    return n * BATCH, errors, took


def _pass(protocol: str, target: str, pid: int, seed: int) -> Run:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Manager().Barrier(EXPORTERS + 1)
    with ctx.Pool(EXPORTERS) as pool:
        work = [(protocol, target, seed + 1000 * i, BODIES, barrier) for i in range(EXPORTERS)]
        pending = pool.map_async(_exporter, work)
        barrier.wait()
        cpu0, t0 = _cpu_s(pid), time.perf_counter()
        results = pending.get(timeout=600)
        cpu1, took = _cpu_s(pid), time.perf_counter() - t0
    return Run(protocol, sum(r[0] for r in results), sum(r[1] for r in results), took, cpu1 - cpu0)


def _sum(name: str, runs: list[Run]) -> Run:
    return Run(name, sum(r.spans for r in runs), sum(r.errors for r in runs), sum(r.seconds for r in runs),
               sum(r.cpu_s for r in runs))  # fmt: skip


def measure() -> tuple[Run, Run, float]:
    """The HTTP and gRPC figures of one run, and the load average when it started."""
    load = os.getloadavg()[0]
    port = free_port()
    env = {
        "EVALUATOR_HOST_API_KEYS": KEY,
        "EVALUATOR_HOST_BACKEND": "process",
        "EVALUATOR_HOST_OTLP_GRPC_PORT": str(port),
    }
    runs: dict[str, list[Run]] = {"http": [], "grpc": []}
    with (
        tempfile.TemporaryDirectory(prefix="evaluator-host-bench-") as data_dir,
        serving(data_dir, env) as (base, proc),
    ):
        targets = {"http": base, "grpc": f"127.0.0.1:{port}"}
        for seed, protocol in enumerate(("http", "grpc", "grpc", "http")):
            runs[protocol].append(_pass(protocol, targets[protocol], proc.pid, 50_000 + 10_000 * seed))
    return (
        _sum("OTLP/HTTP (`POST /v1/traces`)", runs["http"]),
        _sum("OTLP/gRPC (`TraceService/Export`)", runs["grpc"]),
        load,
    )


SECTION = """
## Online ingestion: OTLP/gRPC against OTLP/HTTP

One service (SQLite, an API key, process backend) serving both receivers; {exporters} concurrent
exporter processes per pass, each sending {bodies} protobuf bodies of {batch} spans back to back (the
bodies of *Online ingestion (OTLP/HTTP)*, serialized before the clock starts; every span stored). Passes
in the order HTTP, gRPC, gRPC, HTTP; each row is its protocol's two passes. 1-minute load average
{load:.1f} on {nproc} cores at the start (a shared machine: the ratio matters more than the rates).

| receiver | spans | spans/s | service CPU per 1,000 spans | errors |
|---|---|---|---|---|
{rows}

gRPC / HTTP: **{ratio:.2f}x** the spans/s (issue 51's goal: gRPC ≥ HTTP in the same run: **{verdict}**).
`python -m bench.grpc_bench` runs this section alone (`GRPC_EXPORTERS`, `GRPC_BODIES`).
"""


def render(http: Run, over_grpc: Run, load: float) -> str:
    """The docs/benchmarks.md section."""
    return SECTION.format(
        exporters=EXPORTERS,
        bodies=BODIES,
        batch=BATCH,
        load=load,
        nproc=len(os.sched_getaffinity(0)),
        rows="\n".join(r.row() for r in (http, over_grpc)),
        ratio=over_grpc.rate / http.rate,
        verdict="met" if over_grpc.rate >= http.rate and not over_grpc.errors else "MISSED",
    )


def main() -> int:
    print(render(*measure()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
