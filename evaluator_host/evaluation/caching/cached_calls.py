"""A stored evaluator's call answered from the result cache where it can be (an online backfill's, issue 50).

Contract: :func:`evaluate_cached` runs ``cases`` on a bound revision as :meth:`Bound.evaluate` does, but
first looks each case up in the result cache (:mod:`evaluator_host.evaluation.caching.cache`: the same key — code,
runtime, settings, limits, version — with the prefix's mapping ``"online"``, so online entries never
answer a job's rows nor the reverse, and the normalized case's JSON: inputs, outputs, trace). A hit is
the stored :class:`EvaluationResult` with ``cached: true`` (no run); only the misses run (in one batch, as a job's
chunk: :meth:`Bound.evaluate` ``batch``), and their results are added afterwards (or, ``CacheKeys.defer``,
handed to the caller to add) when the cache would keep a job's rows (:meth:`ResultCache.for_job`: the evaluator
is deterministic or ``settings.cache`` true; :meth:`JobCache.worth`; cacheable statuses). A cache
that cannot be read or written is logged and the call runs as if nothing were cached. With ``keys`` (a
:class:`CacheKeys`), it says the call's cache prefix and each case's key (nothing when the call is not cached):
a backfill stores them with its scores (:func:`case_scope`, ``store/online/case_hashes.py``). Each case is
encoded once (msgspec, as :meth:`JobCache.keys` encodes it): its key is taken of those bytes and the misses are
sent to the worker as them (a job chunk's strict frame, :class:`~evaluator_host.sandbox.protocol.JobCases`) —
the same JSON text the key hashed, not a second encoding. ``CacheKeys.native`` (the caller's word that the cases'
fields are JSON data as they are — a backfill's, built of a stored trace's JSON): each case's dump is its fields
as they are, not walked by ``model_dump(mode="json")`` (which gives the same dict for such data).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from sqlalchemy.engine import Connection

from evaluator_host.evaluation.caching.cache import JobCache, ResultCache
from evaluator_host.evaluation.models import Case, EvaluationResult
from evaluator_host.evaluation.path import Bound
from evaluator_host.sandbox.protocol import JobCases
from evaluator_host.tenancy.quotas import Charged

__all__ = ["ONLINE_PICK", "CacheKeys", "case_scope", "evaluate_cached", "native_dump"]

log = logging.getLogger(__name__)

ONLINE_PICK = "online"  # the key prefix's mapping part for online cases
_encode = msgspec.json.Encoder().encode  # as JobCache.keys encodes a case
_STRICT = JobCases()  # the cases travel as their encoded JSON (encode_frame strict)


@dataclass
class CacheKeys:
    """What a cached call used: its prefix (None: not cached) and each case's key, in order. ``native`` (set by the
    caller): the cases' fields are JSON data as they are (see the module docstring); ``defer`` (set by the caller):
    the misses' results are not added to the cache by the call, but by ``pending(conn)`` — the caller's
    transaction (a backfill's page, ``store/online/backfill_pages.commit_page``: one commit, no second writer)."""

    prefix: bytes | None = None
    keys: list[bytes] = field(default_factory=list)
    native: bool = False
    defer: bool = False  # set by the caller: the misses' additions are left in ``pending``, not written
    pending: Callable[[Connection], None] | None = None  # writes them in the caller's transaction


def _remember_in(
    job_cache: JobCache,
    keys: Sequence[bytes],
    statuses: Sequence[str],
    texts: Sequence[str],
    millis: Sequence[float],
    conn: Connection,
) -> None:
    job_cache.remember_in(conn, keys, statuses, texts, millis)


def native_dump(case: Case) -> dict[str, Any]:
    """``case.model_dump(mode="json")`` of a case whose fields are JSON data as they are (str keys; str, int,
    float, bool, None, lists and dicts of them): the same dict, its values not copied."""
    return {"inputs": case.inputs, "outputs": case.outputs, "trace": case.trace, "app_params": case.app_params}


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
    native = out is not None and out.native
    dumped = [native_dump(case) if native else case.model_dump(mode="json") for case in cases]
    wire = [msgspec.Raw(_encode(case)) for case in dumped]  # the key's JSON, and what the worker is sent
    keys = job_cache.keys(wire)
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
    raw = [wire[pos] for pos in range(len(cases)) if pos not in hits]
    fresh = (
        await bound.evaluate(misses, max_bytes, charged=charged, batch=True, dumped=sent, wire=(raw, _STRICT))
        if misses
        else []
    )
    if fresh:
        miss_keys = [key for pos, key in enumerate(keys) if pos not in hits]
        texts = [result.model_dump_json() for result in fresh]
        statuses = [result.status for result in fresh]
        millis = [result.duration_ms for result in fresh]
        if out is not None and out.defer:
            out.pending = functools.partial(_remember_in, job_cache, miss_keys, statuses, texts, millis)
        else:
            await asyncio.to_thread(job_cache.remember, miss_keys, statuses, texts, millis)
    ran = iter(fresh)
    return [hits[pos] if pos in hits else next(ran) for pos in range(len(cases))]
