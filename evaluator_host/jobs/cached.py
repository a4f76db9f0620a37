"""A job chunk's rows answered from the result cache, merged with the rows that ran (``jobs/lanes.py``).

:func:`merged` puts a chunk back together in its order: the hits (position → status and stored text,
from :meth:`evaluation.cache.JobCache.lookup`) where they were, the fresh rows (a
:class:`~evaluator_host.jobs.rows.StoredChunk` of the misses, in order) in the other places; each hit
counts in the aggregate as its stored text says (status, score, passed, outputs, label).
"""

from __future__ import annotations

from typing import Any

import msgspec

from evaluator_host.jobs.rows import StoredChunk, StoredRow

__all__ = ["hit_row", "merged"]

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
