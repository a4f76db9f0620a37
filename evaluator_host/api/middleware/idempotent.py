"""``Idempotency-Key`` on the creating routes (the rules: :mod:`evaluator_host.store.idempotency`)."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

from fastapi import Request, Response
from pydantic import BaseModel

from evaluator_host.api.errors import host_error_response
from evaluator_host.errors import ConflictError, EvaluatorHostError, IdempotencyKeyError
from evaluator_host.services import Services
from evaluator_host.store.idempotency import IdempotencyStore, request_hash
from evaluator_host.tenancy.models import DEFAULT_WORKSPACE

__all__ = ["idempotent"]

log = logging.getLogger(__name__)

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
    as they were before workspaces). While ``run()`` runs its claim is renewed every quarter of ``claim_s``, so a
    retry through another service waits (409) while this one lives and runs once this one died (SIGKILL, a lost
    host) and its claim went stale; a request whose claim was taken over stores and releases nothing."""
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
    if claim.taken_over:
        log.warning(
            "Idempotency-Key of %s: the first request's claim went stale (its service died?): running it", shown
        )
    held = _Held(claim.token)
    renewing = asyncio.create_task(_renew(store, route, key, held))
    try:
        answer = await run()
    except EvaluatorHostError as exc:
        await _stop(renewing, held)
        if not exc.effect_stored:
            await asyncio.shield(asyncio.to_thread(store.release, route, key, held.token))
            raise
        # The request changed something before it failed (a draft revision was stored): its error answer
        # is the key's answer, so a retry replays it rather than storing a second draft.
        error = host_error_response(exc)
        await asyncio.to_thread(store.store, route, key, exc.status, bytes(error.body).decode(), held.token)
        return error
    except BaseException:
        await _stop(renewing, held)
        await asyncio.shield(asyncio.to_thread(store.release, route, key, held.token))
        raise
    await _stop(renewing, held)
    text = answer.model_dump_json()
    await asyncio.to_thread(store.store, route, key, status_code, text, held.token)
    return Response(text, status_code=status_code, media_type="application/json")


class _Held:
    """The running request's claim token (moved on by each renewal; left as it was when the claim is lost, so the
    request's answer or release matches nothing) and the signal that stops the renewals."""

    def __init__(self, token: datetime | None) -> None:
        self.token = token
        self.stop = asyncio.Event()


async def _renew(store: IdempotencyStore, route: str, key: str, held: _Held) -> None:
    """Renew the claim every quarter of ``claim_s`` until :attr:`_Held.stop` or the claim is lost (taken over)."""
    while held.token is not None:
        try:
            await asyncio.wait_for(held.stop.wait(), store.claim_s / 4)
            return
        except TimeoutError:
            pass
        try:
            token = await asyncio.to_thread(store.renew, route, key, held.token)
        except Exception:  # a database blip: the next renewal tries again (the claim lasts 4 periods)
            log.warning("could not renew an Idempotency-Key's claim", exc_info=True)
            continue
        if token is None:
            log.warning("an Idempotency-Key's claim was taken over by a retry: this request's answer is not kept")
            return
        held.token = token


async def _stop(renewing: asyncio.Task[None], held: _Held) -> None:
    """Stop the renewals and wait for one in flight: the answer or release that follows names the latest token."""
    held.stop.set()
    await asyncio.shield(renewing)
