"""The build threads, shared fairly between workspaces (:class:`FairSlots`), for :class:`BuildOnce`'s builds."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

__all__ = ["FairSlots"]


class FairSlots:
    """The build threads, shared fairly: at most ``total`` builds at once, and a workspace runs more than
    ``per_workspace`` of them only while no other workspace waits (work-conserving: a single tenant
    still uses every thread). A freed slot goes to the first waiter whose workspace is under its share,
    else to the first waiter. So a workspace arriving behind another's slow builds waits at most for one
    of them to end — each bounded by its own ``build_timeout_s``."""

    def __init__(self, total: int, per_workspace: int) -> None:
        self.total = total
        self.per_workspace = per_workspace
        self.running: dict[str, int] = {}
        self._waiting: list[tuple[str, asyncio.Future[None]]] = []

    def waiting(self) -> dict[str, int]:
        """How many builds of each workspace wait for a slot."""
        counts: dict[str, int] = {}
        for workspace, future in self._waiting:
            if not future.done():
                counts[workspace] = counts.get(workspace, 0) + 1
        return counts

    def _may_start(self, workspace: str) -> bool:
        if sum(self.running.values()) >= self.total:
            return False
        others_wait = any(w != workspace for w, _ in self._waiting)
        return self.running.get(workspace, 0) < self.per_workspace or not others_wait

    def _start(self, workspace: str) -> None:
        self.running[workspace] = self.running.get(workspace, 0) + 1

    def _wake(self) -> None:
        while self._waiting and sum(self.running.values()) < self.total:
            under = [i for i, (w, _) in enumerate(self._waiting) if self.running.get(w, 0) < self.per_workspace]
            workspace, future = self._waiting.pop(under[0] if under else 0)
            if future.done():  # its caller gave up waiting
                continue
            self._start(workspace)
            future.set_result(None)

    @contextlib.asynccontextmanager
    async def slot(self, workspace: str) -> AsyncIterator[None]:
        """Hold one build slot for ``workspace`` (waiting for it, fairly)."""
        if not self._waiting and self._may_start(workspace):
            self._start(workspace)
        else:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append((workspace, future))
            self._wake()
            try:
                await future
            except BaseException:
                if future.done() and not future.cancelled():
                    self._release(workspace)  # granted just as it was cancelled
                else:
                    future.cancel()
                    self._waiting = [(w, f) for w, f in self._waiting if f is not future]
                raise
        try:
            yield
        finally:
            self._release(workspace)

    def _release(self, workspace: str) -> None:
        self.running[workspace] -= 1
        if not self.running[workspace]:
            del self.running[workspace]
        self._wake()
