"""The hot routes without the framework's per-request machinery: same handlers, same answers.

``POST /v1/evaluate`` and ``POST /v1/evaluators/{id}/evaluate`` are most of the traffic, and
``GET /v1/jobs/{id}`` is what every job's client polls; FastAPI's per-request work (a
``Request``, dependency solving, a thread hop for a sync dependency, generic serialization)
costs several times what the evaluation itself costs on a warm worker, and about a millisecond
of the service's one busy thread per poll. :class:`FastPath` sits in front of the app and
answers those three routes itself, by calling the use cases the routes call
(:func:`~evaluator_host.evaluation.usecases.evaluate_definition`,
:func:`~evaluator_host.evaluation.usecases.evaluate_stored`, ``JobRunner.get``) between the
routes' own two ends (:mod:`evaluator_host.api.calls`), with a body validated by the same
pydantic model, and by serializing with the same response model — never a route function. It
takes a request only when it is sure to answer exactly as the app would, by the app's own rules
(the key: :func:`~evaluator_host.api.middleware.auth.principal_of`; the body limit:
:func:`~evaluator_host.api.middleware.limits.declared_too_large`); everything else goes on to the
app untouched (with the body replayed when it was read):

* another method or path, or a path with a trailing slash, or a job read with a query string
  (``?wait_s=``, the long poll, is the app's), or an evaluate with any query string (the app answers
  an unknown query parameter's 422: :mod:`evaluator_host.api.query`);
* a key the key ring does not know without the database (the app looks it up, or answers 401),
  no key where one is needed (401), or the operator key (403): the request's workspace must be
  known from the cache (:meth:`Workspaces.cached`, which a revocation clears at once);
* (the evaluate routes) no ``Content-Length``, or one over the body limit (the app answers 413),
  or a body that is not ``application/json`` (FastAPI's rule, in :func:`_is_json`: the framework
  keeps it inside its request handler, so this is the package's one copy of it);
* a body that does not validate (the app answers its 422 with every problem listed).

Errors of the evaluation (unknown evaluator, sandbox unavailable, limits) are rendered
by the app's own handlers; anything unexpected propagates to the server-error handler.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import TypeAdapter, ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from evaluator_host.api.calls import answer, cases_of
from evaluator_host.api.errors import host_error_response
from evaluator_host.api.middleware.auth import PRINCIPAL_KEY, bearer, principal_of
from evaluator_host.api.middleware.limits import declared_length, declared_too_large
from evaluator_host.api.middleware.observe import ROUTE_KEY
from evaluator_host.errors import EvaluatorHostError
from evaluator_host.evaluation.models import (
    BatchResponse,
    EvaluateRequest,
    EvaluationResult,
    EvaluatorEvaluateRequest,
)
from evaluator_host.evaluation.usecases import Definition, evaluate_definition, evaluate_stored
from evaluator_host.jobs.models import Job
from evaluator_host.services import Services
from evaluator_host.settings import Settings

__all__ = ["FastPath"]

_BY_ID = re.compile(r"/v1/evaluators/([^/]+)/evaluate")
_INLINE = "/v1/evaluate"
_BY_ID_ROUTE = "/v1/evaluators/{evaluator_id}/evaluate"
_JOB = re.compile(r"/v1/jobs/([^/]+)")
_JOB_ROUTE = "/v1/jobs/{job_id}"
# the answer's own model's serializer: the same bytes as the union's (the response model), without its
# choice between the two (2.5x the serialization of one result)
_RESULT: TypeAdapter[EvaluationResult] = TypeAdapter(EvaluationResult)
_BATCH: TypeAdapter[BatchResponse] = TypeAdapter(BatchResponse)
_JOB_ANSWER: TypeAdapter[Job] = TypeAdapter(Job)
_JSON_HEADERS = (b"content-type", b"application/json")


class FastPath:
    """ASGI wrapper answering the two evaluate routes directly (see the module docstring)."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self.answered = 0  # requests this layer answered itself (the rest went on to the app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            await self._job(scope, receive, send)
            return
        if scope["type"] != "http" or scope["method"] != "POST" or scope.get("query_string"):
            await self.app(scope, receive, send)  # (a query string: the app's, which refuses unknown ones)
            return
        path: str = scope["path"]
        match = _BY_ID.fullmatch(path) if path != _INLINE else None
        services: Services | None = scope["app"].state.services if "app" in scope else None
        workspace = self._eligible(scope, services) if match is not None or path == _INLINE else None
        if workspace is None or services is None:
            await self.app(scope, receive, send)
            return
        scope[ROUTE_KEY] = _INLINE if match is None else _BY_ID_ROUTE
        body, more = await _read_body(receive)
        if more is None:  # the client went away, or sent more than it declared: the app decides
            await self.app(scope, _replay(body, receive), send)
            return
        try:
            if match is None:
                inline = EvaluateRequest.model_validate_json(body)
            else:
                by_id = EvaluatorEvaluateRequest.model_validate_json(body)
        except ValidationError:
            await self.app(scope, _replay(body, receive), send)
            return
        try:
            if match is None:
                cases, batch = cases_of(inline)
                evaluated = await evaluate_definition(services, workspace, Definition.of(inline), cases)
            else:
                cases, batch = cases_of(by_id)
                evaluated = await evaluate_stored(services, workspace, match.group(1), by_id.revision, cases)
            result = answer(evaluated, batch, services.backend.name)
        except EvaluatorHostError as exc:
            await host_error_response(exc)(scope, receive, send)
            return
        payload = _RESULT.dump_json(result) if isinstance(result, EvaluationResult) else _BATCH.dump_json(result)
        await self._answer(send, payload)

    async def _job(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``GET /v1/jobs/{id}``, or the request on to the app."""
        match = _JOB.fullmatch(scope["path"]) if not scope.get("query_string") else None  # ?wait_s: the app's
        services: Services | None = scope["app"].state.services if "app" in scope else None
        workspace = self._workspace(scope, services, _header(scope, b"authorization")) if match else None
        if match is None or workspace is None or services is None:
            await self.app(scope, receive, send)
            return
        scope[ROUTE_KEY] = _JOB_ROUTE
        try:
            job = await services.runner.get(workspace, match.group(1))  # what the route's read answers
        except EvaluatorHostError as exc:
            await host_error_response(exc)(scope, receive, send)
            return
        await self._answer(send, _JOB_ANSWER.dump_json(job))

    async def _answer(self, send: Send, payload: bytes) -> None:
        self.answered += 1
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [_JSON_HEADERS, (b"content-length", str(len(payload)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": payload})

    def _eligible(self, scope: Scope, services: Services | None) -> str | None:
        """The request's workspace when the headers let it through exactly as the app would (see the
        module docstring); None to leave it to the app."""
        if services is None:
            return None
        json_body = False
        authorization: bytes | None = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                json_body = _is_json(value)
            elif name == b"authorization":
                authorization = value
        if not json_body or declared_length(scope["headers"]) is None or declared_too_large(self.settings, scope):
            return None
        return self._workspace(scope, services, authorization)

    def _workspace(self, scope: Scope, services: Services | None, authorization: bytes | None) -> str | None:
        """The workspace of the request's key when it is known without the database; None to leave the
        request to the app (no key where one is needed, an unknown key, the operator key)."""
        if services is None:
            return None
        ring = services.workspaces
        who = scope.get(PRINCIPAL_KEY)  # what ApiKeyGate found (it runs first whenever a key is needed)
        if who is None:
            token = bearer(authorization.decode("latin-1")) if authorization is not None else None
            who = ring.cached(token) if token is not None else None
        who = principal_of(who, ring.auth_required)  # not known without the database: the app looks it up
        return who.workspace_id if who is not None else None  # None for the operator key: the app answers its 403


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


def _is_json(content_type: bytes) -> bool:
    """FastAPI's rule: ``application/json`` or ``application/*+json`` (parameters allowed)."""
    main = content_type.partition(b";")[0].strip().lower()
    return main == b"application/json" or (main.startswith(b"application/") and main.endswith(b"+json"))


async def _read_body(receive: Receive) -> tuple[bytes, bool | None]:
    """The whole body; ``None`` as the second item when it did not end normally."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), True


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that first hands out ``body`` (already read), then defers to ``receive``."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            message: dict[str, Any] = {"type": "http.request", "body": body, "more_body": False}
            return message
        return await receive()

    return replay
