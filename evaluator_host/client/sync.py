"""``Client``: the API over HTTP, synchronously (httpx).

Contract: every method of :class:`~evaluator_host.client.base.Operations` sends one request and
answers the service's own pydantic model (``None`` for a 204); an error answer raises the
:class:`~evaluator_host.client.errors.ApiError` subclass of its status, no answer at all
:class:`~evaluator_host.client.errors.ServiceUnreachable` naming the URL. :meth:`Client.wait_job`,
:meth:`Client.iter_results`, :meth:`Client.results_frame` and :meth:`Client.export_results` take
several requests. A client holds one connection pool: close it (``with Client() as c:``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx

from evaluator_host.client.base import FINISHED, MAX_POLL_S, POLL_S, Operations, endpoint, progressed
from evaluator_host.client.calls import Blocking, Call
from evaluator_host.client.errors import JobWaitTimeout, ServiceUnreachable, error_for
from evaluator_host.client.frames import results_frame
from evaluator_host.jobs.models import Job, JobResult

__all__ = ["Client"]

T = TypeVar("T")


class Client(Operations, Blocking):
    """The service at ``base_url`` (default ``EVALUATOR_HOST_URL``, else ``http://127.0.0.1:8000``) with
    ``api_key`` (default ``EVALUATOR_HOST_API_KEY``); ``timeout_s`` bounds each request (an evaluation
    that builds its packages first takes that long)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 300.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url, headers = endpoint(base_url, api_key)
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0))
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout, transport=transport)

    def _send(self, call: Call[T]) -> T:
        with ExitStack() as stack:
            files = None
            if call.upload is not None:
                source = call.upload.source
                data = stack.enter_context(source.open("rb")) if isinstance(source, Path) else source
                files = {"file": (call.upload.filename, data, call.upload.content_type)}
            try:
                response = self._http.request(
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

    def wait_job(
        self,
        job: str | Job,
        *,
        timeout_s: float | None = None,
        on_progress: Callable[[Job], Any] | None = None,
        poll_s: float = POLL_S,
    ) -> Job:
        """The job once finished (succeeded, failed, cancelled or stopped), by long polls of ``poll_s``
        (≤ 60); ``on_progress(job)`` after each poll that saw a change. Past ``timeout_s``:
        :class:`~evaluator_host.client.errors.JobWaitTimeout` (the job goes on)."""
        job_id = job if isinstance(job, str) else job.id
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        last: Job | None = None
        while True:
            poll = min(poll_s, MAX_POLL_S)
            wait = poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic()))
            current = self.get_job(job_id, wait_s=wait or None)
            if on_progress is not None and progressed(current, last):
                on_progress(current)
            last = current
            if current.status in FINISHED:
                return current
            if deadline is not None and time.monotonic() >= deadline:
                raise JobWaitTimeout(current, timeout_s or 0.0)

    def iter_results(self, job: str | Job, *, offset: int = 0, page_size: int = 100) -> Iterator[JobResult]:
        """Every stored result from ``offset`` in input order, a page (≤ 1000) at a time."""
        job_id = job if isinstance(job, str) else job.id
        next_offset: int | None = offset
        while next_offset is not None:
            page = self.job_results(job_id, offset=next_offset, limit=page_size)
            yield from page.data
            next_offset = page.next_offset

    def results_frame(self, job: str | Job) -> Any:
        """The job's results as a pandas DataFrame (``frames.py``: the columns; needs pandas)."""
        return results_frame(self.iter_results(job))

    def export_results(self, job: str | Job, format: Literal["ndjson", "csv"] = "ndjson") -> Iterator[bytes]:
        """Every result streamed as the service writes it (NDJSON lines or CSV), as bytes."""
        job_id = job if isinstance(job, str) else job.id
        try:
            with self._http.stream("GET", f"/v1/jobs/{job_id}/results", params={"format": format}) as response:
                if response.status_code >= 400:
                    response.read()
                    raise error_for(response)
                yield from response.iter_bytes()
        except httpx.TransportError as exc:
            raise ServiceUnreachable(self.base_url, exc) from exc

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
