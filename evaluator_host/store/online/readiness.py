"""The statements that make ``open`` traces ``ready`` (built once: building one — the aliases of the fast path's
above all — cost more than running it, every pass), run by
:meth:`~evaluator_host.store.online.spans.OnlineSpanStore.mark_ready`:

* :data:`QUIET`: an ``open`` trace whose root ended and that got no span since ``:quiet``, or none since ``:stale``
  (the timeout), becomes ``ready`` (``ready_at``: ``:now``);
* :data:`COMPLETE` (the fast path): an ``open`` trace with an ended root, no span since ``:settled`` and no orphan
  (a span whose ``parent_span_id`` is not one of the trace's spans) becomes ``ready``.
"""

from __future__ import annotations

from sqlalchemy import DateTime, Table, Update, bindparam, exists, update

from evaluator_host.store.online.rows import OnlineSpanRow, OnlineTraceRow

__all__ = ["COMPLETE", "QUIET"]

SPANS: Table = OnlineSpanRow.__table__  # type: ignore[assignment]
TRACES: Table = OnlineTraceRow.__table__  # type: ignore[assignment]


def _complete() -> Update:
    """The fast path: ``open`` traces with an ended root, no span since ``:settled`` and no orphan (a
    span whose ``parent_span_id`` is not one of the trace's spans) become ``ready``. Each candidate's
    spans are read once, each parent looked up by the spans' primary key."""
    span, parent = SPANS.alias("s"), SPANS.alias("p")
    has_parent = exists().where(
        parent.c.workspace_id == span.c.workspace_id,
        parent.c.trace_id == span.c.trace_id,
        parent.c.span_id == span.c.parent_span_id,
    )
    orphan = exists().where(
        span.c.workspace_id == TRACES.c.workspace_id,
        span.c.trace_id == TRACES.c.trace_id,
        span.c.parent_span_id.is_not(None),
        ~has_parent,
    )
    return (
        update(TRACES)
        .where(TRACES.c.state == "open", TRACES.c.last_span_at < bindparam("settled", type_=_TZ))
        .where(TRACES.c.root_span_id.is_not(None), TRACES.c.root_ended_at.is_not(None), ~orphan)
        .values(state="ready", ready_at=bindparam("now", type_=_TZ))
    )


# assembly's two statements, built once (building one — the aliases above all — cost more than
# running it, every pass): the quiet period's and the timeout's, and the fast path's
_TZ = DateTime(timezone=True)
QUIET = (
    update(TRACES)
    .where(TRACES.c.state == "open")
    .where(
        ((TRACES.c.root_ended_at.is_not(None)) & (TRACES.c.last_span_at < bindparam("quiet", type_=_TZ)))
        | (TRACES.c.last_span_at < bindparam("stale", type_=_TZ))
    )
    .values(state="ready", ready_at=bindparam("now", type_=_TZ))
)
COMPLETE = _complete()
