"""Delivering scores to their rules' sinks: at least once, recorded once (issue 52).

Contract (docs/online.md, *Score sinks*): every :data:`POLL_S` (and at :meth:`SinkDelivery.wake`; while passes
find nothing to enqueue or claim the period doubles up to ``idle_poll_max_s``, never past a retry this service
scheduled: ``shared/idle.py``) a task of the service's event loop

1. enqueues a delivery row per sink for every ``done`` score of a rule with sinks stored in the last
   :data:`RECENT` (every :data:`SWEEP_S`, and at start: in the last :data:`ENQUEUE_WINDOW`) that has none
   (``store/sinks/deliveries.py``: insert-or-ignore on (rule, target, sink), so a restart or a second service
   never makes two), and for every stored result of a job with sinks that has none, its row's ids read from
   the dataset (``store/jobs/sink_deliveries.py``; a row without a trace id ``skipped``);
2. claims up to :data:`BATCH` due deliveries (a lease of :data:`LEASE_S`; a service killed mid-send leaves
   its claim to expire and the delivery is sent again, under the same idempotency key — sooner when the same
   service starts again: its first pass makes its previous process's claims end :data:`IN_FLIGHT_S` from then
   at the latest, past what that process's request could still take at the tool, ``release_own``);
3. sends each (``sinks/requests.py``) to the host the sink names, held to the rule of a job's model target
   (``targets/endpoint.check_endpoint``: ``host:port`` in the workspace's ``network_allow`` — or, on an
   open service, a name pinned in ``EGRESS_HOSTS`` —, public addresses unless pinned, the checked address
   called, no redirects), with the workspace's secrets filled in (never stored in the row, never logged);
4. records the outcome: a 2xx answer ``delivered``; a connection error, a timeout, 408, 425, 429, 5xx — and,
   for Phoenix and MLflow, 404 (the span or trace has not arrived yet) — ``pending`` again after a back-off
   (``sink_retry_s``, 2 s, doubling to 5 min), until :data:`MAX_ATTEMPTS` attempts, then ``failed``; any other
   answer ``failed`` at once with its status and the first characters of its body; a result with nothing to
   write ``skipped``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Collection
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

from evaluator_host.errors import EvaluatorHostError
from evaluator_host.sandbox.egress.addresses import is_public, system_resolve
from evaluator_host.settings import Settings
from evaluator_host.shared.idle import IdleTicker
from evaluator_host.shared.tasks import stop
from evaluator_host.sinks.requests import Outbound, Skip, build, recorded, secret_names
from evaluator_host.store.db import utcnow
from evaluator_host.store.jobs.sink_deliveries import JobRowIds, JobSinkStore
from evaluator_host.store.sinks.deliveries import Delivery, SinkDeliveryStore
from evaluator_host.targets.endpoint import check_endpoint

if TYPE_CHECKING:  # httpx (and the CLI it imports: click, rich) with the first request, not with the service
    import httpx

__all__ = [
    "BATCH", "ENQUEUE_WINDOW", "IN_FLIGHT_S", "LEASE_S", "MAX_ATTEMPTS", "POLL_S", "RECENT", "SWEEP_S", "SinkDelivery",
]  # fmt: skip

log = logging.getLogger(__name__)

POLL_S = 1.0
BATCH = 50
LEASE_S = 60.0
MAX_ATTEMPTS = 20
ENQUEUE_WINDOW = timedelta(hours=24)
RECENT = timedelta(minutes=5)  # what an ordinary pass looks at: a score stored by a live service is that new
SWEEP_S = 300.0  # how often a pass looks back the whole window (a score whose service died before it enqueued)
TIMEOUT_S = 15.0
IN_FLIGHT_S = TIMEOUT_S + 5.0  # how long a dead process's request may still be at the tool after a restart
_RETRYABLE = frozenset({408, 425, 429, 500, 502, 503, 504})
_ERROR_TEXT = 300

Secrets = Callable[[str, list[str]], Awaitable[dict[str, str]]]
JobRows = Callable[[str, dict[str, Any], list[int]], dict[int, JobRowIds]]  # (dataset, mapping, indexes) -> ids


def backoff_s(attempts: int, first_s: float = 2.0) -> float:
    """The wait before attempt ``attempts + 1`` (``attempts`` >= 1): ``first_s`` (the ``sink_retry_s`` setting)
    doubling to 5 min, jittered (half to all of it)."""
    return float(min(300.0, first_s * 2.0 ** (min(attempts, 9) - 1)) * (0.5 + random.random() / 2))


class _Failed(Exception):
    """Not retried: the delivery ends ``failed`` with this message."""


class _Retry(Exception):
    """Retried after a back-off: the message is kept as the delivery's last error."""


