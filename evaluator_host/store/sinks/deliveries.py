"""``online_sink_deliveries``: one row per (rule, target, sink) — a score's delivery to one of its rule's
sinks (issue 52, migration 0016).

Contract:

* :meth:`SinkDeliveryStore.enqueue` finds ``done`` scores of live rules with sinks, stored since
  ``since``, that have no delivery row yet, and inserts one ``pending`` row per sink (insert-or-ignore on
  the primary key): run by every service on every pass, so a score stored by a service killed before it
  enqueued is still delivered, and two services never make two rows;
* :meth:`SinkDeliveryStore.claim` takes rows ``pending`` past ``due_at`` or ``sending`` past an expired
  claim (their service died) with one conditional ``UPDATE`` each (``attempts + 1``): a row another
  service claimed in between does not match and is not this one's;
* :meth:`SinkDeliveryStore.finish` writes the outcome only while this service holds the claim;
* :meth:`SinkDeliveryStore.release_own` shortens the claims a previous process of this service (the same
  service id: the data dir's, which one process holds at a time) left ``sending``, at start-up, to end soon —
  after what that process's request could still take at the tool (a request begun before the restart, within
  its timeout): they would otherwise hold the rows for the rest of the lease (a minute). Not to nothing: a tool
  that deduplicates by looking up before it writes (MLflow) could still be writing the dead process's request,
  and an immediate resend would then write twice. Other services' claims are left to expire.

Each row's ``key`` is derived from (rule, target, revision) and sent as the tool's idempotency key
(Phoenix's annotation ``identifier``, Langfuse's score ``id``), so a delivery sent again after a crash
overwrites, never duplicates.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from evaluator_host.store.jobs.sink_deliveries import load_job_deliveries
from evaluator_host.store.online.rows import OnlineRuleRow, OnlineScoreRow, OnlineTraceRow, SinkDeliveryRow
from evaluator_host.store.online.rules import rule_record
from evaluator_host.store.sinks.records import Delivery, delivery_key

__all__ = ["Delivery", "SinkDeliveryStore", "delivery_key"]


class SinkDeliveryStore:
    """The deliveries of one database (call from a thread: the methods block)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _insert(self) -> Any:
        return (postgresql if self.engine.dialect.name == "postgresql" else sqlite).insert(SinkDeliveryRow)

    def enqueue(self, now: datetime, since: datetime, limit: int = 500) -> int:
        """Delivery rows for done scores stored since ``since`` that have none; how many were inserted."""
        r, s, d = OnlineRuleRow, OnlineScoreRow, SinkDeliveryRow
        with self.engine.begin() as conn:
            rules = {
                row.id: list(row.sinks)
                for row in conn.execute(select(r.id, r.sinks).where(r.deleted_at.is_(None)))
                if row.sinks
            }
            if not rules:
                return 0
            missing = ~(
                select(d.rule_id).where(d.source == "rule", d.rule_id == s.rule_id, d.target_id == s.target_id).exists()
            )
            found = conn.execute(
                select(s.rule_id, s.target_id, s.workspace_id, s.revision)
                .where(s.rule_id.in_(rules), s.state == "done", s.scored_at >= since, missing)
                .limit(limit)
            ).all()
            rows = [
                {
                    "rule_id": f.rule_id,
                    "target_id": f.target_id,
                    "sink": index,
                    "workspace_id": f.workspace_id,
                    "type": str(sink.get("type")),
                    "key": delivery_key(f.rule_id, f.target_id, f.revision),
                    "state": "pending",
                    "attempts": 0,
                    "error": None,
                    "due_at": now,
                    "created_at": now,
                }
                for f in found
                for index, sink in enumerate(rules[f.rule_id])
            ]
            if not rows:
                return 0
            result = conn.execute(self._insert().values(rows).on_conflict_do_nothing())
            return int(result.rowcount or 0)

    def release_own(self, owner: str, now: datetime, in_flight_s: float) -> int:
        """Make the claims ``owner``'s previous process left ``sending`` end ``in_flight_s`` after ``now`` at the
        latest (one that ends sooner is left as it is: calling again moves nothing back); how many were shortened
        (see the module docstring). Only ``owner``'s: another service that took one over keeps it. The rows'
        attempts stay counted."""
        d = SinkDeliveryRow
        cap = now + timedelta(seconds=in_flight_s)
        with self.engine.begin() as conn:
            done = conn.execute(
                update(d)
                .where(d.state == "sending", d.claimed_by == owner, d.claimed_until > cap)
                .values(claimed_until=cap)
            )
            return int(done.rowcount or 0)

    def claim(self, owner: str, now: datetime, limit: int, lease_s: float) -> list[Delivery]:
        """Up to ``limit`` deliveries now due, held by ``owner`` for ``lease_s`` (see the module docstring)."""
        d = SinkDeliveryRow
        due = or_(
            and_(d.state == "pending", d.due_at <= now),
            and_(d.state == "sending", d.claimed_until < now),
        )
        claimed: list[tuple[str, str, str, int]] = []
        with self.engine.begin() as conn:
            query = select(d.source, d.rule_id, d.target_id, d.sink).where(due).order_by(d.due_at).limit(limit)
            for source, rule_id, target_id, sink in conn.execute(query).all():
                done = conn.execute(
                    update(d)
                    .where(d.source == source, d.rule_id == rule_id, d.target_id == target_id, d.sink == sink, due)
                    .values(
                        state="sending",
                        claimed_by=owner,
                        claimed_until=now + timedelta(seconds=lease_s),
                        attempts=d.attempts + 1,
                    )
                )
                if done.rowcount == 1:
                    claimed.append((source, rule_id, target_id, sink))
        jobs = [key[1:] for key in claimed if key[0] == "job"]
        if not jobs:
            return self._load([key[1:] for key in claimed])
        return self._load([key[1:] for key in claimed if key[0] == "rule"]) + load_job_deliveries(self.engine, jobs)

    def _load(self, keys: list[tuple[str, str, int]]) -> list[Delivery]:
        if not keys:
            return []
        d, s, r, t = SinkDeliveryRow, OnlineScoreRow, OnlineRuleRow, OnlineTraceRow
        query = (
            select(d, s, r, t.root_span_id)
            .join(s, and_(s.rule_id == d.rule_id, s.target_id == d.target_id))
            .join(r, r.id == d.rule_id)
            .outerjoin(t, and_(t.workspace_id == s.workspace_id, t.trace_id == s.trace_id))
            .where(d.source == "rule", tuple_(d.rule_id, d.target_id, d.sink).in_(keys))
        )
        from sqlalchemy.orm import Session

        with Session(self.engine) as session:
            out = []
            for row, score, rule, root in session.execute(query).all():
                out.append(
                    Delivery(
                        row.rule_id,
                        row.target_id,
                        row.sink,
                        row.workspace_id,
                        row.key,
                        row.attempts,
                        rule_record(rule),
                        score.trace_id,
                        score.span_id,
                        root,
                        score.status,
                        score.score,
                        score.passed,
                        score.label,
                        score.revision,
                        score.runtime_id,
                        score.evaluator_id,
                        json.loads(score.result) if score.result else None,
                        session_id=score.session_id,
                    )  # fmt: skip
                )
            return out

    def finish(
        self, delivery: Delivery, owner: str, state: str, error: str | None, now: datetime, due_at: datetime | None
    ) -> bool:
        """Write a claimed delivery's outcome (``pending`` again with ``due_at`` to retry); False when this
        service no longer holds the claim."""
        d = SinkDeliveryRow
        values: dict[str, Any] = {"state": state, "error": error, "claimed_by": None, "claimed_until": None}
        if state == "delivered":
            values["delivered_at"] = now
        if due_at is not None:
            values["due_at"] = due_at
        with self.engine.begin() as conn:
            done = conn.execute(
                update(d)
                .where(
                    d.source == delivery.source,
                    d.rule_id == delivery.rule_id,
                    d.target_id == delivery.target_id,
                    d.sink == delivery.sink,
                    d.state == "sending",
                    d.claimed_by == owner,
                )
                .values(**values)
            )
            return done.rowcount == 1

    def states(self, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
        """The deliveries of the scores ``(rule_id, target_id)``, by score, each sink in order."""
        if not pairs:
            return {}
        d = SinkDeliveryRow
        out: dict[tuple[str, str], list[dict[str, Any]]] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(pairs), 400):
                part = list(dict.fromkeys(pairs[start : start + 400]))
                query = (
                    select(d.rule_id, d.target_id, d.type, d.state, d.attempts, d.error)
                    .where(d.source == "rule", tuple_(d.rule_id, d.target_id).in_(part))
                    .order_by(d.rule_id, d.target_id, d.sink)
                )
                for row in conn.execute(query):
                    out.setdefault((row.rule_id, row.target_id), []).append(
                        {"type": row.type, "state": row.state, "attempts": row.attempts, "error": row.error}
                    )
        return out
