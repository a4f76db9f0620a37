"""What the receiver would cost a span if it kept the span's protobuf bytes as received (issue 55 §1's "raw span
bytes stored and parsed lazily"), measured in-process on the bench's own bodies: the ceiling of that design on
this machine, not the service.

Per span, CPU time of this process (one thread), measured by :func:`bench.online_bench.stages` with this module's
:data:`STEPS` in place of the service's decode and rows:

* *decode*: ``ExportTraceServiceRequest.FromString`` and only what a row's columns and the receiver's bounds need
  without visiting an attribute (ids, parent, name, times, the resource's ``service.name``; the ids' lengths and
  the attribute count: a bound on a span's size would compare the bytes the row makes anyway) — no Python value
  of any attribute;
* *row*: the rows' dicts with ``body`` = ``Span.SerializeToString()`` (the resource and scope would be stored
  once a request: not charged here, so this is a floor);
* *store*: the service's own :class:`~evaluator_host.store.online.spans.OnlineSpanStore` writing those rows into a
  fresh SQLite data dir with the real schema (its primary key and index, the trace upsert with its three indexes,
  the usage row, the commit) — ``body`` a BLOB where the service writes JSON text.

Left out, so the figure is a lower bound of any such design: routing (the ready traces' spans read back for the
rules' session keys and filters — that read would then parse protobuf), assembly, HTTP, sessions. PostgreSQL is
not measured (``online_spans.body`` is ``text`` there: raw bytes need a ``bytea`` column).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class _Raw(bytes):
    """A span's bytes as a ``body``: the usage charge (``span_bytes``) counts them as they are."""

    def isascii(self) -> bool:
        return True


_ATTRIBUTES = 128  # the default online_max_attributes: the one bound read here without visiting attributes


def decode(payload: bytes) -> list[tuple[Any, dict[str, Any]]]:
    """Each kept span of one body with its row's columns but ``body`` (the span itself still the parsed message)."""
    kept = []
    for resource_spans in ExportTraceServiceRequest.FromString(payload).resource_spans:
        service = None
        for pair in resource_spans.resource.attributes:
            if pair.key == "service.name":
                service = pair.value.string_value[:200]
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                trace_id, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
                if len(trace_id) != 16 or len(span_id) != 8 or len(span.attributes) > _ATTRIBUTES:
                    continue
                end_ns = span.end_time_unix_nano
                columns = {
                    "trace_id": trace_id.hex(),
                    "span_id": span_id.hex(),
                    "parent_span_id": parent.hex() if parent else None,
                    "name": span.name,
                    "service_name": service,
                    "start_ns": span.start_time_unix_nano,
                    "end_ns": end_ns,
                    "root_ended_at": None if parent else datetime.fromtimestamp(end_ns / 1e9, UTC),
                }
                kept.append((span, columns))
    return kept


def rows(decoded: list[tuple[Any, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The ``online_spans`` rows of :func:`decode`'s spans, each body the span's protobuf bytes."""
    return [{**columns, "body": _Raw(span.SerializeToString())} for span, columns in decoded]


STEPS = (decode, rows)  # bench.online_bench.stages(..., steps=STEPS)


def main() -> int:
    from bench.online_bench import stages

    print(stages("SQLite, the span's protobuf bytes kept", None, STEPS).row_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
