"""evaluator_host.shared.lru: the one bounded cache of the package."""

from __future__ import annotations

import pytest

from evaluator_host.shared.lru import LRU


def test_the_least_recently_used_entry_goes_first() -> None:
    cache: LRU[str, int] = LRU(2)
    assert cache.put("a", 1) == []
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" used: "b" is now the oldest
    assert cache.put("c", 3) == [("b", 2)]
    assert list(cache) == ["a", "c"] and len(cache) == 2
    assert "b" not in cache and cache.get("b") is None


def test_peek_and_contains_do_not_mark_used() -> None:
    cache: LRU[str, int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.peek("a") == 1 and "a" in cache
    assert cache.put("c", 3) == [("a", 1)]  # first in, first out when nothing is marked used
    cache.touch("b")
    assert cache.put("d", 4) == [("c", 3)]
    assert cache.items() == [("b", 2), ("d", 4)]


def test_replacing_a_value_marks_it_used_and_pop_forgets() -> None:
    cache: LRU[str, int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    assert cache.items() == [("b", 2), ("a", 10)]
    assert cache.pop("b") == 2 and cache.pop("b") is None
    assert len(cache) == 1


def test_an_lru_holds_at_least_one_entry() -> None:
    with pytest.raises(ValueError):
        LRU[str, int](0)
