"""A job chunk's rows answered from the result cache, merged with the rows that ran (``jobs/running/lanes.py``, and a
queued worker host's ``jobs/queue/host.py``).

:func:`look_up` finds a chunk's cached rows (its keys, then one lookup in a thread when the job looks at
all) and says how long that took: a chunk the cache answered is sized by that time and its misses' run.
:func:`merged` puts a chunk back together in its order: the hits (position → status and stored text,
from :meth:`evaluation.cache.JobCache.lookup`) where they were, the fresh rows (a
:class:`~evaluator_host.jobs.running.rows.StoredChunk` of the misses, in order) in the other places; each hit
counts in the aggregate as its stored text says (status, score, passed, outputs, label).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from evaluator_host.evaluation.caching.cache import JobCache
from evaluator_host.jobs.running.rows import StoredChunk, StoredRow
from evaluator_host.sandbox.protocol import WireCase

__all__ = ["Looked", "hit_row", "look_up", "merged"]

_decode = msgspec.json.Decoder(dict[str, Any]).decode


def hit_row(status: str, text: str) -> StoredRow:
    """A cached row as the aggregate counts it."""
    data = _decode(text)
    return StoredRow(
        status, text, data.get("score"), data.get("passed"), data.get("outputs") or None, data.get("label")
    )


def merged(total: int, hits: dict[int, tuple[str, str]], fresh: StoredChunk) -> StoredChunk:
    """The chunk of ``total`` rows: ``hits`` at their positions, ``fresh``'s rows (the others') in order."""
    statuses: list[str] = []
    texts: list[str] = []
    scored = list(fresh.scored)
    at = 0
    for pos in range(total):
        hit = hits.get(pos)
        if hit is None:
            statuses.append(fresh.statuses[at])
            texts.append(fresh.texts[at])
            at += 1
        else:
            statuses.append(hit[0])
            texts.append(hit[1])
            scored.append(hit_row(*hit))
    if at != len(fresh.statuses):
        raise ValueError(f"{len(fresh.statuses)} fresh rows for {total - len(hits)} places")
    return StoredChunk(statuses, texts, scored, fresh.trues, fresh.falses)


@dataclass(slots=True)
class Looked:
    """A chunk's rows as the cache holds them: every row's key, the hits (position → status, stored text) and
    the seconds the keys and the lookup took."""

    keys: list[bytes]
    hits: dict[int, tuple[str, str]]
    seconds: float


async def look_up(cache: JobCache, cases: Sequence[WireCase], look: bool) -> Looked:
    """The keys of ``cases`` and, when ``look`` (rows of this key prefix were ever cached), the ones stored."""
    started = time.perf_counter()
    keys = cache.keys(cases)
    hits = await asyncio.to_thread(cache.lookup, keys) if look else {}
    return Looked(keys, hits, time.perf_counter() - started)
