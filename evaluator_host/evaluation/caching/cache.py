"""The result cache: a job's row answered from an earlier identical run instead of running again.

Contract:

* **The key** of a row is the SHA-256 of what decides its answer, and nothing else: the code's hash
  (language and code), the runtime (:func:`runtime_identity`: its id — family, interpreter or base
  image, pins —, the hash of its whole lock and, on docker, its image's id, content-addressed over the
  base image's digest), the evaluator's settings but ``cache`` (timeout, memory, threshold, policy as
  run, entrypoint…), its interface, network and secret names, the service's output/result/stored-result
  limits and this release's version (the normalization of results is the service's), and the normalized
  case: the compact JSON line of the dataset row with the mapping that picks its case (the common
  mapping), or the picked case's compact JSON (any other). Nothing invalidates an entry: a change of
  any of these is another key; entries go only when evicted (bounded per workspace:
  ``result_cache_max_bytes``, least recently used first; ``store/result_cache.py``) or cleared.
* **What is cached** (:meth:`ResultCache.decide`): an evaluator whose ``settings.cache`` is ``false``,
  never; ``true``, always; null (the default), only when :func:`~evaluator_host.definitions.determinism.unsure`
  finds nothing (no network, clock, randomness, environment, file, subprocess, dynamic code or native
  use) and it declares no ``network`` and no ``secrets``. Only rows whose status is ``ok``, ``error`` or
  ``invalid_result`` are stored (a timeout, a memory or output limit, a sandbox error depend on the
  machine, not the case). Model-target jobs are not cached (a generation is not a case known ahead).
* **A job** (``jobs/running/lanes.py``): each chunk's keys are looked up in one query per 500 rows; the hits are
  committed with the rest of the chunk (their stored text with ``"cached":true``, so the results read
  back say ``cached: true``; ``duration_ms`` is the first run's), counted in ``progress.cached``, and
  only the misses run; the misses' results are added to the cache once committed — when they were worth
  it (:meth:`JobCache.worth`): a chunk whose evaluator took less than ``result_cache_min_row_ms`` a row on
  average (the harness's ``duration_ms``) is not added, unless ``settings.cache`` is ``true`` (a row that
  cheap runs again about as fast as it is looked up, and storing every row of it would cost its first run
  several times its own time). A failure of the cache (its table unreachable) is logged and the chunk runs
  as if nothing were cached.
* One-off ``POST /v1/evaluate`` and by-id calls are not cached (docs/api.md says why).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec
from sqlalchemy.engine import Connection

from evaluator_host import __version__
from evaluator_host.definitions.determinism import unsure
from evaluator_host.evaluation.prepared import Prepared
from evaluator_host.sandbox.base import Runtime
from evaluator_host.sandbox.protocol import WireCase
from evaluator_host.settings import Settings
from evaluator_host.store.result_cache import ResultCacheStore

__all__ = ["CACHEABLE", "CACHED_MARK", "Decision", "JobCache", "ResultCache", "runtime_identity"]

log = logging.getLogger(__name__)

CACHEABLE = frozenset({"ok", "error", "invalid_result"})
CACHED_MARK = ',"cached":true}'  # what ends a cached row's stored text instead of its "}"
_encode = msgspec.json.Encoder().encode


def runtime_identity(runtime: Runtime) -> str:
    """What the key takes of a built runtime: its id, the SHA-256 of its whole lock (``Runtime.lock``, as
    the build recorded it) and, on docker, its image's id (content-addressed over the base image).
    The one reading of a runtime's identity here: adapt it when builds record more (hashes, a store)."""
    lock = hashlib.sha256("\n".join(sorted(runtime.lock)).encode()).hexdigest()
    image = runtime.location if runtime.location and runtime.location.startswith("sha256:") else ""
    return f"{runtime.id}|{lock}|{image}"


@dataclass(frozen=True)
class Decision:
    """Whether an evaluator's rows are cached, and why not (or why only because it opted in)."""

    cached: bool
    reasons: list[str] = field(default_factory=list)


class ResultCache:
    """The service's result cache over its store (see the module's contract)."""

    def __init__(self, settings: Settings, store: ResultCacheStore) -> None:
        self.settings = settings
        self.store = store

    @staticmethod
    def decide(prepared: Prepared) -> Decision:
        """Whether ``prepared``'s rows are cached (the module's contract): its setting, else the report."""
        if prepared.settings.cache is False:
            return Decision(False, ["settings.cache is false"])
        reasons = unsure(prepared.language, prepared.code, prepared.capabilities or None)
        if prepared.network:
            reasons.append("network: declares " + ", ".join(prepared.network))
        if prepared.secrets:
            reasons.append("environment: reads secrets " + ", ".join(prepared.secrets))
        return Decision(prepared.settings.cache is True or not reasons, reasons)

    def prefix(self, prepared: Prepared, runtime: Runtime, mapping: object) -> bytes:
        """The part of every key of a job that is the same for all its rows (the module's contract)."""
        settings = prepared.settings.model_dump(exclude={"cache"})
        service = self.settings
        parts = {
            "v": __version__,
            "code": prepared.code_hash,
            "runtime": runtime_identity(runtime),
            "settings": settings,
            "policy": prepared.policy,
            "interface": prepared.interface,
            "entrypoint": prepared.entrypoint,
            "network": list(prepared.network),
            "headers": [list(h) for h in prepared.headers],
            "secrets": list(prepared.secrets),
            "limits": [service.output_limit_bytes, service.result_limit_bytes, service.max_stored_result_bytes],
            "mapping": mapping,
        }
        return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).digest()

    def for_job(self, prepared: Prepared, runtime: Runtime, workspace: str, pick: object) -> JobCache | None:
        """The cache of a job's rows, or None when they are not cached (:meth:`decide`, or the bound is 0).
        ``pick``: the mapping's pick (the common mapping: cases are the dataset's lines), else None."""
        if self.settings.result_cache_max_bytes <= 0 or not self.decide(prepared).cached:
            return None
        min_row_ms = 0.0 if prepared.settings.cache is True else self.settings.result_cache_min_row_ms
        return JobCache(
            self.store,
            workspace,
            self.prefix(prepared, runtime, pick),
            self.settings.result_cache_max_bytes,
            min_row_ms,
        )


