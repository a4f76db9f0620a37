"""Warm evaluation by id, one client, against a bare FastAPI + pydantic endpoint taking the same body.

Both servers run at once (the service on the process backend, one warm Python evaluator; the bare
endpoint of :data:`bench.load_bench.BARE_APP` under the same uvicorn) and wrk, one keep-alive
connection, alternates between them: ``ROUNDS`` pairs of ``SECONDS``-second runs, so a neighbour's
burst on this shared machine lands on both sides alike. The figure is the ratio of the medians of the
rounds' p50 (issue 55 §5: ≤ 2x). Between the rounds, this machine's price of a cross-process round trip
(``bench/wakeups.py``): a call by id makes one (service → worker → service) that the bare endpoint does not.

Run alone: ``.venv/bin/python -m bench.byid_bench``.
"""

from __future__ import annotations

import os
import statistics
import sys
from dataclasses import dataclass, field

from bench.common import REPO, serve, verdict
from bench.load_bench import Load, _evaluators, bare_server, wrk
from bench.wakeups import RoundTrip, round_trip

ROUNDS = int(os.environ.get("BYID_ROUNDS", "5"))
SECONDS = int(os.environ.get("BYID_SECONDS", "5"))
GOAL = 2.0


@dataclass
class ByIdFigures:
    bare: list[Load] = field(default_factory=list)
    service: list[Load] = field(default_factory=list)
    wakeups: list[RoundTrip] = field(default_factory=list)  # this machine's, measured between the rounds

    @property
    def errors(self) -> int:
        """Answers that were not 2xx (or sockets that failed), both sides, every round: any fails the goal."""
        return sum(load.errors for load in (*self.bare, *self.service))

    @property
    def ratio(self) -> float:
        return statistics.median(s.p50_ms for s in self.service) / statistics.median(b.p50_ms for b in self.bare)


def measure(backend: str = "process") -> ByIdFigures:
    figures = ByIdFigures()
    with bare_server() as (bare_base, bare_path), serve(backend) as (base, _data, _proc):
        paths = _evaluators(base, ["python"])
        wrk("warm-up", bare_base, [bare_path], 1, 2)
        wrk("warm-up", base, paths, 1, 2)
        for _ in range(ROUNDS):
            figures.bare.append(wrk("bare FastAPI endpoint, same body", bare_base, [bare_path], 1, SECONDS))
            figures.service.append(wrk(f"{backend}: 1 evaluator by id", base, paths, 1, SECONDS))
            figures.wakeups.append(round_trip(1000))
    return figures


def render(f: ByIdFigures) -> tuple[str, str]:
    """(section, summary line) for docs/benchmarks.md."""
    bare50 = statistics.median(b.p50_ms for b in f.bare)
    svc50 = statistics.median(s.p50_ms for s in f.service)
    rows = "\n".join(
        f"| {i + 1} | {b.p50_ms:.3f} | {b.requests_s:,.0f} | {s.p50_ms:.3f} | {s.requests_s:,.0f} | "
        f"{s.p50_ms / b.p50_ms:.2f}× |"
        for i, (b, s) in enumerate(zip(f.bare, f.service, strict=True))
    )
    trip = statistics.median(w.p50_us for w in f.wakeups) if f.wakeups else float("nan")
    summary = (
        f"- warm evaluation by id, 1 client: p50 **{svc50:.3f} ms** against the bare FastAPI + pydantic "
        f"endpoint's {bare50:.3f} ms in the same run = **{f.ratio:.2f}×** "
        f"(goal ≤ {GOAL:g}×: {verdict(f.ratio <= GOAL and not f.errors)})"
        + (f"; **{f.errors:,} answers not 2xx**: the figures are not of evaluations" if f.errors else "")
    )
    section = f"""
## Warm evaluation by id against a bare endpoint (process backend; issue 55 §5)

`python -m bench.byid_bench`: the service (process backend, one warm Python evaluator, 20 warm-up calls)
and a bare FastAPI + pydantic endpoint taking the same body (`bench/load_bench.py`'s `BARE_APP`, under the
same uvicorn) run side by side; `wrk` with one keep-alive connection alternates between them, {len(f.bare)}
pairs of {SECONDS} s runs, so a neighbour's burst on this shared machine falls on both alike. Each answer
is checked for a 2xx status by wrk.

{summary}

| round | bare p50 ms | bare req/s | by id p50 ms | by id req/s | ratio |
|---|---|---|---|---|---|
{rows}

A call by id also crosses to its worker's process and back, which the bare endpoint never does: on this
machine, in the same run, a pipe round trip to another process after {f.wakeups[0].gap_us if f.wakeups else 0} µs
idle took **{trip:.1f} µs** p50 (`bench/wakeups.py`, the median of the rounds' p50, 1,000 round trips after each
round): {trip / 1000 / bare50:.2f}× the bare endpoint's whole call, before the worker's own CPU.
"""
    return section, summary


if __name__ == "__main__":
    os.chdir(REPO)
    body, head = render(measure(*(sys.argv[1:2] or ["process"])))
    print(head)
    print(body)
