"""What a rule's budgets are measured against (issue 51): its scores stored in the last minute and the
evaluator time of those stored in the last hour, read from ``online_scores`` (the (rule_id, scored_at)
index), its calls to its judges in the last minute (``online_model_calls``: ``store/online/calls.py``),
and its rows running now — every service on the database counts, so the budget is the rule's,
not one process's. Blocking: call from a thread. Portable SQL."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from evaluator_host.store.db import as_utc
from evaluator_host.store.online.rows import OnlineModelCallsRow, OnlineScoreRow

__all__ = ["MINUTE", "HOUR", "Use", "usage"]

S = OnlineScoreRow
C = OnlineModelCallsRow
MINUTE, HOUR = timedelta(seconds=60), timedelta(seconds=3600)


@dataclass
class Use:
    """A rule's use of its budgets at ``now``."""

    scored_times: list[datetime] = field(default_factory=list)  # scored_at of the last minute's scores, oldest first
    running: int = 0  # its rows running now (every service)
    hour: list[tuple[datetime, float]] = field(default_factory=list)  # (scored_at, seconds) of the last hour's
    # (at, rows, calls) of the rule's scoring rounds of the last minute that called its judges, oldest first
    calls: list[tuple[datetime, int, int]] = field(default_factory=list)

    @property
    def scores_last_minute(self) -> int:
        return len(self.scored_times)

    @property
    def sandbox_seconds_last_hour(self) -> float:
        return sum(s for _, s in self.hour)

    @property
    def model_calls_last_minute(self) -> int:
        return sum(c for _, _, c in self.calls)


def usage(
    engine: Engine, rule_id: str, now: datetime, *, hour: bool, calls: bool = True, minute: timedelta = MINUTE
) -> Use:
    """The rule's use (the last hour's durations only when ``hour``: a ``sandbox_seconds_per_hour`` budget;
    its judges' calls of the last minute when ``calls``); "the last minute" is the last ``minute`` (the
    ``online_budget_minute_s`` setting)."""
    done = (S.rule_id == rule_id, S.state == "done")
    with engine.connect() as conn:
        # the rows running first, then the scores: each statement sees what was committed when it ran, so a
        # round stored between the two is counted twice (running, then stored), never missed by both
        running = int(conn.scalar(select(func.count()).where(S.rule_id == rule_id, S.state == "running")) or 0)
        times = conn.execute(select(S.scored_at).where(*done, S.scored_at >= now - minute).order_by(S.scored_at))
        use = Use(scored_times=[as_utc(t) for (t,) in times if t is not None], running=running)
        if hour:
            rows = conn.execute(
                select(S.scored_at, S.duration_ms).where(*done, S.scored_at >= now - HOUR).order_by(S.scored_at)
            )
            use.hour = [(as_utc(t), (ms or 0.0) / 1000.0) for t, ms in rows if t is not None]
        if calls:
            made = conn.execute(
                select(C.at, C.rows, C.calls).where(C.rule_id == rule_id, C.at >= now - minute).order_by(C.at)
            )
            use.calls = [(as_utc(t), int(r), int(c)) for t, r, c in made]
    return use
