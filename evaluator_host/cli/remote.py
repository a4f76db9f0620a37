"""One HTTP call of a command-line command to a running service (``cli/admin.py``, ``cli/rules.py``).

Contract: :func:`call_service` sends ``method path`` to ``server`` (None: ``http://HOST:PORT`` of
the settings) with ``key`` as a Bearer token (None: none), a JSON ``body`` and the query ``params``
that are not None; it answers the decoded JSON (None for an empty body). A service it cannot reach,
or a 4xx/5xx answer, is a :class:`~evaluator_host.cli.inputs.UsageError` naming the URL or the
API's error type and message.
"""

from __future__ import annotations

from typing import Any

import httpx

from evaluator_host.cli.inputs import UsageError
from evaluator_host.settings import Settings

__all__ = ["call_service"]


def call_service(server: str | None, key: str | None, method: str, path: str, body: Any = None, **params: Any) -> Any:
    """The service's JSON answer to one request (see the module's contract)."""
    if server is None:
        settings = Settings()
        server = f"http://{settings.host}:{settings.port}"
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    query = {k: v for k, v in params.items() if v is not None}
    try:
        response = httpx.request(
            method, server.rstrip("/") + path, json=body, params=query or None, headers=headers, timeout=30
        )
    except httpx.TransportError as exc:
        raise UsageError(f"cannot reach the service at {server}: {exc}") from exc
    if response.status_code >= 400:
        try:
            error = response.json()["error"]
            message = f"{error['type']}: {error['message']}"
        except (ValueError, KeyError, TypeError):
            message = response.text[:500]
        raise UsageError(f"{method} {path} answered {response.status_code}: {message}")
    return response.json() if response.content else None
