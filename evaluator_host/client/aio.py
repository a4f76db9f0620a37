"""``AsyncClient``: the API over HTTP, for asyncio (httpx).

Contract: as ``sync.py``'s ``Client``, each method a coroutine: every method of
:class:`~evaluator_host.client.base.Operations` sends one request and
answers the service's own pydantic model (``None`` for a 204); an error answer raises the
:class:`~evaluator_host.client.errors.ApiError` subclass of its status, no answer at all
:class:`~evaluator_host.client.errors.ServiceUnreachable` naming the URL. :meth:`AsyncClient.wait_job`,
:meth:`AsyncClient.iter_results`, :meth:`AsyncClient.results_frame` and :meth:`AsyncClient.export_results` take
several requests. A client holds one connection pool: close it (``async with AsyncClient() as c:``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx

from evaluator_host.client.base import FINISHED, MAX_POLL_S, POLL_S, Operations, endpoint, progressed
from evaluator_host.client.calls import Awaiting, Call
from evaluator_host.client.errors import JobWaitTimeout, ServiceUnreachable, error_for
from evaluator_host.client.frames import results_frame
from evaluator_host.jobs.models import Job, JobResult

__all__ = ["AsyncClient"]

T = TypeVar("T")


class AsyncClient(Operations, Awaiting):
    """The service at ``base_url`` (default ``EVALUATOR_HOST_URL``, else ``http://127.0.0.1:8000``) with
    ``api_key`` (default ``EVALUATOR_HOST_API_KEY``); ``timeout_s`` bounds each request (an evaluation
    that builds its packages first takes that long)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 300.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url, headers = endpoint(base_url, api_key)
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0))
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout, transport=transport)

    async def _send(self, call: Call[T]) -> T:
        with ExitStack() as stack:
            files = None
            if call.upload is not None:
                source = call.upload.source
                data = stack.enter_context(source.open("rb")) if isinstance(source, Path) else source
                files = {"file": (call.upload.filename, data, call.upload.content_type)}
            try:
                response = await self._http.request(
                    call.method,
                    call.path,
                    json=call.json,
                    params=call.query(),
                    files=files,
                    timeout=call.timeout_s if call.timeout_s is not None else httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.TransportError as exc:
                raise ServiceUnreachable(self.base_url, exc) from exc
        if response.status_code >= 400:
            raise error_for(response)
        return call.parse(response)

    async def wait_job(
        self,
        job: str | Job,
        *,
        timeout_s: float | None = None,
        on_progress: Callable[[Job], Any | Awaitable[Any]] | None = None,
        poll_s: float = POLL_S,
    ) -> Job:
        """The job once finished (succeeded, failed, cancelled or stopped), by long polls of ``poll_s``
        (≤ 60); ``on_progress(job)`` (a function or a coroutine function) after each poll that saw a
        change. Past ``timeout_s``:
        :class:`~evaluator_host.client.errors.JobWaitTimeout` (the job goes on)."""
        job_id = job if isinstance(job, str) else job.id
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        last: Job | None = None
        while True:
            poll = min(poll_s, MAX_POLL_S)
            wait = poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic()))
            current = await self.get_job(job_id, wait_s=wait or None)
            if on_progress is not None and progressed(current, last):
                outcome = on_progress(current)
                if asyncio.iscoroutine(outcome):
                    await outcome
            last = current
            if current.status in FINISHED:
                return current
            if deadline is not None and time.monotonic() >= deadline:
                raise JobWaitTimeout(current, timeout_s or 0.0)

    async def iter_results(self, job: str | Job, *, offset: int = 0, page_size: int = 100) -> AsyncIterator[JobResult]:
        """Every stored result from ``offset`` in input order, a page (≤ 1000) at a time."""
        job_id = job if isinstance(job, str) else job.id
        next_offset: int | None = offset
        while next_offset is not None:
            page = await self.job_results(job_id, offset=next_offset, limit=page_size)
            for item in page.data:
                yield item
            next_offset = page.next_offset

    async def results_frame(self, job: str | Job) -> Any:
        """The job's results as a pandas DataFrame (``frames.py``: the columns; needs pandas)."""
        return results_frame([r async for r in self.iter_results(job)])

    async def export_results(self, job: str | Job, format: Literal["ndjson", "csv"] = "ndjson") -> AsyncIterator[bytes]:
        """Every result streamed as the service writes it (NDJSON lines or CSV), as bytes."""
        job_id = job if isinstance(job, str) else job.id
        try:
            async with self._http.stream("GET", f"/v1/jobs/{job_id}/results", params={"format": format}) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise error_for(response)
                async for chunk in response.aiter_bytes():
                    yield chunk
        except httpx.TransportError as exc:
            raise ServiceUnreachable(self.base_url, exc) from exc

    async def close(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
