"""What the build cache holds: one :class:`RuntimeInfo` per built runtime, on either backend.

Both builders answer :meth:`inventory` (every runtime they can see) and ``remove(rid)`` (False when
the runtime is in use); this module is what the API and the command line read them through, and
:func:`prune` the one rule for removing: never a runtime in use (process backend: a live worker's
lease; docker: a container of the image), never one used within the horizon.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = ["PruneOutcome", "RuntimeInfo", "prune"]


@dataclass(frozen=True)
class RuntimeInfo:
    """One built runtime: identity, pins, the whole lock, size, when it was made and last used."""

    id: str
    language: str  # the family: JavaScript and TypeScript share Node runtimes
    packages: dict[str, str]
    lock: list[str] = field(default_factory=list)
    size_bytes: int = 0
    created_at: float | None = None
    last_used: float | None = None
    build_seconds: float | None = None
    in_use: bool = False
    location: str = ""  # a directory (process) or an image id (docker)
    hashes: dict[str, list[str]] = field(default_factory=dict)  # lock line -> archive hashes (none: not recorded)


@dataclass(frozen=True)
class PruneOutcome:
    """What a prune did with one runtime: ``removed``, ``in use, kept`` or ``recent, kept``."""

    id: str
    action: str


def prune(
    runtimes: Iterable[RuntimeInfo],
    remove: Callable[[str], bool],
    *,
    unused_days: float,
    only: Iterable[str] = (),
    everything: bool = False,
    now: float | None = None,
) -> list[PruneOutcome]:
    """Remove the runtimes last used (or, never used, created) more than ``unused_days`` ago —
    every one with ``everything``, exactly those named in ``only`` when given — keeping any in use.

    ``remove`` is the builder's: it takes the runtime exclusively and answers False when a worker
    holds it meanwhile, so a runtime that comes into use while the prune runs is kept too.
    """
    horizon = (time.time() if now is None else now) - unused_days * 86400
    named = set(only)
    outcomes = []
    for info in runtimes:
        if named and info.id not in named:
            continue
        recent = max(info.last_used or 0, info.created_at or 0) >= horizon
        if recent and not (everything or named):
            continue
        if info.in_use or not remove(info.id):
            outcomes.append(PruneOutcome(info.id, "in use, kept"))
        else:
            outcomes.append(PruneOutcome(info.id, "removed"))
    return outcomes
