"""What the receiver would cost a span if it kept the span's protobuf bytes as received (issue 55 §1's "raw span
bytes stored and parsed lazily"), measured in-process on the bench's own bodies: the ceiling of that design on
this machine, not the service.

Per span, CPU time of this process (one thread), the same split as :func:`bench.online_bench.stages`:

* *decode*: ``ExportTraceServiceRequest.FromString`` and only what a row's columns and the receiver's bounds need
  without visiting an attribute (ids, parent, name, times, the resource's ``service.name``; the ids' lengths and
  the attribute count: a bound on a span's size would compare the bytes the row makes anyway) — no Python value
  of any attribute;
* *row*: the row's dict with ``body`` = ``Span.SerializeToString()`` (the resource and scope would be stored
  once a request: not charged here, so this is a floor);
* *store*: the service's own :class:`~evaluator_host.store.online.spans.OnlineSpanStore` writing those rows into a
  fresh SQLite data dir with the real schema (its primary key and index, the trace upsert with its three indexes,
  the usage row, the commit) — ``body`` a BLOB where the service writes JSON text.

Left out, so the figure is a lower bound of any such design: routing (the ready traces' spans read back for the
rules' session keys and filters — that read would then parse protobuf), assembly, HTTP, sessions. PostgreSQL is
not measured (``online_spans.body`` is ``text`` there: raw bytes need a ``bytea`` column).
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import REPO


class _Raw(bytes):
    """A span's bytes as a ``body``: the usage charge (``span_bytes``) counts them as they are."""

    def isascii(self) -> bool:
        return True


_ATTRIBUTES = 128  # the default online_max_attributes: the one bound read here without visiting attributes


def _rows(payload: bytes, request_type: Any, serialize: bool = True) -> list[dict[str, Any]]:
    """The ``online_spans`` rows of one body, its spans kept as their protobuf bytes (``serialize`` False: the
    decode alone, ``body`` empty)."""
    rows = []
    request = request_type.FromString(payload)
    for resource_spans in request.resource_spans:
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
                rows.append(
                    {
                        "trace_id": trace_id.hex(),
                        "span_id": span_id.hex(),
                        "parent_span_id": parent.hex() if parent else None,
                        "name": span.name,
                        "service_name": service,
                        "start_ns": span.start_time_unix_nano,
                        "end_ns": end_ns,
                        "body": _Raw(span.SerializeToString()) if serialize else b"",
                        "root_ended_at": None if parent else datetime.fromtimestamp(end_ns / 1e9, UTC),
                    }
                )
    return rows


def raw_stages(bodies: list[bytes], spans: int) -> tuple[float, float, float]:
    """CPU µs a span of decode, row and store for ``bodies`` (``spans`` in all), raw bytes kept (see above)."""
    sys.path.insert(0, str(REPO))
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from evaluator_host.store.db import make_engine, utcnow
    from evaluator_host.store.online.spans import OnlineSpanStore

    spent = [0.0, 0.0, 0.0]
    with tempfile.TemporaryDirectory(prefix="evaluator-host-bench-") as data_dir:
        engine = make_engine(f"sqlite:///{Path(data_dir) / 'ceiling.db'}")
        store = OnlineSpanStore(engine)
        for payload in bodies:
            t0 = time.process_time()
            _rows(payload, ExportTraceServiceRequest, serialize=False)  # decode: the parse and the fields read
            t1 = time.process_time()
            rows = _rows(payload, ExportTraceServiceRequest)  # the same, and each span's bytes: row = the rest
            t2 = time.process_time()
            store.write_within("ws_bench", rows, utcnow(), None)
            t3 = time.process_time()
            spent[0] += t1 - t0
            spent[1] += (t2 - t1) - (t1 - t0)
            spent[2] += t3 - t2
        engine.dispose()
    n = spans / 1e6
    return spent[0] / n, spent[1] / n, spent[2] / n


def measure() -> tuple[float, float, float]:
    """:func:`raw_stages` of the bodies :func:`bench.online_bench.stages` measures (the same seed and count)."""
    from bench.online_bench import BATCH, STAGE_BODIES, body

    rng = random.Random(99)
    return raw_stages([body(rng) for _ in range(STAGE_BODIES)], STAGE_BODIES * BATCH)


def main() -> int:
    decode, row, store = measure()
    print(f"raw bytes kept, SQLite: decode {decode:.1f} µs, row {row:.1f} µs, store {store:.1f} µs a span")
    return 0


if __name__ == "__main__":
    sys.exit(main())
