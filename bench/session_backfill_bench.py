"""A session-level rule's backfill (issue 50), part of ``bench/backfill_bench.py``'s section.

``SESSION_BACKFILL_SESSIONS`` (default 5,000) chat sessions of 4 two-span turns each, stored as the service
stores them (written ``ready``, routed by the service: sessions are recorded when their traces are routed),
scored by a session-level rule with a trivial evaluator that reads the session dict: the dry run, the backfill,
then a ``PUT`` of a new evaluator revision, its dry run (its ``estimate_s`` against what the re-run then took) and
the re-run, which scores every session again and supersedes every earlier score (counted in the database). CPU
is the service's and its workers' a session. Process backend, SQLite.
"""

from __future__ import annotations

import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import func, select

from bench import backfill_bench as b
from bench.common import serving, verdict
from evaluator_host.store.db import make_engine
from evaluator_host.store.online.rows import OnlineScoreRow, OnlineTraceRow

SESSIONS = int(os.environ.get("SESSION_BACKFILL_SESSIONS", "5000"))
TURNS = 4
CODE = "def evaluate(inputs, outputs, trace):\n    return 1.0 if trace.get('num_traces') else 0.0\n"


def measure() -> dict[str, Any]:
    """The two backfills' figures (see the module docstring)."""
    env = {**b.ENV, "EVALUATOR_HOST_ONLINE_BACKFILL_DIRECT": "true"}
    with tempfile.TemporaryDirectory(prefix="evaluator-host-bench-session-backfill-") as data_dir:
        with serving(data_dir, env) as (base, proc), httpx.Client(base_url=base, timeout=600) as client:
            engine = make_engine(f"sqlite:///{data_dir}/evaluator-host.db")
            start, n = datetime.now(UTC) - timedelta(hours=1), SESSIONS * TURNS
            for k in range(0, n, 5000):
                turns = [b._chat(k + i, f"session-{(k + i) // TURNS}") for i in range(min(5000, n - k))]
                b._write(engine, turns, start + timedelta(milliseconds=k), "ready")
            unrouted = select(func.count()).select_from(OnlineTraceRow).where(OnlineTraceRow.state != "routed")
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                with engine.connect() as conn:
                    if not conn.scalar(unrouted):
                        break
                time.sleep(0.5)
            body = {"name": "sessions", "language": "python", "code": CODE, "settings": {"cache": True}}
            ev = client.post("/v1/evaluators", json=body).json()["id"]
            target = {"level": "session", "quiet_s": 1}
            rule = client.post("/v1/online-rules", json={"evaluator_id": ev, "target": target}).json()["id"]
            out: dict[str, Any] = {"sessions": SESSIONS}
            for run in ("fresh", "new_revision"):
                if run == "new_revision":
                    put = client.put(f"/v1/evaluators/{ev}", json={**body, "code": CODE.replace("1.0 if", "0.5 if")})
                    put.raise_for_status()  # else the "re-run" would skip every session: nothing measured
                at = time.perf_counter()
                dry = client.post(f"/v1/online-rules/{rule}/backfill", json={"dry_run": True}).json()
                dry_s = time.perf_counter() - at
                out[run] = {**b._backfill(client, rule, (proc.pid,)), "dry_s": dry_s, "dry": dry}
            is_current = OnlineScoreRow.superseded_by.is_(None)
            current = select(is_current, func.count()).where(
                OnlineScoreRow.rule_id == rule, OnlineScoreRow.state == "done"
            )
            with engine.connect() as conn:
                counts = {bool(c): int(k) for c, k in conn.execute(current.group_by(is_current))}
            out["current"], out["superseded"] = counts.get(True, 0), counts.get(False, 0)
            engine.dispose()
            return out


def row(m: dict[str, Any] | None, fresh_traces: dict[str, Any]) -> list[str]:
    """The section's row (none when not measured); ``fresh_traces``: the trace-level fresh backfill of the run."""
    if not m:
        return []
    f, r = m["fresh"], m["new_revision"]
    ok = m["sessions"] > 0 and f["done"] == r["done"] == m["sessions"] == m["current"] == m["superseded"]
    return [
        f"| session-level backfill ({m['sessions']:,} sessions of {TURNS} turns: {m['sessions'] * TURNS:,} traces), "
        f"then a new revision's re-run (its dry run estimated {r['dry']['estimate_s']:.1f} s) | fresh "
        f"{f['rate']:,.0f} sessions/s ({f['seconds']:.1f} s, {f['cpu_us']:,.0f} µs CPU a session; dry run "
        f"{f['dry_s']:.2f} s), re-run {r['rate']:,.0f}/s ({r['seconds']:.1f} s, {r['cpu_us']:,.0f} µs); "
        f"{m['current']:,} current scores, {m['superseded']:,} superseded | trace-level fresh backfill: "
        f"{fresh_traces['rate']:,.0f} traces/s ({fresh_traces['cpu_us']:.0f} µs) | every session scored twice, each "
        f"first score superseded (no rate set by the issue) | {verdict(ok)} |"
    ]
