"""An OTLP/HTTP body's ``Content-Encoding`` undone within a bound: a gzip bomb is never inflated whole.

Contract of :func:`inflate`: the body as sent when it is not encoded (413 when it is over ``limit``:
the JSON bound is below the wire bound); a gzip body (one or more
members) inflated only up to ``limit`` bytes — one byte more raises 413 at once, before anything past
it is produced; a broken or truncated gzip stream 400; any other encoding 415 (all :class:`OtlpError`).
"""

from __future__ import annotations

import zlib

from evaluator_host.online.receive.otlp import OtlpError

__all__ = ["inflate"]


def inflate(body: bytes, encoding: str | None, limit: int, setting: str = "online_max_body_bytes") -> bytes:
    """``body`` decoded per ``Content-Encoding`` (``gzip`` or none); 413 as soon as it passes ``limit``
    bytes (named ``setting`` in the message) — inflating stops there — and 400 for a broken gzip stream;
    415 for another encoding."""
    name = (encoding or "identity").strip().lower()
    if name == "identity" or not name:
        if len(body) > limit:
            raise OtlpError(413, f"the body exceeds {limit} bytes ({setting})")
        return body
    if name != "gzip":
        raise OtlpError(415, f"Content-Encoding {name!r} is not supported (gzip or none)")
    out: list[bytes] = []
    size = 0
    data = body
    try:
        while data:
            inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # one per gzip member
            while data:
                chunk = inflater.decompress(data, limit - size + 1)  # never more than one byte past the bound
                size += len(chunk)
                if size > limit:
                    raise OtlpError(413, f"the inflated body exceeds {limit} bytes ({setting})")
                out.append(chunk)
                data = inflater.unconsumed_tail
                if inflater.eof:
                    break
            if not inflater.eof:
                raise OtlpError(400, "the gzip body ends early")
            data = inflater.unused_data
    except zlib.error as exc:
        raise OtlpError(400, f"the body is not valid gzip: {exc}") from None
    return b"".join(out)
