"""``LRU``: a bounded mapping that forgets its least recently used entry first — the one cache of the package.

Contract:

* at most ``maxsize`` entries: :meth:`put` of one more drops the least recently used (and answers it);
* :meth:`get` and :meth:`put` (a new or a replaced value) mark an entry used; :meth:`peek`, ``in``,
  iteration and :meth:`items` do not, so a cache that only ever puts new keys is first in, first out;
* iteration and :meth:`items` go from the least to the most recently used;
* every operation holds one lock: a cache shared with threads (the inspection threads) needs no other.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Generic, TypeVar

__all__ = ["LRU"]

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    """A bounded mapping, least recently used entry forgotten first."""

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError("an LRU holds at least one entry")
        self.maxsize = maxsize
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value of ``key`` (marked used), or None."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def peek(self, key: K) -> V | None:
        """The value of ``key`` without marking it used, or None."""
        with self._lock:
            return self._entries.get(key)

    def touch(self, key: K) -> None:
        """Mark ``key`` used (nothing when it is not held)."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)

    def put(self, key: K, value: V) -> list[tuple[K, V]]:
        """Hold ``value`` under ``key`` (marked used); answer the entries dropped to stay within ``maxsize``."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            dropped = []
            while len(self._entries) > self.maxsize:
                dropped.append(self._entries.popitem(last=False))
            return dropped

    def pop(self, key: K) -> V | None:
        """Forget ``key``; its value, or None."""
        with self._lock:
            return self._entries.pop(key, None)

    def items(self) -> list[tuple[K, V]]:
        """Every entry, least recently used first (a copy: the cache may change meanwhile)."""
        with self._lock:
            return list(self._entries.items())

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def __iter__(self) -> Iterator[K]:
        with self._lock:
            return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)
