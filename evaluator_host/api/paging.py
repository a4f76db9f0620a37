"""Paging of the list endpoints: ``limit`` and an opaque ``cursor``, the same way everywhere.

Without ``limit`` (and ``cursor``) a list answers everything, as it always did: existing clients
keep working. With ``limit`` it answers at most that many items and ``next_cursor`` — pass it as
``cursor`` for the next page; it is null on the last page. The cursor names the last item's place
in the list's order (newest first, ties by id; revisions by number), not an offset, so an item
created between two pages never makes the next page repeat or skip one.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from evaluator_host.errors import LimitError

__all__ = ["MAX_LIMIT", "page"]

MAX_LIMIT = 1000
T = TypeVar("T")


def _encode(key: tuple[Any, ...]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(key), separators=(",", ":")).encode()).decode().rstrip("=")


def _decode(cursor: str) -> tuple[Any, ...]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        key = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise LimitError("cursor is not one this service gave (pass next_cursor as it came)") from exc
    if not isinstance(key, list) or not all(isinstance(k, str | int) for k in key):
        raise LimitError("cursor is not one this service gave (pass next_cursor as it came)")
    return tuple(key)


def page(
    items: Sequence[T],
    key: Callable[[T], tuple[Any, ...]],
    *,
    descending: bool,
    limit: int | None,
    cursor: str | None,
) -> tuple[list[T], str | None]:
    """One page of ``items`` in ``key`` order (``descending``: newest first) and the next page's cursor."""
    if limit is None and cursor is None:
        return list(items), None
    ordered = sorted(items, key=key, reverse=descending)
    if cursor is not None:
        after = _decode(cursor)
        ordered = [x for x in ordered if (key(x) < after if descending else key(x) > after)]
    size = min(limit or MAX_LIMIT, MAX_LIMIT)
    chunk = ordered[:size]
    return chunk, (_encode(key(chunk[-1])) if len(ordered) > size else None)
