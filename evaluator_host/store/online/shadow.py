"""A rule's shadow scores (``online_shadow_scores``, issue 53): its candidate revision's scores, each beside the
live answer of the same target at the same moment.

Contract:

* :func:`record` — stores candidate scores (one per (rule, target, candidate revision); a second for the same
  key is ignored, so a record is exactly once whatever retries).
* :func:`compare` — the figures of a rule's candidate revision over every stored pair, computed in the
  database: ``compared`` (pairs), ``flips`` (``pass_to_fail``: live passed, the candidate failed;
  ``fail_to_pass``: the reverse; a side with no ``passed`` — an error, a score without a threshold — is no
  flip), ``same_passed``, ``mean_delta`` (mean of candidate score − live score over the pairs where both
  gave a score: ``scored``), the errors of each side (status not ``ok``), and up to ``examples`` pairs —
  flips first, then the largest |delta|, then the newest.
* :func:`latest_revision` — the candidate revision with the newest shadow score of a rule (None: none).
* :func:`answers` — the candidate's answers of some of a rule's targets (agreement with reviews).

No read of ``online_scores`` — the rule's scores, stats, decisions, review queues, exports, sinks — touches
this table. Portable SQL; blocking: call from a thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, case, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from evaluator_host.store.online.rows import OnlineShadowScoreRow

__all__ = ["Answer", "Figures", "answers", "compare", "latest_revision", "record"]

X = OnlineShadowScoreRow


@dataclass(frozen=True)
class Answer:
    """One side's answer of a target."""

    revision: int | None
    status: str | None
    score: float | None
    passed: bool | None
    label: str | None


@dataclass
class Figures:
    """What :func:`compare` computes (see the module docstring); ``examples`` are dicts (the API's shape)."""

    compared: int = 0
    pass_to_fail: int = 0
    fail_to_pass: int = 0
    same_passed: int = 0
    scored: int = 0
    mean_delta: float | None = None
    live_errors: int = 0
    candidate_errors: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)


def record(engine: Engine, rows: Sequence[dict[str, Any]]) -> int:
    """Insert candidate scores (``online_shadow_scores`` columns); one already stored for the key is kept.
    How many were new."""
    if not rows:
        return 0
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
    new = 0
    with engine.begin() as conn:
        for i in range(0, len(rows), 200):  # one multi-row statement a slice; the rows it stored come back
            statement = dialect.insert(X).values(list(rows[i : i + 200])).on_conflict_do_nothing()
            new += len(conn.execute(statement.returning(X.rule_id)).all())
    return new


def _flip() -> Any:
    return case(
        (and_(X.live_passed.is_(True), X.passed.is_(False)), "pass_to_fail"),
        (and_(X.live_passed.is_(False), X.passed.is_(True)), "fail_to_pass"),
        else_=None,
    )


def compare(engine: Engine, rule_id: str, revision: int, examples: int) -> Figures:
    """The figures of ``revision`` as ``rule_id``'s candidate (see the module docstring)."""
    mine = and_(X.rule_id == rule_id, X.revision == revision)
    delta = X.score - X.live_score
    both = and_(X.score.is_not(None), X.live_score.is_not(None))
    known = and_(X.passed.is_not(None), X.live_passed.is_not(None))
    figures = select(
        func.count(),
        func.sum(case((and_(X.live_passed.is_(True), X.passed.is_(False)), 1), else_=0)),
        func.sum(case((and_(X.live_passed.is_(False), X.passed.is_(True)), 1), else_=0)),
        func.sum(case((and_(known, X.passed == X.live_passed), 1), else_=0)),
        func.sum(case((both, 1), else_=0)),
        func.avg(case((both, delta), else_=None)),
        func.sum(case((func.coalesce(X.live_status, "") != "ok", 1), else_=0)),
        func.sum(case((X.status != "ok", 1), else_=0)),
    ).where(mine)
    flip = _flip()
    listed = (
        select(X, flip.label("flip"))
        .where(mine)
        .order_by(
            case((flip.is_(None), 1), else_=0),
            case((both, 0), else_=1),
            func.abs(case((both, delta), else_=0)).desc(),
            X.scored_at.desc(),
            X.target_id,
        )
        .limit(examples)
    )
    with engine.connect() as conn:
        n, p2f, f2p, same, scored, mean, live_err, cand_err = conn.execute(figures).one()
        out = Figures(
            compared=int(n or 0),
            pass_to_fail=int(p2f or 0),
            fail_to_pass=int(f2p or 0),
            same_passed=int(same or 0),
            scored=int(scored or 0),
            mean_delta=None if mean is None else float(mean),
            live_errors=int(live_err or 0),
            candidate_errors=int(cand_err or 0),
        )
        if examples > 0:
            out.examples = [_example(row) for row in conn.execute(listed).mappings()]
    return out


def _example(row: Any) -> dict[str, Any]:
    score, live = row["score"], row["live_score"]
    return {
        "target_id": row["target_id"],
        "trace_id": row["trace_id"],
        "span_id": row["span_id"],
        "session_id": row["session_id"],
        "flip": row["flip"],
        "delta": None if score is None or live is None else float(score) - float(live),
        "live": _side(row, "live_"),
        "candidate": _side(row, ""),
        "scored_at": row["scored_at"],
    }


def _side(row: Any, prefix: str) -> dict[str, Any]:
    return {
        "revision": row[f"{prefix}revision"],
        "status": row[f"{prefix}status"],
        "score": row[f"{prefix}score"],
        "passed": row[f"{prefix}passed"],
        "label": row[f"{prefix}label"],
    }


def latest_revision(engine: Engine, rule_id: str) -> int | None:
    """The candidate revision whose shadow score of ``rule_id`` is the newest (None: it has none)."""
    query = select(X.revision).where(X.rule_id == rule_id).order_by(X.scored_at.desc(), X.revision.desc()).limit(1)
    with engine.connect() as conn:
        found = conn.scalar(query)
    return None if found is None else int(found)


def answers(engine: Engine, rule_id: str, revision: int, targets: Sequence[str]) -> dict[str, Answer]:
    """``revision``'s shadow answers of ``targets`` of ``rule_id`` (target id -> answer; absent: none)."""
    out: dict[str, Answer] = {}
    wanted = list(dict.fromkeys(targets))
    with engine.connect() as conn:
        for i in range(0, len(wanted), 500):
            query = select(X.target_id, X.revision, X.status, X.score, X.passed, X.label).where(
                X.rule_id == rule_id, X.revision == revision, X.target_id.in_(wanted[i : i + 500])
            )
            for target, rev, status, score, passed, label in conn.execute(query):
                out[str(target)] = Answer(rev, status, score, passed, label)
    return out
