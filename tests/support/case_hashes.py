"""What the backfill's case-hash tests share: a rule of the test workspace, a page's spans, the case keys an
earlier backfill left or a page stores, traces aged past retention (``tests/online/test_backfill_case_hashes.py``,
``tests/online/test_case_hashes_sweep.py``, ``tests/online/test_case_hashes_race.py``)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, exists, func, select, update

from evaluator_host.store.online.case_hashes import CaseHashRow, remember
from evaluator_host.store.online.routing import spans_of as routed_spans
from evaluator_host.store.online.rows import OnlineSpanRow, OnlineTraceRow
from evaluator_host.store.online.rules import RuleRecord, RuleStore
from evaluator_host.store.result_cache import ResultCacheStore
from tests.support.online import WS

EVERYTHING = (None, None)
SCOPE = hashlib.sha256(b"evaluator revision 1, no mapping").digest()
CAP = 1_000_000
RETENTION = timedelta(days=7)  # ONLINE_SPAN_RETENTION_S's default
H, T = CaseHashRow, OnlineTraceRow


def make_rule(store: RuleStore, **fields: Any) -> RuleRecord:
    base: dict[str, Any] = {"name": None, "revision": None, "filter": {}, "sampling_rate": 1.0, "mapping": None}
    return store.create(WS, "ev_1", {**base, "enabled": True, **fields})


def spans_of(conn: Any, page: Any) -> Any:
    return routed_spans(conn, page, bodies=True)


def scored_before(engine: Engine, traces: list[str], *, cache: bool = True, scope: bytes = SCOPE) -> None:
    """What an earlier backfill's pages left: each trace's case key (its span count then: 2, its generation: its
    ``first_seen_at`` now) with its answer in the result cache (``cache``: False — the entry evicted since)."""
    if cache:
        cache_answers(engine, traces)
    with engine.begin() as conn:
        seen = dict(conn.execute(select(T.trace_id, T.first_seen_at).where(T.trace_id.in_(traces))).all())
        remember(
            conn,
            [
                {"workspace_id": WS, "scope": scope, "target_id": t, "span_id": None, "span_count": 2,
                 "first_seen_at": seen[t], "case_key": case_key(t), "status": "ok", "score": 0.5, "passed": None,
                 "label": t[:8], "runtime_id": "python", "duration_ms": 0.1}
                for t in traces
            ],
        )  # fmt: skip


def case_key(trace_id: str) -> bytes:
    """The case key ``scored_before`` and ``page_hashes`` give ``trace_id``'s case (a stand-in for its content's)."""
    return hashlib.sha256(f"case of {trace_id}".encode()).digest()


def cache_answers(engine: Engine, traces: list[str]) -> None:
    """Each trace's answer in the result cache under :func:`case_key` (as a page's misses add them)."""
    texts = {t: json.dumps({"status": "ok", "score": 0.5, "label": t[:8]}, separators=(",", ":")) for t in traces}
    ResultCacheStore(engine).put(WS, [(case_key(t), "ok", texts[t]) for t in traces], 10_000_000)


def page_hashes(page: Any, scope: bytes = SCOPE) -> list[dict[str, Any]]:
    """The case-hash rows the planner stores with a page it scored (``online/backfill/direct.py``): each new row's
    trace with its case key, and the span count and generation the page read it with."""
    got = page.got
    return [
        {"workspace_id": r["workspace_id"], "scope": scope, "target_id": r["trace_id"], "span_id": None,
         "span_count": got.span_counts[r["trace_id"]], "first_seen_at": got.first_seen[r["trace_id"]],
         "case_key": case_key(r["trace_id"]), "status": "ok", "score": 0.5, "passed": None,
         "label": r["trace_id"][:8], "runtime_id": "python", "duration_ms": 0.1}
        for r in got.rows
    ]  # fmt: skip


def age(engine: Engine, trace_id: str) -> None:
    """Make ``trace_id``'s spans and trace older than the retention period (as 8 days of waiting would)."""
    old = datetime.now(UTC) - RETENTION - timedelta(days=1)
    with engine.begin() as conn:
        conn.execute(update(OnlineSpanRow).where(OnlineSpanRow.trace_id == trace_id).values(received_at=old))
        conn.execute(update(T).where(T.trace_id == trace_id).values(last_span_at=old, first_seen_at=old))


def orphans(engine: Engine) -> int:
    """Case-hash rows whose trace is not stored."""
    trace = exists().where(T.workspace_id == H.workspace_id, T.trace_id == H.target_id)
    with engine.connect() as conn:
        return int(conn.scalar(select(func.count()).select_from(H).where(~trace)) or 0)
