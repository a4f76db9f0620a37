"""What one delivery of a score (or a job's row result) to one sink is: :class:`Delivery`, and its idempotency
key :func:`delivery_key` (``store/sinks/deliveries.py`` and ``store/jobs/sink_deliveries.py`` make them)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from evaluator_host.store.online.rules import RuleRecord

__all__ = ["Delivery", "delivery_key"]


def delivery_key(rule_id: str, target_id: str, revision: int | None) -> str:
    """The idempotency key of a score's deliveries: the same (rule, target, revision), the same key."""
    digest = hashlib.sha256(f"{rule_id}\x00{target_id}\x00{revision}".encode()).hexdigest()
    return f"evh-{digest[:40]}"


@dataclass(frozen=True)
class Delivery:
    """A claimed delivery with what sending it needs."""

    rule_id: str
    target_id: str
    sink: int
    workspace_id: str
    key: str
    attempts: int
    rule: RuleRecord
    trace_id: str
    span_id: str | None
    root_span_id: str | None
    status: str | None
    score: float | None
    passed: bool | None
    label: str | None
    revision: int | None
    runtime_id: str | None
    evaluator_id: str
    result: dict[str, Any] | None
    source: str = "rule"  # "job": a job's row result (``rule`` stands for the job, ``target_id`` the row index)
    session_id: str | None = None  # a session-level score's session, or a job row's

    @property
    def spec(self) -> dict[str, Any]:
        """This delivery's sink as stored on the rule (an empty dict when the rule no longer has it)."""
        sinks = self.rule.sinks or []
        return dict(sinks[self.sink]) if self.sink < len(sinks) else {}
