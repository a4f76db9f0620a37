"""The shape of an OTLP body checked before it is parsed whole: a body whose parse would cost far more
memory and time than its bytes is refused first (issue 47, item 4).

Both parsers materialise every element of a body: ``ExportTraceServiceRequest.FromString`` (upb) makes a
message of ~100-200 bytes for each two-byte empty element, and ``json.loads`` a dict or list of 64-72
bytes for each three-byte ``{}`` or ``[]`` (then ``json_format.ParseDict`` a message for each, in Python,
~20 µs apiece). Before this, 16 MiB of empty spans (16 kB gzipped) cost 1.4 GiB and 7 s (protobuf), and
16 MiB of ``{},`` 748 MiB and 109 s (JSON). The checks here are cheap and early-stopping:

* :func:`protobuf_outline` walks the wire format of the three outer levels only (the request's
  ``resource_spans``, each one's ``scope_spans``, each one's ``spans``), skipping every element by its
  length, and raises 400 as soon as a level holds more elements than ``online_max_spans`` (resources,
  scopes and spans each: a resource or scope without spans carries nothing) — at most that many
  steps, never a parse. A span's own fields are left to the parser: their count is bounded by the
  span's bytes, the attributes' amplification is the parser's (documented in docs/security.md).
* :func:`json_outline` counts the body's ``{`` and ``[`` bytes (C speed; inside strings too, so an upper
  bound of its objects and arrays) and raises 413 when there are more than ``online_max_json_bytes // 16``
  of them: OTLP/JSON as exporters write it spends 17 bytes or more on each object (``{"intValue":1},``),
  a bomb three. With the JSON body bound this bounds what ``json.loads`` and ``ParseDict`` make.
"""

from __future__ import annotations

__all__ = ["JSON_BYTES_PER_CONTAINER", "OutlineError", "json_outline", "protobuf_outline"]

JSON_BYTES_PER_CONTAINER = 16  # online_max_json_bytes // this: most objects and arrays of a JSON body

# field numbers of the three outer levels (opentelemetry/proto/trace/v1/trace.proto and the service)
_RESOURCE_SPANS, _SCOPE_SPANS, _SPANS = 1, 2, 2
_LEN = 2  # wire type of a length-delimited field


class OutlineError(Exception):
    """A body refused by its shape: ``status`` (400 or 413) and the client's message (the receiver
    answers it as an ``OtlpError``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def json_outline(body: bytes, json_bytes: int) -> None:
    """413 when ``body`` holds more ``{``/``[`` than ``json_bytes // 16`` (see the module docstring)."""
    most = max(1, json_bytes // JSON_BYTES_PER_CONTAINER)
    found = body.count(b"{") + body.count(b"[")
    if found > most:
        raise OutlineError(
            413,
            f"the JSON body holds {found} objects and arrays; at most {most} (online_max_json_bytes / "
            f"{JSON_BYTES_PER_CONTAINER}): send smaller batches, or protobuf",
        )


def protobuf_outline(body: bytes, spans: int) -> None:
    """400 when the request, a resource or a scope holds more than ``spans`` elements, or its outer
    levels are not well-formed wire data (see the module docstring); returns at once otherwise."""
    view = memoryview(body)
    total = [0]  # spans of the whole request
    for rs_start, rs_end in _elements(view, 0, len(view), _RESOURCE_SPANS, spans, "resource_spans"):
        for ss_start, ss_end in _elements(view, rs_start, rs_end, _SCOPE_SPANS, spans, "scope_spans"):
            for _ in _elements(view, ss_start, ss_end, _SPANS, spans, "spans"):
                total[0] += 1
                if total[0] > spans:
                    raise OutlineError(400, f"more than {spans} spans in one request (online_max_spans)")


def _elements(view: memoryview, start: int, end: int, field: int, most: int, what: str) -> list[tuple[int, int]]:
    """The (start, end) of each length-delimited ``field`` of the message in ``view[start:end]``; other
    fields are skipped. 400 past ``most`` of them, or for wire data that does not parse."""
    found: list[tuple[int, int]] = []
    at = start
    while at < end:
        key, at = _varint(view, at, end)
        wire = key & 7
        if wire == 0:
            _, at = _varint(view, at, end)
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        elif wire == _LEN:
            size, at = _varint(view, at, end)
            if key >> 3 == field:
                if len(found) >= most:
                    raise OutlineError(400, f"more than {most} {what} in one request (online_max_spans)")
                found.append((at, at + size))
            at += size
        else:  # groups (3, 4) are not in OTLP; 6, 7 do not exist
            raise _malformed()
        if at > end:
            raise _malformed()
    return found


def _varint(view: memoryview, at: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= end or shift > 63:
            raise _malformed()
        byte = view[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _malformed() -> OutlineError:
    return OutlineError(400, "the body is not an OTLP ExportTraceServiceRequest (protobuf): malformed wire data")
