"""Every span a workspace receives, forwarded unchanged to its OTLP backends (issue 52).

Contract (docs/online.md, *Forwarding*): :meth:`Forwarder.offer` takes one received OTLP request — the
protobuf ``ExportTraceServiceRequest`` bytes as the application sent them (inflated), or, for an
OTLP/JSON body, its protobuf serialization — and queues it for every forwarding target of the
workspace: ``EVALUATOR_HOST_OTLP_FORWARD_ENDPOINT`` (+ ``…_HEADERS``) for the default workspace, and a
workspace's ``forwarding`` (``PATCH /v1/workspaces/{id}``). It never blocks and never raises: past
``online_forward_max_bytes`` held (every target of this process), the request is dropped for that
target and its spans counted (``evaluator_host_online_forwarded_spans_total{outcome="dropped"}``).

A task of the service's event loop sends each target's queue in order, one request at a time: up to
:data:`BATCH_BYTES` of queued requests concatenated — the protobuf encoding of a message whose only
field is repeated is the concatenation of its parts, so the batch *is* one ``ExportTraceServiceRequest``
holding every ``ResourceSpans`` unchanged, byte for byte — ``POST``\\ ed as
``application/x-protobuf`` with the target's headers (``{{secret:NAME}}`` filled in from the
workspace's secrets at send time; never logged). A 2xx answer sends them; a connection error, a
timeout, 408, 429 or 5xx retries the same batch after a back-off (0.5 s doubling to 30 s, with
jitter; a ``Retry-After`` of at most 60 s is honoured) while new requests queue behind it within the
bound; any other answer refuses the batch (dropped, counted ``refused``, its status logged). Redirects
are not followed.

A workspace's target (not the operator's setting) is held to a job's model-target rule
(:func:`~evaluator_host.targets.endpoint.check_endpoint`): its ``host:port`` in the workspace's
``network_allow`` (or, on an open service, a name pinned in ``EGRESS_HOSTS``), resolved to public
addresses only unless pinned, and the request sent to the very address checked (``Host`` and TLS's
SNI name the host), checked again every :data:`CHECK_TTL_S`. What is queued when the service stops
is lost (counted ``dropped``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from opentelemetry.util.re import parse_env_headers

from evaluator_host.errors import EvaluatorHostError
from evaluator_host.observability.metrics import Metrics
from evaluator_host.observability.tracing import traces_url
from evaluator_host.sandbox.egress.addresses import is_public, system_resolve
from evaluator_host.settings import Settings
from evaluator_host.shared.tasks import stop
from evaluator_host.targets.endpoint import Endpoint, check_endpoint
from evaluator_host.tenancy.models import SECRET_REF, check_headers

if TYPE_CHECKING:  # httpx (and the CLI it imports: click, rich) with the first request, not with the service
    import httpx

__all__ = ["BATCH_BYTES", "CHECK_TTL_S", "Forwarder", "Target", "default_targets", "workspace_targets"]

log = logging.getLogger(__name__)

BATCH_BYTES = 1024 * 1024  # one request's span bytes (a larger received request is sent alone)
CHECK_TTL_S = 60.0  # a workspace target's host check is made again after this
TIMEOUT_S = 10.0
_BACKOFF_S, _BACKOFF_CAP_S, _RETRY_AFTER_CAP_S = 0.5, 30.0, 60.0
_RETRYABLE = frozenset({408, 429, 500, 502, 503, 504})
PROTOBUF = "application/x-protobuf"

Secrets = Callable[[str, list[str]], Awaitable[dict[str, str]]]


@dataclass(frozen=True)
class Target:
    """One forwarding endpoint: its traces URL, its header templates, whether the host rule applies."""

    url: str
    headers: tuple[tuple[str, str], ...] = ()
    checked: bool = True  # a workspace's setting; the operator's own (environment) is trusted as given


def default_targets(settings: Settings) -> tuple[Target, ...]:
    """The default workspace's targets from ``otlp_forward_endpoint`` and ``otlp_forward_headers``
    (``ValueError`` for a header the workspace setting would refuse too)."""
    headers = parse_env_headers(settings.otlp_forward_headers or "", liberal=True)
    check_headers(dict(headers))
    return tuple(Target(traces_url(url), tuple(headers.items()), False) for url in settings.otlp_forward_endpoint)


def workspace_targets(forwarding: Iterable[dict[str, object]]) -> tuple[Target, ...]:
    """A workspace's stored ``forwarding`` entries as targets."""
    out = []
    for entry in forwarding:
        headers = entry.get("headers") or {}
        pairs = tuple((str(k), str(v)) for k, v in headers.items()) if isinstance(headers, dict) else ()
        out.append(Target(traces_url(str(entry["endpoint"])), pairs, True))
    return tuple(out)


