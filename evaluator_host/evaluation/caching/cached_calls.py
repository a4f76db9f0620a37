"""A stored evaluator's call answered from the result cache where it can be (an online backfill's, issue 50).

Contract: :func:`evaluate_cached` runs ``cases`` on a bound revision as :meth:`Bound.evaluate` does, but
first looks each case up in the result cache (:mod:`evaluator_host.evaluation.caching.cache`: the same key — code,
runtime, settings, limits, version — with the prefix's mapping ``"online"``, so online entries never
answer a job's rows nor the reverse, and the normalized case's JSON: inputs, outputs, trace). A hit is
the stored :class:`EvaluationResult` with ``cached: true`` (no run); only the misses run (in one batch, as a job's
chunk: :meth:`Bound.evaluate` ``batch``), and their
results are added afterwards when the cache would keep a job's rows (:meth:`ResultCache.for_job`: the
evaluator is deterministic or ``settings.cache`` true; :meth:`JobCache.worth`; cacheable statuses). A cache
that cannot be read or written is logged and the call runs as if nothing were cached. With ``keys`` (a
:class:`CacheKeys`), it says the call's cache prefix and each case's key (nothing when the call is not cached):
a backfill stores them with its scores (:func:`case_scope`, ``store/online/case_hashes.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from evaluator_host.evaluation.caching.cache import ResultCache
from evaluator_host.evaluation.models import Case, EvaluationResult
from evaluator_host.evaluation.path import Bound
from evaluator_host.tenancy.quotas import Charged

__all__ = ["ONLINE_PICK", "CacheKeys", "case_scope", "evaluate_cached"]

log = logging.getLogger(__name__)

ONLINE_PICK = "online"  # the key prefix's mapping part for online cases


@dataclass
class CacheKeys:
    """What a cached call used: its prefix (None: not cached) and each case's key, in order."""

    prefix: bytes | None = None
    keys: list[bytes] = field(default_factory=list)


def case_scope(prefix: bytes, mapping: object, max_spans: int, evaluator_id: str, revision: int | None) -> bytes:
    """The scope of a target's case key (``store/online/case_hashes.py``): the evaluator's cache prefix, the
    rule's mapping and the spans read a trace — with the trace, everything that decides the case and its answer —
    and the evaluator and revision the stored result names (an entry's text is the first run's)."""
    parts = {"mapping": mapping, "max_spans": max_spans, "evaluator": evaluator_id, "revision": revision}
    extra = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(prefix + b"|" + extra).digest()


async def evaluate_cached(
    bound: Bound,
    workspace: str,
    cases: Sequence[Case],
    cache: ResultCache,
    max_bytes: int | None,
    charged: Charged,
    out: CacheKeys | None = None,
) -> list[EvaluationResult]:
    """One result per case, in order: hits from the cache, the misses run (see the module docstring)."""
    job_cache = cache.for_job(bound.prepared, bound.runtime, workspace, ONLINE_PICK)
    if job_cache is None:
        return await bound.evaluate(cases, max_bytes, charged=charged, batch=True)
    dumped = [case.model_dump(mode="json") for case in cases]  # the key's JSON, and what the worker is sent
    keys = job_cache.keys(dumped)
    if out is not None:
        out.prefix, out.keys = job_cache.prefix, keys
    hits: dict[int, EvaluationResult] = {}
    if await asyncio.to_thread(job_cache.seen):
        for pos, (_status, text) in (await asyncio.to_thread(job_cache.lookup, keys)).items():
            try:
                hits[pos] = EvaluationResult.model_validate_json(text)
            except ValueError:  # an entry of another shape: run it again
                log.warning("a result cache entry is not a result: the case runs again")
    misses = [case for pos, case in enumerate(cases) if pos not in hits]
    sent = [dumped[pos] for pos in range(len(cases)) if pos not in hits]
    fresh = await bound.evaluate(misses, max_bytes, charged=charged, batch=True, dumped=sent) if misses else []
    if fresh:
        miss_keys = [key for pos, key in enumerate(keys) if pos not in hits]
        texts = [result.model_dump_json() for result in fresh]
        statuses = [result.status for result in fresh]
        millis = [result.duration_ms for result in fresh]
        await asyncio.to_thread(job_cache.remember, miss_keys, statuses, texts, millis)
    ran = iter(fresh)
    return [hits[pos] if pos in hits else next(ran) for pos in range(len(cases))]
