"""Every request observed: a request id (``X-Request-Id``), its duration in the metrics, one log line,
and, when tracing is on, its server span (:mod:`evaluator_host.observability.tracing`; the log line then has
its ``trace_id``).

The outermost layer of the app, so it sees every answer — the fast path's, the app's, the
body limit's 413 — with its status. The request id is the client's ``X-Request-Id`` when it
is a short token (letters, digits, ``.-_``, at most 64), else a fresh one; it is returned as
``X-Request-Id`` and is the ``request_id`` of the request's log line. The route label is the
route's template (``/v1/evaluators/{evaluator_id}``), ``other`` when no route matched, so a
client cannot grow the metrics by inventing paths. An answer that had to wait for a runtime build
says so in ``X-Runtime-Build`` (``built; runtime=<id>; duration=10.8s``).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from evaluator_host.builds.build_once import BUILD_NOTES
from evaluator_host.observability import tracing

__all__ = ["ROUTE_KEY", "Observe"]

ROUTE_KEY = "evaluator_host.route"  # a layer that answers by itself puts its route's template here
_TOKEN = re.compile(rb"[A-Za-z0-9._-]{1,64}")
access = logging.getLogger("evaluator_host.access")


def _documented(routes: Iterable[Any], context: Any = None) -> Iterator[str]:
    """The templates of the documented routes among ``routes`` (included with ``context``, FastAPI's inclusion:
    prefixes, ``include_in_schema``), in the routers' order. Read from each route's path and its inclusions,
    as FastAPI derives them, without having FastAPI build each inclusion's route state (its dependants and
    response fields: ~0.1 s of CPU for this app, paid by the first request that needed the labels)."""
    from fastapi.routing import APIRoute, _IncludedRouter
    from starlette.routing import compile_path

    for route in routes:
        if isinstance(route, _IncludedRouter):
            inner = route.include_context if context is None else context.combine(route.include_context)
            yield from _documented(route.original_router.routes, inner)
        elif isinstance(route, APIRoute) and route.include_in_schema:
            if context is None:
                yield route.path_format
            elif context.include_in_schema:
                yield compile_path(context.path_for(route))[1]


def _templates(app: Any) -> list[tuple[re.Pattern[str], str]]:
    """The app's route templates as patterns: the paths of its OpenAPI document (prefixes included, in the
    document's order), read from its routes (:func:`_documented`), so that no one has to build the document
    (a start-up's costliest step) for them; ``tests/api/test_route_templates.py`` holds the two equal."""
    found = []
    for template in dict.fromkeys(_documented(getattr(app, "routes", []))):
        pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
        found.append((re.compile(pattern), template))
    return found


def _route(scope: Scope, templates: list[tuple[re.Pattern[str], str]]) -> str:
    template = scope.get(ROUTE_KEY)
    if isinstance(template, str):
        return template
    if "endpoint" in scope:  # a route matched: which template
        path = scope["path"]
        for pattern, template in templates:
            if pattern.fullmatch(path):
                return template
    return "other"


class Observe:
    """ASGI layer: request ids, the request-duration histogram, the access log line."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._templates: list[tuple[re.Pattern[str], str]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = b""
        for name, value in scope["headers"]:
            if name == b"x-request-id" and _TOKEN.fullmatch(value):
                request_id = value
                break
        request_id = request_id or os.urandom(8).hex().encode()
        status = 500
        builds: list[str] = []  # builds this request ran or waited for (X-Runtime-Build)
        notes = BUILD_NOTES.set(builds)
        traced = tracing.request(scope, request_id)  # the server span (None: tracing is off)

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                extra = [(b"x-request-id", request_id)]
                if builds:
                    extra.append((b"x-runtime-build", ", ".join(builds).encode()))
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            BUILD_NOTES.reset(notes)
            seconds = time.perf_counter() - started
            if self._templates is None and "app" in scope:
                self._templates = _templates(scope["app"])
            route = _route(scope, self._templates or [])
            if traced is not None:
                traced.end(route, status, sys.exc_info()[1])
            services = getattr(getattr(scope.get("app"), "state", None), "services", None)
            if services is not None:
                services.pool.metrics.request(scope["method"], route, status, seconds)
            if access.isEnabledFor(logging.INFO):
                line = {
                    "request_id": request_id.decode(),
                    "method": scope["method"],
                    "route": route,
                    "path": scope["path"],
                    "status": status,
                    "duration_ms": round(seconds * 1000, 3),
                }
                if traced is not None:
                    line["trace_id"] = traced.trace_id
                access.info("request", extra=line)
