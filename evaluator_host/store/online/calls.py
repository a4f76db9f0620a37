"""A rule's calls to its judges through the egress proxy (issue 51, ``model_calls_per_minute``): written
here, read by :func:`~evaluator_host.store.online.budgets.usage`.

Contract: :func:`record` adds one ``online_model_calls`` row per rule of a scoring round whose cases made
any connection (``(rule_id, rows, calls)``: how many of its rows ran, how many connections the proxy
counted for them — ``online/deciding/model_calls.py``), and in the same transaction deletes that rule's rows older
than :data:`KEPT` (what a minute's budget and the page need is the last minute). Every service on the
database writes here, so the budget is the rule's, not one process's. Blocking: call from a thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import Table, delete, insert
from sqlalchemy.engine import Engine

from evaluator_host.store.online.rows import OnlineModelCallsRow

__all__ = ["CALLS", "KEPT", "record"]

CALLS: Table = OnlineModelCallsRow.__table__  # type: ignore[assignment]
KEPT = timedelta(minutes=10)


def record(engine: Engine, rounds: Sequence[tuple[str, int, int]], at: datetime) -> None:
    """Store ``(rule_id, rows, calls)`` for each rule of a round made at ``at`` (rounds of no call: skipped)."""
    made = [{"rule_id": rule, "at": at, "rows": rows, "calls": calls} for rule, rows, calls in rounds if calls > 0]
    if not made:
        return
    with engine.begin() as conn:
        conn.execute(insert(CALLS), made)
        for rule in sorted({rule for rule, _rows, calls in rounds if calls > 0}):
            conn.execute(delete(CALLS).where(CALLS.c.rule_id == rule, CALLS.c.at < at - KEPT))
