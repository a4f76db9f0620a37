"""The command line's way to a running service (``--server``): the Python client (``evaluator_host.client``).

Contract: :func:`service_client` is a :class:`~evaluator_host.client.Client` of ``server`` (None:
``http://HOST:PORT`` of the settings) with ``key`` as its Bearer token (None: none; the environment's
``EVALUATOR_HOST_API_KEY`` is not read here: each command says which key it uses). Inside
:func:`usage_errors`, a client error becomes a :class:`~evaluator_host.cli.inputs.UsageError` (exit
status 2): a service it cannot reach names the URL; an error answer reads ``METHOD PATH answered
STATUS: TYPE: MESSAGE`` (a 401 also says where the command reads its key, when it says). :func:`dumped`
is a model as the JSON the service sent (what ``--json`` prints).
:func:`call_service` is one request of any route as plain JSON, with those errors (for a command whose
route the client has no method for).
Used by ``admin.py``, ``rules.py`` and ``targets.py``'s ``Remote``. The client (and httpx) is imported when a
command first reaches for it, not when the parser is built (``cli/main.py``'s start-up contract).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from evaluator_host.cli.inputs import UsageError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from evaluator_host.client import ApiError, Client

__all__ = ["call_service", "described", "dumped", "server_url", "service_client", "usage_errors"]


def server_url(server: str | None) -> str:
    """``server``, or ``http://HOST:PORT`` of the settings."""
    if server is None:
        from evaluator_host.settings import Settings

        settings = Settings()
        return f"http://{settings.host}:{settings.port}"
    return server


def service_client(server: str | None, key: str | None) -> Client:
    """A client of the service at ``server`` (see the module's contract); close it after use."""
    from evaluator_host.client import Client

    return Client(server_url(server), key or "", timeout_s=30)


def described(exc: ApiError) -> str:
    """An error answer as one line: ``METHOD PATH answered STATUS: TYPE: MESSAGE``."""
    import httpx

    message = exc.message if exc.type.startswith("HTTP ") else f"{exc.type}: {exc.message}"
    return f"{exc.method} {httpx.URL(exc.url).path} answered {exc.status}: {message}"


@contextmanager
def usage_errors(key_hint: str | None = None) -> Iterator[None]:
    """Client errors raised inside, as :class:`UsageError` (see the module's contract); a 401 answer also
    names ``key_hint``, where the command reads its key (``--api-key or EVALUATOR_HOST_API_KEY``), when given."""
    from evaluator_host.client import ApiError, ServiceUnreachable

    try:
        yield
    except ServiceUnreachable as exc:
        raise UsageError(str(exc)) from exc
    except ApiError as exc:
        said = described(exc)
        if exc.status == 401 and key_hint:
            said += f" (the key: {key_hint})"
        raise UsageError(said) from exc


def dumped(value: BaseModel) -> dict[str, Any]:
    """A model as the service's JSON."""
    return value.model_dump(mode="json")


def call_service(server: str | None, key: str | None, method: str, path: str, body: Any = None, **params: Any) -> Any:
    """The service's JSON answer to ``method path`` (see the module's contract)."""
    with service_client(server, key) as client, usage_errors():
        return client.request(method, path, body, **params)