class SinkDelivery:
    """One service's delivery loop (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        store: SinkDeliveryStore,
        owner: str,
        secrets: Secrets,
        allow: Callable[[str], Collection[str]],
        open_service: Callable[[], bool],
        *,
        resolve: Callable[[str, int], Awaitable[list[str]]] = system_resolve,
        public: Callable[[str], bool] = is_public,
        job_rows: JobRows | None = None,
    ) -> None:
        self.store, self.owner = store, owner
        self._pinned = dict(settings.egress_hosts)
        self._retry_s = settings.sink_retry_s
        self._secrets, self._allow, self._open = secrets, allow, open_service
        self._resolve, self._public = resolve, public
        self._job_rows, self.jobs = job_rows, JobSinkStore(store.engine)
        self.ticker = IdleTicker(POLL_S, settings.idle_poll_max_s)
        self.found = False  # whether the last pass enqueued or claimed a delivery
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None
        self._swept_at: float | None = None  # monotonic time of the last whole-window pass

    def wake(self) -> None:
        """Look for scores to deliver now."""
        self.ticker.wake()

    def start(self) -> None:
        """Start the loop (from the service's event loop)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._loop())

    def _http(self) -> httpx.AsyncClient:
        """The HTTP client, made with the first request (its TLS context reads the CA bundle: tens of ms of CPU
        a service that delivers nothing does not spend at its start)."""
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(timeout=TIMEOUT_S, trust_env=False, follow_redirects=False)
        return self._client

    async def close(self) -> None:
        """Stop; deliveries in flight are sent again by the next service (their claims expire)."""
        task, self._task = self._task, None
        await stop(task)
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def _loop(self) -> None:
        try:
            released = await asyncio.to_thread(self.store.release_own, self.owner, utcnow(), IN_FLIGHT_S)
        except Exception:  # a database hiccup: those claims expire as other services' do
            log.exception("releasing this service's earlier claims of sink deliveries failed")
        else:
            if released:
                log.info("%d sink deliveries this service was sending when it stopped are due again soon", released)
        while True:
            self.found = False
            try:
                await self.run_once()
            except Exception:  # a database hiccup: the next pass tries again
                log.exception("delivering scores to sinks failed")
            await self.ticker.wait(self.found)

    async def run_once(self) -> int:
        """One pass: enqueue, claim, send, record; the deliveries attempted."""
        now, tick = utcnow(), time.monotonic()
        whole = self._swept_at is None or tick - self._swept_at >= SWEEP_S
        enqueued = await asyncio.to_thread(self.store.enqueue, now, now - (ENQUEUE_WINDOW if whole else RECENT))
        if whole:
            self._swept_at = tick
        if self._job_rows is not None:
            enqueued += await asyncio.to_thread(self._enqueue_jobs, now)
        claimed = await asyncio.to_thread(self.store.claim, self.owner, now, BATCH, LEASE_S)
        self.found = bool(enqueued or claimed)
        await asyncio.gather(*(self._deliver(one) for one in claimed))
        return len(claimed)

    def _enqueue_jobs(self, now: datetime) -> int:
        """Delivery rows for jobs' results that have none (their rows' ids read from the datasets); the jobs."""
        assert self._job_rows is not None
        jobs = self.jobs.unenqueued()
        for job in jobs:
            self.jobs.enqueue(job, self._job_rows(job.dataset_id, job.field_mapping, job.indexes), now)
        return len(jobs)

    async def _deliver(self, delivery: Delivery) -> None:
        state, error, due = "delivered", None, None
        try:
            names = secret_names(delivery.spec)
            try:
                secrets = await self._secrets(delivery.workspace_id, names) if names else {}
            except EvaluatorHostError as exc:
                raise _Retry(str(exc)) from None  # a secret set later makes it go
            outbound = build(delivery, secrets)
            await self._send(delivery, outbound, secrets)
        except Skip as exc:
            state, error = "skipped", str(exc)
        except _Failed as exc:
            state, error = "failed", str(exc)
        except _Retry as exc:
            error = str(exc)
            if delivery.attempts >= MAX_ATTEMPTS:
                state, error = "failed", f"{error} (gave up after {delivery.attempts} attempts)"
            else:
                state, due = "pending", utcnow() + timedelta(seconds=backoff_s(delivery.attempts, self._retry_s))
        except Exception as exc:  # a bug: never lose the delivery, retry it
            log.exception("delivering a score to a %s sink failed", delivery.spec.get("type"))
            state, error = "pending", type(exc).__name__
            due = utcnow() + timedelta(seconds=backoff_s(delivery.attempts, self._retry_s))
        now = utcnow()
        if due is not None:  # the retry is on time whatever the idle back-off
            self.ticker.due_in((due - now).total_seconds())
        await asyncio.to_thread(self.store.finish, delivery, self.owner, state, error, now, due)

    async def _target(self, workspace: str, url: str) -> tuple[str, dict[str, str], dict[str, object]]:
        """The URL to call (the checked address), the ``Host`` header, and the TLS name."""
        try:
            endpoint = await check_endpoint(
                url,
                frozenset(self._allow(workspace)),
                open_service=self._open(),
                pinned=self._pinned,
                resolve=self._resolve,
                public=self._public,
            )
        except EvaluatorHostError as exc:
            raise _Failed(str(exc).replace("target host", "sink host")) from None
        query = urlsplit(url).query
        extensions: dict[str, object] = {"sni_hostname": endpoint.host} if endpoint.scheme == "https" else {}
        return endpoint.url("") + (f"?{query}" if query else ""), {"Host": endpoint.netloc}, extensions

    async def _send(self, delivery: Delivery, outbound: Outbound, secrets: dict[str, str]) -> None:
        import httpx

        url, host, extensions = await self._target(delivery.workspace_id, outbound.url)
        if outbound.recorded is not None and await self._recorded(delivery, outbound, secrets):
            return  # sent before (the service died before recording it): recorded once
        try:
            headers = {**outbound.headers, **host}
            if outbound.content is not None:
                answer = await self._http().post(url, content=outbound.content, headers=headers, extensions=extensions)
            else:
                answer = await self._http().post(url, json=outbound.body, headers=headers, extensions=extensions)
        except httpx.HTTPError as exc:
            raise _Retry(f"{type(exc).__name__} calling {urlsplit(outbound.url).netloc}") from None
        if 200 <= answer.status_code < 300:
            return
        self._refused(delivery, answer, secrets)

    async def _recorded(self, delivery: Delivery, outbound: Outbound, secrets: dict[str, str]) -> bool:
        """Whether the tool already holds this delivery's score (read at ``outbound.recorded``)."""
        import httpx

        assert outbound.recorded is not None
        url, host, extensions = await self._target(delivery.workspace_id, outbound.recorded)
        headers = {k: v for k, v in outbound.headers.items() if k.lower() != "content-type"}
        try:
            answer = await self._http().get(url, headers={**headers, **host}, extensions=extensions)
        except httpx.HTTPError as exc:
            raise _Retry(f"{type(exc).__name__} calling {urlsplit(outbound.url).netloc}") from None
        if answer.status_code == 404:
            raise _Retry("HTTP 404: the trace has not arrived yet")
        if not 200 <= answer.status_code < 300:
            self._refused(delivery, answer, secrets)
        try:
            return recorded(answer.json(), delivery.key)
        except ValueError:
            raise _Retry("the trace's answer is not JSON") from None

    @staticmethod
    def _refused(delivery: Delivery, answer: httpx.Response, secrets: dict[str, str]) -> NoReturn:
        """Raise :class:`_Retry` or :class:`_Failed` for a non-2xx ``answer``."""
        text = answer.text[:_ERROR_TEXT]
        for value in secrets.values():  # a tool echoing a credential back never puts it in our store
            if len(value) >= 4:
                text = text.replace(value, "[secret]")
        message = f"HTTP {answer.status_code}: {text}"
        not_arrived = delivery.spec.get("type") in ("phoenix", "mlflow") and answer.status_code == 404
        if answer.status_code in _RETRYABLE or not_arrived:
            raise _Retry(message)
        raise _Failed(message)
