"""Workspaces, and who a request is: the key ring.

Contract:

* A bearer key names exactly one workspace: a stored key (``POST /v1/workspaces/{id}/keys``) its
  own, a key of ``EVALUATOR_HOST_API_KEYS`` the default workspace. The operator key
  (``EVALUATOR_HOST_ADMIN_KEY``) names no workspace: it manages workspaces and keys only.
* Once any key exists (configured, or a live stored key), every ``/v1`` call needs one; with none
  at all the service is open and every call acts in the default workspace, as before workspaces.
* Lookups are cached (key hash -> principal), so the hot path costs a SHA-256 and a dict lookup;
  a revocation removes the key from the cache in the same step, so the very next request with it
  is refused (on another service sharing the database: within :data:`SYNC_S`).
* ``last_used_at`` is written in the background, at most every :data:`_TOUCH_S` seconds per service.
* Services sharing a database: what another service changed — a key revoked or created, a
  workspace created or its quotas and allowlist changed — is read by :meth:`Workspaces.sync`, which
  the service runs every :data:`SYNC_S` seconds (on the service that made the change it is at once).
* ``EVALUATOR_HOST_NETWORK_ALLOW`` is the default workspace's allowlist while the service is open (no
  key at all: the operator has no other way to set one), whatever is stored; on a keyed service it is
  written as the default workspace's list at start-up when the stored list is empty (a starting list:
  the operator's ``PATCH`` replaces it; an emptied list is filled again at the next start while the
  setting names entries). An entry that is not ``host:port`` with a DNS name refuses the start.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from evaluator_host.errors import EgressError
from evaluator_host.settings import Settings
from evaluator_host.store.db import DEFAULT_WORKSPACE, utcnow
from evaluator_host.store.workspaces import ApiKeyRecord, WorkspaceRecord, WorkspaceStore, hash_key
from evaluator_host.tenancy.models import destination

__all__ = ["DEFAULT_PRINCIPAL", "OPERATOR", "SYNC_S", "Principal", "Workspaces"]

_TOUCH_S = 30.0
SYNC_S = 5.0  # how often a service reads what other services sharing its database changed


@dataclass(frozen=True)
class Principal:
    """Who a request is: a workspace (and the stored key that named it, if any), or the operator."""

    workspace_id: str | None
    key_id: str | None = None

    @property
    def operator(self) -> bool:
        """Whether this is the operator key (which names no workspace)."""
        return self.workspace_id is None


OPERATOR = Principal(None)
DEFAULT_PRINCIPAL = Principal(DEFAULT_WORKSPACE)


class Workspaces:
    """Workspaces (cached records: quotas, allowlists) and the key ring (see the module docstring)."""

    def __init__(self, settings: Settings, store: WorkspaceStore) -> None:
        self.store = store
        self._fixed: dict[str, Principal] = {hash_key(k): DEFAULT_PRINCIPAL for k in settings.api_keys}
        if settings.admin_key:
            self._fixed[hash_key(settings.admin_key)] = OPERATOR
        self._keys: dict[str, Principal] = {}  # hash -> principal of a stored, live key
        self._live = store.live_keys()
        self._allow = _setting_allow(settings.network_allow)
        if self._allow and self.auth_required:  # a keyed service: the default workspace's starting list
            default = next((r for r in store.list_all() if r.id == DEFAULT_WORKSPACE), None)
            if default is not None and not default.network_allow:
                store.set(DEFAULT_WORKSPACE, network_allow=list(self._allow))
        self._records: dict[str, WorkspaceRecord] = {r.id: self._open(r) for r in store.list_all()}
        self._used: dict[str, datetime] = {}
        self._touched = time.monotonic()
        self._toucher: asyncio.Future[None] | None = None
        self._noted: set[tuple[str, str]] = set()  # (workspace, runtime) pairs stored by note_runtime
        self.generation = 0  # bumped by every revocation (and workspace change): caches keyed on it drop

    # -- who is asking -------------------------------------------------------------------
    @property
    def auth_required(self) -> bool:
        """Whether a ``/v1`` call needs a key (any key configured or stored)."""
        return bool(self._fixed) or self._live > 0

    def cached(self, token: str) -> Principal | None:
        """The principal of ``token`` when known without the database (the fast path's question)."""
        digest = hash_key(token)
        found = self._fixed.get(digest) or self._keys.get(digest)
        if found is not None and found.key_id is not None:
            self._note_use(found.key_id)
        return found

    async def resolve(self, token: str) -> Principal | None:
        """The principal of ``token``, or None when it is no live key."""
        found = self.cached(token)
        if found is not None:
            return found
        digest = hash_key(token)
        generation = self.generation
        row = await asyncio.to_thread(self.store.lookup, digest)
        if row is None:
            return None
        principal = Principal(row[1], row[0])
        if generation == self.generation:  # no revocation landed while we looked: safe to remember
            self._keys[digest] = principal
        self._note_use(row[0])
        return principal

    def _note_use(self, key_id: str) -> None:
        self._used[key_id] = utcnow()
        if time.monotonic() - self._touched > _TOUCH_S and (self._toucher is None or self._toucher.done()):
            with contextlib.suppress(RuntimeError):  # no running loop (a synchronous caller): next time
                self._toucher = asyncio.ensure_future(self.flush())

    async def flush(self) -> None:
        """Write the pending ``last_used_at`` times."""
        self._touched = time.monotonic()
        used, self._used = self._used, {}
        if used:
            await asyncio.to_thread(self.store.touch, used)

    async def close(self) -> None:
        """Write what is pending."""
        if self._toucher is not None:
            with contextlib.suppress(Exception):
                await self._toucher
        with contextlib.suppress(Exception):
            await self.flush()

    async def sync(self) -> list[WorkspaceRecord]:
        """Catch up with another service's changes (see the module docstring): revoked keys leave the
        cache, workspace records are read again. The records that changed (to be put in force)."""
        generation = self.generation
        records, revoked, live = await asyncio.to_thread(
            lambda: (self.store.list_all(), self.store.revoked(), self.store.live_keys())
        )
        stale = [digest for digest, p in self._keys.items() if p.key_id in revoked]
        for digest in stale:
            del self._keys[digest]
        if generation != self.generation:  # changed here while we read: our copy is the newer one
            return []
        self._live = live
        records = [self._open(r) for r in records]
        changed = [r for r in records if self._records.get(r.id) != r]
        self._records = {r.id: r for r in records}
        if stale or changed:
            self.generation += 1
        return changed

    def _open(self, record: WorkspaceRecord) -> WorkspaceRecord:
        """``record`` as in force: on an open service the default workspace's allowlist is the setting's."""
        if record.id != DEFAULT_WORKSPACE or not self._allow or self.auth_required:
            return record
        return dataclasses.replace(record, network_allow=list(self._allow))

    # -- management (operator) -----------------------------------------------------------
    async def create(self, name: str) -> WorkspaceRecord:
        """A new workspace."""
        record = await asyncio.to_thread(self.store.create, name)
        self._records[record.id] = record
        self.generation += 1
        return record

    def get(self, workspace_id: str) -> WorkspaceRecord:
        """A workspace's cached record (``NotFoundError`` when unknown)."""
        found = self._records.get(workspace_id)
        if found is None:
            return self._open(self.store.get(workspace_id))
        return found

    def list_all(self) -> list[WorkspaceRecord]:
        """Every workspace, oldest first."""
        return sorted(self._records.values(), key=lambda r: (r.created_at, r.id))

    async def update(self, workspace_id: str, **fields: Any) -> WorkspaceRecord:
        """Change a workspace's name, quotas or allowlist (in force for the next call)."""
        record = self._open(await asyncio.to_thread(self.store.set, workspace_id, **fields))
        self._records[record.id] = record
        self.generation += 1
        return record

    async def create_key(self, workspace_id: str, name: str) -> tuple[ApiKeyRecord, str]:
        """A new key of ``workspace_id`` and the key itself (shown once)."""
        record, key = await asyncio.to_thread(self.store.create_key, workspace_id, name)
        self._live += 1
        self.generation += 1
        return record, key

    async def keys(self, workspace_id: str | None = None) -> list[ApiKeyRecord]:
        """Keys' metadata (pending ``last_used_at`` times written first)."""
        await self.flush()
        return await asyncio.to_thread(self.store.keys, workspace_id)

    async def note_runtime(self, workspace_id: str, runtime_id: str) -> None:
        """Remember that ``workspace_id`` asked for a runtime or ran on it (it lists it from then on); once
        per pair and process (a call of an inline definition notes its runtime on every call)."""
        if (workspace_id, runtime_id) in self._noted:
            return
        await asyncio.to_thread(self.store.note_runtime, workspace_id, runtime_id)
        self._noted.add((workspace_id, runtime_id))

    async def runtimes_of(self, workspace_id: str) -> frozenset[str]:
        """The runtimes ``workspace_id`` lists: asked for, or run by its live evaluators."""
        return await asyncio.to_thread(self.store.runtimes_of, workspace_id)

    async def revoke(self, key_id: str) -> ApiKeyRecord:
        """Revoke a key: refused from the next request on."""
        self.generation += 1
        record = await asyncio.to_thread(self.store.revoke, key_id)
        for digest in [d for d, p in self._keys.items() if p.key_id == key_id]:
            del self._keys[digest]
        self.generation += 1  # a lookup that began before the purge must not cache what it read
        self._live = await asyncio.to_thread(self.store.live_keys)
        return record


def _setting_allow(entries: list[str]) -> tuple[str, ...]:
    """``EVALUATOR_HOST_NETWORK_ALLOW``'s entries, normalized and sorted (``EgressError`` naming a bad one)."""
    try:
        return tuple(sorted({destination(entry) for entry in entries}))
    except ValueError as exc:
        raise EgressError(f"EVALUATOR_HOST_NETWORK_ALLOW: {exc}") from None