def shown(url: str) -> str:
    """``url`` as logged: scheme, host, port and path only."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}{':' + str(parts.port) if parts.port else ''}{parts.path}"


class _Refused(Exception):
    """The batch may not be sent there (the host check, a missing secret): dropped, counted ``refused``."""


@dataclass(eq=False)
class _Queue:
    workspace: str
    target: Target
    items: deque[tuple[bytes, int]] = field(default_factory=deque)  # (request bytes, spans)
    due: float = 0.0
    failures: int = 0
    sending: bool = False
    endpoint: Endpoint | None = None
    checked_at: float = 0.0


class Forwarder:
    """One service's forwarding: the queues, the bound, the sending task (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        targets: Callable[[str], Sequence[Target]],
        secrets: Secrets,
        allow: Callable[[str], Collection[str]],
        open_service: Callable[[], bool],
        *,
        resolve: Callable[[str, int], Awaitable[list[str]]] = system_resolve,
        public: Callable[[str], bool] = is_public,
    ) -> None:
        self.max_bytes = settings.online_forward_max_bytes
        self._pinned = dict(settings.egress_hosts)
        self._targets, self._secrets, self._allow, self._open = targets, secrets, allow, open_service
        self._resolve, self._public = resolve, public
        self._metrics = metrics
        self._queues: dict[tuple[str, Target], _Queue] = {}
        self._held = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None
        self._outcome = {name: metrics.forwarded.labels(name) for name in ("sent", "dropped", "refused")}
        self._requests = {name: metrics.forward_requests.labels(name) for name in ("ok", "retried", "refused")}

    @property
    def held_bytes(self) -> int:
        """Request bytes queued now (every target)."""
        return self._held

    def forwards(self, workspace: str) -> bool:
        """Whether ``workspace``'s requests go anywhere (its targets unreadable: assumed so, the body is kept)."""
        try:
            return bool(self._targets(workspace))
        except Exception:
            return True

    def offer(self, workspace: str, body: bytes, spans: int) -> None:
        """Queue one received request for every forwarding target of ``workspace``; never blocks, never raises."""
        try:
            targets = self._targets(workspace)
        except Exception:  # a workspace's record unreadable: ingestion goes on
            log.exception("forwarding: the targets of workspace %s could not be read", workspace)
            return
        if not targets:
            return
        dropped = 0
        with self._lock:
            for target in targets:
                if self._held + len(body) > self.max_bytes:
                    dropped += spans
                    continue
                queue = self._queues.get((workspace, target))
                if queue is None:
                    queue = self._queues[(workspace, target)] = _Queue(workspace, target)
                queue.items.append((body, spans))
                self._held += len(body)
            held = self._held
        self._metrics.forward_queued.set(held)
        if dropped:
            self._outcome["dropped"].inc(dropped)
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed: the service is stopping
                loop.call_soon_threadsafe(wake.set)

    def start(self) -> None:
        """Start sending (call from the service's event loop)."""
        if self._task is not None:
            return
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        self._task = asyncio.ensure_future(self._run())

    def _http(self) -> httpx.AsyncClient:
        """The HTTP client, made with the first request (its TLS context reads the CA bundle: tens of ms of CPU
        a service that forwards nothing does not spend at its start)."""
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(timeout=TIMEOUT_S, trust_env=False, follow_redirects=False)
        return self._client

    async def close(self) -> None:
        """Stop sending; what is still queued is dropped (counted)."""
        task, self._task = self._task, None
        await stop(task)
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
        with self._lock:
            lost = sum(spans for q in self._queues.values() for _body, spans in q.items)
            self._queues.clear()
            self._held = 0
        if lost:
            self._outcome["dropped"].inc(lost)
        self._metrics.forward_queued.set(0)

    async def _run(self) -> None:
        assert self._wake is not None
        sending: set[asyncio.Task[None]] = set()
        while True:
            self._wake.clear()
            now = time.monotonic()
            with self._lock:
                waiting = [q for q in self._queues.values() if q.items and not q.sending]
            for queue in waiting:
                if queue.due <= now:
                    queue.sending = True
                    task = asyncio.ensure_future(self._send(queue))
                    sending.add(task)
                    task.add_done_callback(sending.discard)
            later = [q.due - now for q in waiting if q.due > now]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(later) if later else None)

    def _take(self, queue: _Queue) -> list[tuple[bytes, int]]:
        with self._lock:
            batch: list[tuple[bytes, int]] = []
            size = 0
            for body, spans in queue.items:
                if batch and size + len(body) > BATCH_BYTES:
                    break
                batch.append((body, spans))
                size += len(body)
            return batch

    def _done(self, queue: _Queue, count: int, outcome: str) -> None:
        with self._lock:
            spans = 0
            for _ in range(min(count, len(queue.items))):
                body, n = queue.items.popleft()
                self._held -= len(body)
                spans += n
            held = self._held
        self._metrics.forward_queued.set(held)
        if spans:
            self._outcome[outcome].inc(spans)

    async def _send(self, queue: _Queue) -> None:
        try:
            await self._send_one(queue)
        except Exception:  # never lose the task to a bug: back off and try again
            log.exception("forwarding to %s failed", shown(queue.target.url))
            self._back_off(queue, None)
        finally:
            queue.sending = False
            if self._wake is not None:
                self._wake.set()

    def _back_off(self, queue: _Queue, retry_after: float | None) -> None:
        queue.failures += 1
        delay = min(_BACKOFF_CAP_S, _BACKOFF_S * 2 ** (queue.failures - 1)) * (0.5 + random.random() / 2)
        if retry_after is not None:
            delay = max(delay, min(retry_after, _RETRY_AFTER_CAP_S))
        queue.due = time.monotonic() + delay

    async def _send_one(self, queue: _Queue) -> None:
        import httpx

        if queue.target not in self._targets(queue.workspace):  # the setting changed: nowhere to send these
            self._done(queue, len(queue.items), "dropped")
            return
        batch = self._take(queue)
        try:
            url, headers, extensions = await self._route(queue)
        except _Refused as exc:
            log.warning("forwarding to %s refused: %s", shown(queue.target.url), exc)
            self._requests["refused"].inc()
            self._done(queue, len(batch), "refused")
            self._back_off(queue, None)
            return
        payload = b"".join(body for body, _spans in batch)
        try:
            answer = await self._http().post(url, content=payload, headers=headers, extensions=extensions)
        except httpx.HTTPError as exc:
            log.warning("forwarding to %s: %s; retrying", shown(queue.target.url), type(exc).__name__)
            self._requests["retried"].inc()
            self._back_off(queue, None)
            return
        if 200 <= answer.status_code < 300:
            queue.failures, queue.due = 0, 0.0
            self._requests["ok"].inc()
            self._done(queue, len(batch), "sent")
        elif answer.status_code in _RETRYABLE:
            self._requests["retried"].inc()
            self._back_off(queue, _retry_after(answer.headers.get("retry-after")))
        else:
            log.warning("forwarding to %s: HTTP %d; %d request(s) dropped", shown(queue.target.url),
                        answer.status_code, len(batch))  # fmt: skip
            self._requests["refused"].inc()
            self._done(queue, len(batch), "refused")

    async def _route(self, queue: _Queue) -> tuple[str, dict[str, str], dict[str, object]]:
        """Where the batch goes: the URL (the checked address for a workspace's target), headers with secrets."""
        target = queue.target
        names = list(dict.fromkeys(n for _h, t in target.headers for n in SECRET_REF.findall(t)))
        try:
            values = await self._secrets(queue.workspace, names) if names else {}
        except EvaluatorHostError as exc:
            raise _Refused(str(exc)) from None

        def fill(template: str) -> str:
            return SECRET_REF.sub(lambda m: values[m.group(1)], template)

        headers = {name: fill(template) for name, template in target.headers}
        headers["Content-Type"] = PROTOBUF
        if any("\r" in v or "\n" in v or "\x00" in v for v in headers.values()):
            raise _Refused("a secret cannot be a header value (a line break or NUL)")
        if not target.checked:
            return target.url, headers, {}
        now = time.monotonic()
        if queue.endpoint is None or now - queue.checked_at > CHECK_TTL_S:
            try:
                queue.endpoint = await check_endpoint(
                    target.url,
                    frozenset(self._allow(queue.workspace)),
                    open_service=self._open(),
                    pinned=self._pinned,
                    resolve=self._resolve,
                    public=self._public,
                )
            except EvaluatorHostError as exc:
                queue.endpoint = None
                raise _Refused(str(exc)) from None
            queue.checked_at = now
        endpoint = queue.endpoint
        headers["Host"] = endpoint.netloc
        extensions: dict[str, object] = {"sni_hostname": endpoint.host} if endpoint.scheme == "https" else {}
        query = urlsplit(target.url).query
        return endpoint.url("") + (f"?{query}" if query else ""), headers, extensions


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
