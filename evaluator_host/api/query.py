"""Unknown query parameters: the same 422 as unknown body fields (issue 48; docs/api.md, "Unknown fields").

A misspelled or unsupported query parameter (``GET /v1/runtimes?language=node``, ``?limt=5``) was ignored
silently, and the request answered as if it had not been sent. :func:`known_query_parameters` is a
dependency of every route the app serves (set once, in :func:`evaluator_host.api.app.create_app`, on the
app itself; the web page and its assets only are marked :func:`any_query`): it compares the request's
query parameter names with those the route declares (its own and its dependencies', by alias) and
answers 422 ``ValidationError`` naming each unknown one, the accepted names and the closest (difflib,
then case and separators), as :func:`evaluator_host.api.fields.unknown_field` does for a body:
``query.language: unknown query parameter; Accepted here: limit, cursor``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError

__all__ = ["accepted_query_parameters", "any_query", "known_query_parameters"]

_ANY_QUERY = "_evaluator_host_any_query"
E = TypeVar("E", bound=Callable[..., Any])


def any_query(endpoint: E) -> E:
    """Mark a route's endpoint as taking any query string: the web page and its assets only (a browser's
    link may carry ``?utm_source=…`` or a cache-buster; the page reads none)."""
    setattr(endpoint, _ANY_QUERY, True)
    return endpoint


def accepted_query_parameters(route: object) -> list[str]:
    """The query parameter names ``route`` (a FastAPI route) reads, in declaration order (aliases where set);
    empty for a route without a dependant (a mount, a plain Starlette route)."""
    dependant = getattr(route, "dependant", None)
    names: list[str] = []
    todo: list[Dependant] = [dependant] if isinstance(dependant, Dependant) else []
    while todo:
        current = todo.pop(0)
        for param in current.query_params:
            name = param.alias or param.name
            if name not in names:
                names.append(name)
        todo.extend(current.dependencies)
    return names


def _closest(name: str, accepted: list[str]) -> str | None:
    close = difflib.get_close_matches(name, accepted, n=1, cutoff=0.6)
    if close:
        return close[0]
    folded = {a.lower().replace("_", ""): a for a in accepted}
    return folded.get(name.lower().replace("_", "").replace("-", ""))


async def known_query_parameters(request: Request) -> None:
    """Raise 422 (``RequestValidationError``, rendered by :mod:`evaluator_host.api.errors`) when the request
    names a query parameter its route does not read; nothing otherwise."""
    route = request.scope.get("route")
    if route is None or not request.query_params or getattr(getattr(route, "endpoint", None), _ANY_QUERY, False):
        return
    accepted = accepted_query_parameters(route)
    problems: list[dict[str, Any]] = []
    for name in dict.fromkeys(request.query_params.keys()):
        if name in accepted:
            continue
        guess = _closest(name, accepted)
        sentence = "unknown query parameter" + (f"; did you mean '{guess}'?" if guess else ";")
        where = f"Accepted here: {', '.join(accepted)}" if accepted else "this route takes no query parameters"
        problems.append(
            {
                "type": "extra_forbidden",
                "loc": ("query", name),
                "msg": f"{sentence} {where}",
                "input": request.query_params.get(name),
                "field": name,
                "accepted": accepted,
                "did_you_mean": guess,
            }
        )
    if problems:
        raise RequestValidationError(problems)
