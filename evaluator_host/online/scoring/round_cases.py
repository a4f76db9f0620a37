"""A scoring round's cases (``online/scoring/scorer.py``): each claimed row's case — its trace (or session) loaded,
mapped to ``inputs``/``outputs`` — or the result that stands for it when there is none to run (a mapping that
finds nothing, a session with no trace left: ``error``; a trace retention deleted: ``TraceExpired``, which the
scorer turns into ``dropped``). Blocking: call from a thread. And what a round stores of each result
(:func:`stored_values`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine

from evaluator_host.evaluation.models import Case, ErrorInfo, EvaluationResult
from evaluator_host.online.levels.cases import Refused, build_case, load_many
from evaluator_host.online.levels.sessions import load_sessions, session_case
from evaluator_host.store.online.rows import LABEL_CHARS
from evaluator_host.store.online.scores import Claimed

__all__ = ["EXPIRED", "cases_of", "error_result", "gave_up", "stored_values"]

EXPIRED = "TraceExpired"  # a claimed row's trace deleted by retention: the row ends dropped (status retention)


def error_result(kind: str, message: str, row: Claimed) -> EvaluationResult:
    """The ``error`` result of a row that could not run (``kind``: the error type)."""
    revision = row.rule.revision if row.rule else None
    return EvaluationResult(
        status="error",
        error=ErrorInfo(type=kind, message=message),
        interface="evaluate",
        runtime={},
        evaluator_id=row.evaluator_id,
        revision=revision,
    )


def gave_up(row: Claimed, message: str) -> EvaluationResult:
    """The ``sandbox_error`` result of a row whose attempts are spent."""
    return error_result("SandboxError", message, row).model_copy(update={"status": "sandbox_error"})


def cases_of(engine: Engine, rows: Sequence[Claimed], max_spans: int) -> dict[tuple[str, str], Case | EvaluationResult]:
    """Each row's case, or the result standing for it, keyed by (rule, target)."""
    out: dict[tuple[str, str], Case | EvaluationResult] = {}
    of_sessions = [r for r in rows if r.session_id is not None]
    of_traces = [r for r in rows if r.session_id is None]
    with engine.connect() as conn:
        loaded = load_many(conn, {(r.workspace_id, r.trace_id) for r in of_traces}, max_spans)
        sessions = load_sessions(conn, {(r.workspace_id, str(r.session_id)) for r in of_sessions}, max_spans)
    for row in rows:
        mapped = row.rule.mapping if row.rule else None
        key = (row.rule_id, row.target_id)
        try:
            if row.session_id is not None:
                found = sessions.get((row.workspace_id, row.session_id))
                if found is None:
                    out[key] = error_result("NotFound", f"session {row.session_id!r} has no stored trace left", row)
                else:
                    out[key] = session_case(row.session_id, found[0], found[1], mapped)
                continue
            trace = loaded.get((row.workspace_id, row.trace_id))
            if trace is None:
                out[key] = error_result(EXPIRED, f"trace {row.trace_id} is gone", row)
                continue
            out[key] = build_case(trace, row.span_id, mapped)
        except Refused as exc:
            out[key] = error_result(exc.kind, str(exc), row)
    return out


def stored_values(result: EvaluationResult, now: datetime, cap: int) -> dict[str, Any]:
    """The ``online_scores`` columns of a result stored at ``now`` (its JSON cut to ``cap`` bytes: output and
    details left out, ``truncated``)."""
    return {
        "status": result.status,
        "score": result.score,
        "passed": result.passed,
        "label": None if result.label is None else result.label[:LABEL_CHARS],
        "revision": result.revision,
        "runtime_id": result.runtime.get("id"),
        "duration_ms": result.duration_ms,
        "scored_at": now,
        "result": result.stored_json(cap),
    }
