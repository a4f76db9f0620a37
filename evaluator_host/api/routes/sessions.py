"""``/v1/sessions``: the workspace's sessions (traces grouped by a session id, issue 50) and one session
with the dict a session-level rule's evaluator gets and its scores.

A session of another workspace answers 404, the same as an unknown one. The list is paged like every
list (``api/paging.py``), first seen newest first; without ``limit`` it answers 50 at most, as the
trace feed does.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query

from evaluator_host.api.deps import ServicesDep, WorkspaceDep
from evaluator_host.api.paging import MAX_LIMIT, window
from evaluator_host.errors import NotFoundError
from evaluator_host.online.levels.sessions import build_session, ends, load_sessions
from evaluator_host.online.models import Score, SessionDetail, SessionList, SessionSummary
from evaluator_host.store.online import sessions as online_sessions

__all__ = ["router"]

router = APIRouter(tags=["online"])

Limit = Annotated[int | None, Query(ge=1, le=MAX_LIMIT, description="At most this many (default 50).")]
Cursor = Annotated[str | None, Query(description="next_cursor of the previous page.")]


@router.get("/sessions", response_model=SessionList)
async def list_sessions(
    services: ServicesDep, workspace: WorkspaceDep, limit: Limit = None, cursor: Cursor = None
) -> SessionList:
    """The workspace's sessions, first seen newest first (``limit``, ``cursor``)."""
    asked = window(limit or 50, cursor)
    engine = services.store.engine
    found = await asyncio.to_thread(
        online_sessions.heads, engine, workspace, limit=asked.fetch, before=asked.created_before()
    )
    page, after = asked.answer(found, lambda s: (s.first_seen_at.isoformat(), s.session_id))
    return SessionList(data=[SessionSummary(**s.__dict__) for s in page], count=len(page), next_cursor=after)


@router.get("/sessions/{session_id:path}", response_model=SessionDetail)
async def get_session(session_id: str, services: ServicesDep, workspace: WorkspaceDep) -> SessionDetail:
    """One session: its traces (the latest 200), its conversation, its inputs/outputs as a session-level
    rule's evaluator gets them, and every rule's scores of it (each generation; ``current`` false when
    superseded)."""
    engine = services.store.engine
    max_spans = services.settings.online_max_trace_spans

    def read() -> Any:
        with engine.connect() as conn:
            head = online_sessions.head(conn, workspace, session_id)
            if head is None:
                return None, None
            return head, load_sessions(conn, {(workspace, session_id)}, max_spans).get((workspace, session_id))

    head, found = await asyncio.to_thread(read)
    if head is None:
        raise NotFoundError(f"session {session_id[:200]!r} does not exist")
    traces, total = found if found is not None else ([], head.num_traces)
    session = build_session(session_id, traces, total)
    inputs, outputs = ends(traces, None) if traces else (None, None)
    scores = await asyncio.to_thread(services.online.views.of_session, workspace, session_id)
    return SessionDetail(
        **session,
        inputs=inputs,
        outputs=outputs,
        first_seen_at=head.first_seen_at,
        last_span_at=head.last_span_at,
        scores=[Score(**s) for s in scores],
    )