class JobCache:
    """One job's keys, lookups and additions (cheap to make: one per job run)."""

    def __init__(
        self, store: ResultCacheStore, workspace: str, prefix: bytes, max_bytes: int, min_row_ms: float = 0.0
    ) -> None:
        self.store = store
        self.workspace = workspace
        self.prefix = prefix
        self.max_bytes = max_bytes
        self.min_row_ms = min_row_ms

    def keys(self, cases: Sequence[WireCase]) -> list[bytes]:
        """Each case's key: the prefix with the case's compact JSON (a dataset line as it is stored)."""
        head = hashlib.sha256(self.prefix)
        keys: list[bytes] = []
        for case in cases:
            data = bytes(case) if isinstance(case, msgspec.Raw) else _encode(case)
            digest = head.copy()
            digest.update(data)
            keys.append(digest.digest())
        return keys

    @property
    def marker(self) -> bytes:
        """The key of the entry that says rows of this prefix were cached (the SHA-256 of the prefix)."""
        return hashlib.sha256(self.prefix).digest()

    def seen(self) -> bool:
        """Whether rows of this prefix were ever cached (its marker is stored): a job whose evaluator, runtime and
        mapping never ran with the cache looks nothing up (a first run costs no lookup at all)."""
        try:
            return bool(self.store.get(self.workspace, [self.marker]))
        except Exception as exc:
            log.warning("result cache lookup failed (%s): the job runs uncached", exc)
            return False

    def lookup(self, keys: Sequence[bytes]) -> dict[int, tuple[str, str]]:
        """The stored rows of the keys found: position → (status, stored text ending in ``"cached":true``);
        {} when the cache cannot be read (logged)."""
        try:
            found = self.store.get(self.workspace, keys)
        except Exception as exc:  # the cache is an optimization: never the reason a chunk fails
            log.warning("result cache lookup failed (%s): the chunk runs uncached", exc)
            return {}
        hits: dict[int, tuple[str, str]] = {}
        for pos, key in enumerate(keys):
            entry = found.get(key)
            if entry is not None:
                hits[pos] = (entry[0], entry[1][:-1] + CACHED_MARK)
        return hits

    def worth(self, millis: Sequence[float]) -> bool:
        """Whether rows that ran in ``millis`` (each row's ``duration_ms``, as its harness measured it) are worth
        adding: their mean is at least ``min_row_ms`` (0: always)."""
        return self.min_row_ms <= 0 or (bool(millis) and sum(millis) >= self.min_row_ms * len(millis))

    def remember(
        self, keys: Sequence[bytes], statuses: Sequence[str], texts: Sequence[str], millis: Sequence[float]
    ) -> None:
        """Add the rows whose status is cacheable, when they are worth it (:meth:`worth` over ``millis``, the rows'
        durations); blocking; a failure is logged, never raised."""
        entries = self._entries(keys, statuses, texts, millis)
        if not entries:
            return
        try:
            self.store.put(self.workspace, entries, self.max_bytes)
        except Exception as exc:
            log.warning("result cache write failed (%s): %d rows not cached", exc, len(entries))

    def remember_in(
        self,
        conn: Connection,
        keys: Sequence[bytes],
        statuses: Sequence[str],
        texts: Sequence[str],
        millis: Sequence[float],
    ) -> None:
        """:meth:`remember` in the caller's transaction ``conn`` (a backfill's page: its scores and these entries
        committed together), in a savepoint of it: a failure of the cache's write is logged, never raised, and
        rolls back only the cache's part. ``conn`` has written already (SQLite's driver opens its transaction at
        the first write: a savepoint before it would be a transaction of its own, committed at its release)."""
        entries = self._entries(keys, statuses, texts, millis)
        if not entries:
            return
        try:
            with conn.begin_nested():
                self.store.put_in(conn, self.workspace, entries, self.max_bytes)
        except Exception as exc:
            log.warning("result cache write failed (%s): %d rows not cached", exc, len(entries))

    def _entries(
        self, keys: Sequence[bytes], statuses: Sequence[str], texts: Sequence[str], millis: Sequence[float]
    ) -> list[tuple[bytes, str, str]]:
        """The entries :meth:`remember` adds (none: not worth it, or none cacheable), the marker last."""
        if not self.worth(millis):
            return []
        entries = [
            (key, status, text)
            for key, status, text in zip(keys, statuses, texts, strict=True)
            if status in CACHEABLE and not text.endswith(CACHED_MARK)
        ]
        if entries:  # the marker: evicted like any entry, then lookups stop, results stay right
            entries.append((self.marker, "marker", "{}"))
        return entries
