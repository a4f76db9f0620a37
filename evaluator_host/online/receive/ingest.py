"""The receiver's use case: an OTLP body in, its spans stored in the key's workspace, the OTLP answer out.

:meth:`Ingest.receive` runs on a thread (the route hands it over with ``asyncio.to_thread``): it
inflates and decodes the body (:mod:`evaluator_host.online.receive.otlp`), turns each accepted span into
its ``online_spans`` row (``body`` by :func:`evaluator_host.online.reading.spans.encode`) and writes them
with their traces in one transaction (:class:`~evaluator_host.store.online.spans.OnlineSpanStore`).
Nothing here waits on evaluation: assembly and the router read the tables on their own time.

Backpressure (docs/online.md, "Limits, backpressure and retention"), per workspace so that one tenant
never refuses another's traffic (issue 47, item 5): :meth:`Ingest.full` says when a workspace holds
its share of the span store or more — ``online_max_stored_spans`` divided by the number of workspaces
(:meth:`Ingest.share`; a fixed share, not lent to others) — by counts assembly refreshes on each
retention pass (:meth:`Ingest.recount`: ``online_usage`` and the workspaces) plus the spans this
process stored since; the route then answers 503 with ``Retry-After`` without reading the body
(OTLP exporters retry on 503). The storage quota: the workspace's ``max_dataset_bytes`` (from its
cached record, as every quota) goes with the write, which stores only the leading spans that fit —
the others are rejected in the answer's partial success — or raises ``QuotaExceeded`` when none fits
(the route's 429).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from evaluator_host.observability.metrics import Metrics
from evaluator_host.online.reading import spans as span_bodies
from evaluator_host.online.receive.inflate import inflate
from evaluator_host.online.receive.otlp import JSON, Decoded, Limits, decode
from evaluator_host.settings import Settings
from evaluator_host.store.db import utcnow
from evaluator_host.store.online.spans import OnlineSpanStore
from evaluator_host.tenancy.quotas import STORAGE_QUOTA, QuotaGuard

__all__ = ["Ingest"]


class Ingest:
    """One service's receiver: its bounds, its store, its counters."""

    def __init__(
        self, settings: Settings, store: OnlineSpanStore, metrics: Metrics, quotas: QuotaGuard | None = None
    ) -> None:
        self.settings = settings
        self.limits = Limits.of(settings)
        self.store = store
        self.metrics = metrics
        self.quotas = quotas
        self._stored = 0  # spans in the store: the last count plus what this process stored since
        self._held: dict[str, int] = {}  # the same, per workspace
        self._workspaces = 1  # workspaces there were at the last count
        self._lock = threading.Lock()
        self._decoding = threading.BoundedSemaphore(settings.online_decode_concurrency)
        self._outcomes = {name: metrics.online_spans.labels(name) for name in ("stored", "duplicate", "rejected")}
        # (workspace, request bytes, spans): Forwarder.offer when spans are forwarded (services.py sets it)
        self.forward: Callable[[str, bytes, int], None] | None = None
        self.forwards: Callable[[str], bool] | None = None  # whether a workspace forwards (Forwarder.forwards)
        self.on_stored: Callable[[], None] | None = None  # spans were stored: the assembly's wake (any thread)

    def share(self) -> int:
        """The spans one workspace may hold: ``online_max_stored_spans`` over the workspaces (at least 1)."""
        return max(1, self.settings.online_max_stored_spans // self._workspaces)

    def full(self, workspace: str) -> bool:
        """Whether ``workspace`` holds its share of the span store (the route answers 503)."""
        return self._held.get(workspace, 0) >= self.share()

    def full_message(self, workspace: str) -> str | None:
        """Why ``workspace``'s spans are refused before their body is read (its share of the span store is
        full: HTTP 503, gRPC ``RESOURCE_EXHAUSTED``, both retried later); None when they are not."""
        if not self.full(workspace):
            return None
        return (
            f"this workspace's share of the span store is full ({self.share()} spans: online_max_stored_spans over "
            "the workspaces): retry later"
        )

    def recount(self) -> int:
        """Count the stored spans again (after retention), and the workspaces; the spans."""
        held, workspaces = self.store.held(), self.store.count_workspaces()
        with self._lock:
            self._held = held
            self._stored = sum(held.values())
            self._workspaces = max(1, workspaces)
        return self._stored

    def receive(self, workspace: str, body: bytes, media: str, encoding: str | None) -> Decoded:
        """Decode ``body`` and store its accepted spans in ``workspace`` (raises ``OtlpError`` for a body
        refused whole); what it carried (the answer's partial success is its ``rejected``)."""
        with self._decoding:  # at most online_decode_concurrency bodies in memory, inflated and parsed
            if media == JSON and self.limits.json_bytes < self.limits.body_bytes:
                inflated = inflate(body, encoding, self.limits.json_bytes, "online_max_json_bytes")
            else:
                inflated = inflate(body, encoding, self.limits.body_bytes)
            forwarding = self.forward is not None and (self.forwards is None or self.forwards(workspace))
            decoded = decode(inflated, media, self.limits, keep_message=forwarding)  # else JSON's fast path
            if self.forward is not None and forwarding:  # every span received, unchanged (online/receive/forwarding.py)
                message, decoded.message = decoded.message, None
                forwarded = inflated if message is None else message.SerializeToString()
                self.forward(workspace, forwarded, len(decoded.spans) + decoded.rejected)
                del message, forwarded
            del inflated
        if decoded.rejected:
            self._outcomes["rejected"].inc(decoded.rejected)
        if not decoded.spans or not self.settings.online_store_spans:
            return decoded
        rows = [_row(received.span, received.service_name, received.scope) for received in decoded.spans]
        limit = self.quotas.storage_quota(workspace) if self.quotas is not None else None
        written = self.store.write_within(workspace, rows, utcnow(), limit)  # QuotaExceeded: none fits
        stored = written.stored
        with self._lock:
            self._stored += stored
            self._held[workspace] = self._held.get(workspace, 0) + stored
        self._outcomes["stored"].inc(stored)
        if stored and self.on_stored is not None:
            self.on_stored()
        if written.over_quota:
            self._outcomes["rejected"].inc(written.over_quota)
            decoded.rejected += written.over_quota
            decoded.reasons.insert(
                0, f"{written.over_quota} span(s) over workspace {workspace}'s storage quota ({STORAGE_QUOTA})"
            )
        if len(rows) - written.over_quota > stored:
            self._outcomes["duplicate"].inc(len(rows) - written.over_quota - stored)
        return decoded


def _row(span: Any, service_name: str | None, scope: dict[str, str]) -> dict[str, Any]:
    ended = span.parent_id is None and span.end_ns > 0  # only a root's end is kept (root_ended_at)
    return {
        "trace_id": span.trace_id,
        "span_id": span.span_id,
        "parent_span_id": span.parent_id,
        "name": span.name,
        "service_name": service_name,
        "start_ns": span.start_ns,
        "end_ns": span.end_ns,
        "body": span_bodies.encode(span, scope),
        "root_ended_at": datetime.fromtimestamp(span.end_ns / 1e9, UTC) if ended else None,
    }
