"""Why a backfill failed (issue 50): its rows scored with a status other than ``ok``, and the most common error
when none was scored ``ok`` — what ``GET /v1/online-rules/{id}/backfills/{backfill_id}`` says of a failed one.

Read-only, portable SQL over ``online_scores``' index ``(backfill_id, state, status)``. Blocking: call from a thread.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.engine import Engine

from evaluator_host.store.online.rows import OnlineScoreRow

__all__ = ["error_of", "failure", "failures"]

S = OnlineScoreRow


def error_of(state: str, status: str | None, result: str | None) -> str:
    """A failed row's error as a reason names it: ``<type>: <message>`` (200 characters at most)."""
    if state == "dropped":
        return f"dropped ({status})"
    error: Any = None
    with contextlib.suppress(ValueError, TypeError):
        error = json.loads(result or "{}").get("error")
    if not isinstance(error, dict):
        return f"status {status}"
    return f"{error.get('type') or status}: {str(error.get('message') or '')[:200]}"


def failures(engine: Engine, backfill_id: str) -> tuple[int, str | None]:
    """Its rows scored with a status other than ``ok`` (error, timeout, ...), and the result JSON of one
    of them (the first scored), or None."""
    # not "status != 'ok'": three ranges of the index (backfill_id, state, status), counted apart, so a poll
    # reads the failures only, not every score of a 100,000-target backfill
    mine = and_(S.backfill_id == backfill_id, S.state == "done")
    ranges = (S.status.is_(None), S.status < "ok", S.status > "ok")
    failed = and_(mine, or_(*ranges))
    with engine.connect() as conn:
        n = sum(int(conn.scalar(select(func.count()).where(mine, r)) or 0) for r in ranges)
        first = conn.scalar(select(S.result).where(failed).order_by(S.scored_at).limit(1)) if n else None
    return n, first


def failure(engine: Engine, backfill_id: str, sample: int = 1000) -> str | None:
    """Why the backfill failed when none of its targets was scored ``ok`` though some ended (scored with
    another status, or dropped by anything but a cancel): the most common error among up to ``sample`` of
    them, with its count; None when one was scored ``ok`` or none ended."""
    with engine.connect() as conn:
        mine = S.backfill_id == backfill_id
        ok = conn.scalar(select(S.rule_id).where(mine, S.state == "done", S.status == "ok").limit(1))
        if ok is not None:
            return None
        ended = or_(S.state == "done", and_(S.state == "dropped", S.status != "cancelled"))
        rows = conn.execute(select(S.state, S.status, S.result).where(mine, ended).limit(sample)).all()
    if not rows:
        return None
    errors: Counter[str] = Counter(error_of(state, status, result) for state, status, result in rows)
    (top, n), seen = errors.most_common(1)[0], len(rows)
    more = "+" if seen == sample else ""
    return f"every one of its {seen}{more} target(s) failed; the most common error ({n} of {seen}{more}): {top}"
