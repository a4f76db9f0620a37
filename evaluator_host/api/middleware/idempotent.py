"""``Idempotency-Key`` on the creating routes (the rules: :mod:`evaluator_host.store.idempotency`)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import TypeVar

from fastapi import Request, Response
from pydantic import BaseModel

from evaluator_host.api.errors import host_error_response
from evaluator_host.errors import ConflictError, EvaluatorHostError, IdempotencyKeyError
from evaluator_host.services import Services
from evaluator_host.store.idempotency import request_hash
from evaluator_host.tenancy.models import DEFAULT_WORKSPACE

__all__ = ["idempotent"]

T = TypeVar("T", bound=BaseModel)
_KEY = re.compile(r"[\x21-\x7e]{1,255}")  # printable ASCII, no spaces


async def idempotent(
    request: Request,
    services: Services,
    workspace: str,
    route: str,
    body: BaseModel,
    run: Callable[[], Awaitable[T]],
    status_code: int,
) -> T | Response:
    """``run()`` once per ``Idempotency-Key`` of ``workspace`` (when the request has one): its answer,
    or the first answer again for a retry of the same request. An error answer is stored too when the error
    says the request had already stored something (``effect_stored``, e.g. ``FixturesFailed``'s draft);
    any other error releases the key, so a retry runs the request again. Keys are per workspace: another
    workspace's identical key is another request (the default workspace's keys are stored unprefixed,
    as they were before workspaces)."""
    key = request.headers.get("idempotency-key")
    if key is None:
        return await run()
    if not _KEY.fullmatch(key):
        raise IdempotencyKeyError("Idempotency-Key must be 1 to 255 printable ASCII characters without spaces")
    store = services.idempotency
    shown = route
    if workspace != DEFAULT_WORKSPACE:
        route = f"{workspace} {route}"
    claim = await asyncio.to_thread(store.claim, route, key, request_hash(body.model_dump_json().encode()))
    if claim.other_body:
        raise IdempotencyKeyError(
            f"this Idempotency-Key was used for another request to {shown}; a key names one request (use a new key)"
        )
    if claim.running:
        raise ConflictError("the first request with this Idempotency-Key is still running; retry in a moment")
    if not claim.fresh:
        headers = {"Idempotent-Replayed": "true"}
        return Response(claim.answer, status_code=claim.status, media_type="application/json", headers=headers)
    try:
        answer = await run()
    except EvaluatorHostError as exc:
        if not exc.effect_stored:
            await asyncio.shield(asyncio.to_thread(store.release, route, key))
            raise
        # The request changed something before it failed (a draft revision was stored): its error answer
        # is the key's answer, so a retry replays it rather than storing a second draft.
        error = host_error_response(exc)
        await asyncio.to_thread(store.store, route, key, exc.status, bytes(error.body).decode())
        return error
    except BaseException:
        await asyncio.shield(asyncio.to_thread(store.release, route, key))
        raise
    text = answer.model_dump_json()
    await asyncio.to_thread(store.store, route, key, status_code, text)
    return Response(text, status_code=status_code, media_type="application/json")
