"""Paging of the list endpoints: ``limit`` and an opaque ``cursor``, the same way everywhere.

Without ``limit`` (and ``cursor``) a list answers everything, as it always did: existing clients
keep working. With ``limit`` it answers at most that many items and ``next_cursor`` — pass it as
``cursor`` for the next page; it is null on the last page. The cursor names the last item's place
in the list's order (newest first, ties by id; revisions by number), not an offset, so an item
created between two pages never makes the next page repeat or skip one.

Two ways to answer a page, the same answers: :func:`page` cuts a list already in memory (runtimes,
an evaluator's revisions); :class:`Window` is what to ask a store for (``fetch`` items after ``after``:
the page plus one, which says whether another follows) and :meth:`Window.answer` cuts what it gave
(evaluators, jobs and datasets, paged in the database: a page reads a page, never the whole list).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from evaluator_host.errors import LimitError

__all__ = ["MAX_LIMIT", "Window", "page", "window"]

MAX_LIMIT = 1000
_NOT_OURS = "cursor is not one this service gave (pass next_cursor as it came)"
T = TypeVar("T")


def _encode(key: tuple[Any, ...]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(key), separators=(",", ":")).encode()).decode().rstrip("=")


def _decode(cursor: str) -> tuple[Any, ...]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        key = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise LimitError(_NOT_OURS) from exc
    if not isinstance(key, list) or not all(isinstance(k, str | int) for k in key):
        raise LimitError(_NOT_OURS)
    return tuple(key)


@dataclass(frozen=True)
class Window:
    """A list asked for: everything (``size`` None), or ``size`` items after the cursor's key ``after``."""

    size: int | None
    after: tuple[Any, ...] | None

    @property
    def fetch(self) -> int | None:
        """How many items to read (None: all): one more than a page, which says whether another follows."""
        return None if self.size is None else self.size + 1

    def created_before(self) -> tuple[datetime, str] | None:
        """The cursor of a newest-first list, ``(created_at, id)``, as a store compares it (UTC-aware);
        ``LimitError`` (422) for a cursor that is not one."""
        if self.after is None:
            return None
        if len(self.after) != 2 or not all(isinstance(part, str) for part in self.after):
            raise LimitError(_NOT_OURS)
        try:
            created = datetime.fromisoformat(self.after[0])
        except ValueError as exc:
            raise LimitError(_NOT_OURS) from exc
        created = created.replace(tzinfo=UTC) if created.tzinfo is None else created.astimezone(UTC)
        return created, self.after[1]

    def answer(self, fetched: Sequence[T], key: Callable[[T], tuple[Any, ...]]) -> tuple[list[T], str | None]:
        """The page of what a store gave for this window (at most :attr:`fetch` items, in the list's
        order) and the next page's cursor: :func:`page`'s answer."""
        if self.size is None:
            return list(fetched), None
        chunk = list(fetched[: self.size])
        return chunk, (_encode(key(chunk[-1])) if len(fetched) > self.size else None)


def window(limit: int | None, cursor: str | None) -> Window:
    """The window of a list request's ``limit`` and ``cursor`` (``LimitError`` for a cursor not ours)."""
    if limit is None and cursor is None:
        return Window(None, None)
    return Window(min(limit or MAX_LIMIT, MAX_LIMIT), None if cursor is None else _decode(cursor))


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
