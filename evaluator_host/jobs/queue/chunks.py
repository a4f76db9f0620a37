"""A chunk task's rows: ``[[index, <row JSON>], ...]`` as one text, made by splicing dataset lines.

The service never parses a row to send it (each line is already its row's JSON), and a host gets
each row's own bytes back (``msgspec.Raw``) to pass on as the case's ``inputs`` unchanged, as the
embedded runner does.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

__all__ = ["decode_rows", "encode_rows"]

_Rows = list[tuple[int, msgspec.Raw]]
_decoder = msgspec.json.Decoder(_Rows)


def encode_rows(rows: Sequence[tuple[int, bytes]]) -> str:
    """The text of ``rows`` (index, the row's JSON line)."""
    return "[" + ",".join(f"[{idx},{line.decode()}]" for idx, line in rows) + "]"


def decode_rows(text: str) -> list[tuple[int, bytes]]:
    """``(index, row JSON)`` pairs back from :func:`encode_rows`'s text (``msgspec.ValidationError``
    or ``DecodeError`` for anything else)."""
    return [(idx, bytes(raw)) for idx, raw in _decoder.decode(text)]
