"""Every request the clients make, written once: a :class:`Call` (method, path, body, query, the model
of the answer), and :class:`op`, which turns a function building a call into a method of both clients.

Contract: a builder function here does no I/O; it names the route and the answer's pydantic model
(the service's own, from the domain packages' ``models.py``). ``op(builder)`` on a class is a method
that sends the call with the client's ``_send``: on a :class:`Blocking` client (``Client``) it answers
the model, on an :class:`Awaiting` one (``AsyncClient``) a coroutine of it (mypy sees both). Request
bodies are plain JSON built from the arguments (pydantic models given as arguments are dumped), never
validated here: the service's 422 is the one rule, and comes back as
:class:`~evaluator_host.client.errors.UnprocessableError`. ``None`` arguments are left out of a body.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, ParamSpec, TypeVar, overload

import httpx
from pydantic import BaseModel

__all__ = ["Awaiting", "Blocking", "Call", "Upload", "body_of", "op"]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
P = ParamSpec("P")


@dataclass(frozen=True)
class Upload:
    """A file sent as the multipart field ``file``: a path (streamed from disk) or bytes already in memory."""

    filename: str
    source: Path | bytes
    content_type: str = "application/octet-stream"


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how its answer becomes a value."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json: Any = None
    params: Mapping[str, Any] = field(default_factory=dict)
    upload: Upload | None = None
    timeout_s: float | None = None  # None: the client's

    def query(self) -> dict[str, Any] | None:
        """The query parameters that are set (datetimes as ISO 8601)."""
        out = {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in self.params.items() if v is not None}
        return out or None


def model(cls: type[M]) -> Callable[[httpx.Response], M]:
    """An answer parsed as ``cls``."""
    return lambda response: cls.model_validate_json(response.content)


def nothing(_response: httpx.Response) -> None:
    """An answer without a body (204)."""


def as_json(response: httpx.Response) -> Any:
    """An answer read as plain JSON (the routes without a model: ``/healthz``)."""
    return response.json() if response.content else None


def dumped(value: Any) -> Any:
    """``value`` as JSON data: pydantic models dumped (unset and None fields left out), containers walked."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, Mapping):
        return {str(k): dumped(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [dumped(v) for v in value]
    return value


def body_of(**fields: Any) -> dict[str, Any]:
    """A JSON body from keyword arguments, None left out."""
    return {k: dumped(v) for k, v in fields.items() if v is not None}


def rows_bytes(rows: Sequence[Mapping[str, Any]]) -> bytes:
    """Rows as a JSONL file's bytes (what ``POST /v1/datasets`` parses row by row)."""
    return b"".join(json.dumps(dumped(row), separators=(",", ":"), allow_nan=False).encode() + b"\n" for row in rows)


class Blocking:
    """The base of a client whose ``_send`` answers the value (``Client``): an ``op`` on it returns ``T``."""


class Awaiting:
    """The base of a client whose ``_send`` is a coroutine (``AsyncClient``): an ``op`` on it returns one."""


class op(Generic[P, T]):  # noqa: N801 - used as a decorator-like descriptor: ``evaluate = op(calls.evaluate)``
    """A builder of :class:`Call` made a method of both clients (see the module's contract)."""

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self.build = build
        self.__doc__ = build.__doc__
        self.__name__ = build.__name__

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> op[P, T]: ...
    @overload
    def __get__(self, obj: Blocking, owner: type[Any]) -> Callable[P, T]: ...
    @overload
    def __get__(self, obj: Awaiting, owner: type[Any]) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, obj: Any, owner: type[Any]) -> Any:
        if obj is None:
            return self
        build, send = self.build, obj._send

        @functools.wraps(build)
        def bound(*args: P.args, **kwargs: P.kwargs) -> Any:
            return send(build(*args, **kwargs))

        return bound
