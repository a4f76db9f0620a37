"""What the backfill's case-hash tests share: a rule of the test workspace, a page's spans, and the case keys an
earlier backfill left (``tests/online/test_backfill_case_hashes.py``, ``tests/online/test_case_hashes_sweep.py``)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sqlalchemy import Engine

from evaluator_host.store.online.case_hashes import remember
from evaluator_host.store.online.routing import spans_of as routed_spans
from evaluator_host.store.online.rules import RuleRecord, RuleStore
from evaluator_host.store.result_cache import ResultCacheStore
from tests.support.online import WS

EVERYTHING = (None, None)
SCOPE = hashlib.sha256(b"evaluator revision 1, no mapping").digest()
CAP = 1_000_000


def make_rule(store: RuleStore, **fields: Any) -> RuleRecord:
    base: dict[str, Any] = {"name": None, "revision": None, "filter": {}, "sampling_rate": 1.0, "mapping": None}
    return store.create(WS, "ev_1", {**base, "enabled": True, **fields})


def spans_of(conn: Any, page: Any) -> Any:
    return routed_spans(conn, page, bodies=True)


def scored_before(engine: Engine, traces: list[str], *, cache: bool = True, scope: bytes = SCOPE) -> None:
    """What an earlier backfill's pages left: each trace's case key (its span count then: 2) with its answer in
    the result cache (``cache``: False — the entry evicted since)."""
    keys = {t: hashlib.sha256(f"case of {t}".encode()).digest() for t in traces}
    texts = {t: json.dumps({"status": "ok", "score": 0.5, "label": t[:8]}, separators=(",", ":")) for t in traces}
    if cache:
        ResultCacheStore(engine).put(WS, [(keys[t], "ok", texts[t]) for t in traces], 10_000_000)
    with engine.begin() as conn:
        remember(
            conn,
            [
                {"workspace_id": WS, "scope": scope, "target_id": t, "span_id": None, "span_count": 2,
                 "case_key": keys[t], "status": "ok", "score": 0.5, "passed": None, "label": t[:8],
                 "runtime_id": "python", "duration_ms": 0.1}
                for t in traces
            ],
        )  # fmt: skip
