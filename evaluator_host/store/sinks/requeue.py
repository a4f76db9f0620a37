"""Sending a rule's (or a job's) ended deliveries again (issue 52): ``POST /v1/online-rules/{id}/sinks/redeliver``
and ``POST /v1/jobs/{id}/sinks/redeliver``.

Contract: :func:`requeue` puts the ``source`` owner's delivery rows in one of ``states`` (default ``failed``)
back to ``pending``, due now, ``attempts`` 0, no claim — the delivery loop (``sinks/delivery.py``) sends them
again at its next pass. Each row keeps its ``error`` (the last one, until the next attempt writes its own) and
its idempotency ``key`` (a tool that already holds the score overwrites or finds it: recorded once). Only rows
whose sink is still on the owner (its index in the current ``sinks``) are put back, their ``type`` the current
sink's (the operator may have changed the sink); one ``UPDATE`` per sink, so a row another service is sending
(``sending``) is never touched.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.engine import Engine

from evaluator_host.store.db import JobRow
from evaluator_host.store.online.rows import OnlineRuleRow, SinkDeliveryRow

__all__ = ["REQUEUABLE", "requeue"]

REQUEUABLE = ("failed", "skipped")  # the ended states a delivery may be sent again from


def requeue(engine: Engine, source: str, owner_id: str, states: Collection[str], now: datetime) -> int:
    """Put the deliveries in ``states`` of the rule (``source`` ``rule``) or job (``job``) ``owner_id`` back to
    ``pending``; how many (the caller checked the owner is the workspace's)."""
    wanted = [s for s in states if s in REQUEUABLE]
    d = SinkDeliveryRow
    total = 0
    with engine.begin() as conn:
        owner = (OnlineRuleRow.sinks, OnlineRuleRow.id) if source == "rule" else (JobRow.sinks, JobRow.id)
        sinks = list(conn.scalar(select(owner[0]).where(owner[1] == owner_id)) or [])
        if not wanted:
            return 0
        for index, sink in enumerate(sinks):
            done = conn.execute(
                update(d)
                .where(d.source == source, d.rule_id == owner_id, d.sink == index, d.state.in_(wanted))
                .values(
                    state="pending",
                    attempts=0,
                    due_at=now,
                    claimed_by=None,
                    claimed_until=None,
                    type=str(sink.get("type")),
                )
            )
            total += int(done.rowcount or 0)
    return total
