"""Completeness-aware readiness, on SQLite and PostgreSQL: a trace whose root has ended and whose every
span's parent is among its spans is ready after the settle period; a trace with an orphan (a span whose
parent has not arrived) or without an ended root waits the whole quiet period; the settle period equal
to the quiet period turns the fast path off; and each trace is routed — one score row per rule — once,
whichever path made it ready and whatever spans arrive after.

Spans go through the receiver's writer (:meth:`OnlineSpanStore.write`) with explicit receipt times and
assembly runs with an explicit clock: nothing here waits or times anything."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine

from evaluator_host.online.deciding.router import decide
from evaluator_host.store.db import utcnow
from evaluator_host.store.online.rules import RuleStore
from evaluator_host.store.online.scores import ScoreQueue
from evaluator_host.store.online.spans import OnlineSpanStore
from tests.support.online import WS, hex_id, score_rows, trace_states

QUIET, SETTLE, TIMEOUT = 2.0, 0.25, 300.0


def _span(trace_id: str, span_id: str, parent: str | None, at: datetime) -> dict[str, Any]:
    return {"trace_id": trace_id, "span_id": span_id, "parent_span_id": parent, "name": "s", "service_name": "svc",
            "start_ns": 1, "end_ns": 2, "body": "{}", "root_ended_at": at if parent is None else None}  # fmt: skip


def _ready(store: OnlineSpanStore, now: datetime, settle: float = SETTLE) -> int:
    return store.mark_ready(now, QUIET, TIMEOUT, settle)


def _route(engine: Engine) -> int:
    return ScoreQueue(engine).route(500, 100_000, decide).traces


def _rule(engine: Engine) -> str:
    base: dict[str, Any] = {"name": None, "revision": None, "filter": {}, "sampling_rate": 1.0}
    base.update(mapping=None, enabled=True)
    return RuleStore(engine).create(WS, "ev_1", base).id


def test_a_complete_tree_is_ready_after_the_settle_period_in_any_arrival_order(engine: Engine) -> None:
    store, t0 = OnlineSpanStore(engine), utcnow()
    trace_id, root, mid, leaf = hex_id(16), hex_id(8), hex_id(8), hex_id(8)
    store.write(WS, [_span(trace_id, leaf, mid, t0)], t0)  # the leaf first: an orphan until mid comes
    store.write(WS, [_span(trace_id, root, None, t0)], t0 + timedelta(seconds=0.1))
    _ready(store, t0 + timedelta(seconds=1))
    assert trace_states(engine)[trace_id] == "open"  # root ended, quiet since, but leaf's parent is missing
    last = t0 + timedelta(seconds=1.1)
    store.write(WS, [_span(trace_id, mid, root, t0)], last)  # now complete
    _ready(store, last + timedelta(seconds=SETTLE / 2))
    assert trace_states(engine)[trace_id] == "open"  # complete, but a span came within the settle period
    assert _ready(store, last + timedelta(seconds=SETTLE * 1.5)) == 1
    assert trace_states(engine)[trace_id] == "ready"


def test_an_orphan_or_a_missing_root_waits_the_quiet_period(engine: Engine) -> None:
    store, t0 = OnlineSpanStore(engine), utcnow()
    orphaned, rootless = hex_id(16), hex_id(16)
    root = hex_id(8)
    store.write(WS, [_span(orphaned, root, None, t0), _span(orphaned, hex_id(8), hex_id(8), t0)], t0)
    store.write(WS, [_span(rootless, hex_id(8), hex_id(8), t0)], t0)  # its parent (and root) never comes
    assert _ready(store, t0 + timedelta(seconds=QUIET - 0.1)) == 0
    assert trace_states(engine) == {orphaned: "open", rootless: "open"}
    assert _ready(store, t0 + timedelta(seconds=QUIET + 0.1)) == 1  # the quiet period, as without the fast path
    assert trace_states(engine) == {orphaned: "ready", rootless: "open"}  # no ended root: the timeout's
    assert _ready(store, t0 + timedelta(seconds=TIMEOUT + 1)) == 1
    assert trace_states(engine)[rootless] == "ready"


def test_a_settle_period_equal_to_the_quiet_period_turns_the_fast_path_off(engine: Engine) -> None:
    store, t0 = OnlineSpanStore(engine), utcnow()
    trace_id, root = hex_id(16), hex_id(8)
    store.write(WS, [_span(trace_id, root, None, t0), _span(trace_id, hex_id(8), root, t0)], t0)
    assert _ready(store, t0 + timedelta(seconds=1), settle=QUIET) == 0
    assert trace_states(engine)[trace_id] == "open"
    assert _ready(store, t0 + timedelta(seconds=QUIET + 0.1), settle=QUIET) == 1


def test_each_trace_is_routed_once_whichever_path_made_it_ready_and_late_spans_score_nothing(engine: Engine) -> None:
    rules = [_rule(engine), _rule(engine)]
    store, t0 = OnlineSpanStore(engine), utcnow()
    fast, slow = hex_id(16), hex_id(16)
    fast_root, slow_root, missing = hex_id(8), hex_id(8), hex_id(8)
    store.write(WS, [_span(fast, fast_root, None, t0), _span(fast, hex_id(8), fast_root, t0)], t0)
    store.write(WS, [_span(slow, slow_root, None, t0), _span(slow, hex_id(8), missing, t0)], t0)
    assert _ready(store, t0 + timedelta(seconds=SETTLE + 0.1)) == 1  # the complete one only
    assert _route(engine) == 1
    # a late span of the routed trace (a remote service's, say): stored, counted, never scores it again
    late = t0 + timedelta(seconds=0.5)
    assert store.write(WS, [_span(fast, hex_id(8), fast_root, t0)], late) == 1
    # the slow trace's missing span arrives: complete now, ready after the settle period from it
    store.write(WS, [_span(slow, missing, slow_root, t0)], late)
    for seconds in (SETTLE + 0.6, QUIET + 1, TIMEOUT + 1):  # every later pass, every path
        _ready(store, t0 + timedelta(seconds=seconds))
        _route(engine)
    assert trace_states(engine) == {fast: "routed", slow: "routed"}
    pairs = sorted((r.rule_id, r.trace_id) for r in score_rows(engine))
    assert pairs == sorted((rule, trace) for rule in rules for trace in (fast, slow))  # once per (rule, trace)
