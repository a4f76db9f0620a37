"""Coalescing: single-case calls to one key that wait for a worker together share one ``run`` frame.

When many clients call one revision at once, the calls queue on its warm workers anyway;
sending each in its own frame costs a write, a wake-up, a read and a stray check per call.
Instead, the first single-case call to a key opens a *group* and a driver task that waits for
a worker; every single-case call to the same key that arrives while the driver waits joins
the group (up to ``limit`` cases); once the driver holds a worker it *seals* the group and runs
all of its cases as one batch. Each call gets its own row's outcome, exactly as if it had run
alone: rows are independent in a batch (a row that ends the worker fails alone, the rest go on
in a fresh one; timeouts are per row). A call is cancelled alone: the driver belongs to no call,
so a client that goes away never cancels the others' rows.

A call that finds no group of its key open and one of its workers idle has nothing to wait for and
nobody to share with: the pool runs it at once in the caller's own task (:meth:`Coalescer.alone`
counts it as a group of one), without a driver task and its two hand-overs. Calls arriving while it
runs find no worker idle and form a group as above. Cancelling such a call ends its row, and the
worker is discarded and counted as a failed lease of its key (as for any call's batch cancelled
mid-run: the service's own callers cancel only when it stops), never another call's row.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from evaluator_host.errors import SandboxError
from evaluator_host.sandbox.base import RawOutcome

__all__ = ["Coalescer", "Group"]


@dataclass
class Group:
    """The cases of the calls coalesced so far, and the future of each call."""

    key: Hashable
    cases: list[dict[str, Any]] = field(default_factory=list)
    futures: list[asyncio.Future[RawOutcome]] = field(default_factory=list)
    sealed: bool = False


Runner = Callable[[Group], Awaitable[list[RawOutcome]]]


class Coalescer:
    """Open groups per key and their driver tasks."""

    def __init__(self) -> None:
        self._open: dict[Hashable, Group] = {}
        self._drivers: set[asyncio.Task[None]] = set()
        self.groups = 0  # groups run so far (a call that ran alone counts as a group of one)
        self.calls = 0  # calls that went through groups

    async def submit(self, key: Hashable, case: dict[str, Any], runner: Runner, limit: int) -> RawOutcome:
        """The outcome of ``case``, run in the open group of ``key`` (a new one, driven by ``runner``,
        when none is open or it has ``limit`` cases). ``runner`` must :meth:`seal` the group once it
        holds a worker and return one outcome per case of the group, in order."""
        group = self._open.get(key)
        if group is None or len(group.cases) >= limit:
            group = Group(key)
            self._open[key] = group
            driver = asyncio.ensure_future(self._drive(group, runner))
            self._drivers.add(driver)
            driver.add_done_callback(self._drivers.discard)
        future: asyncio.Future[RawOutcome] = asyncio.get_running_loop().create_future()
        group.cases.append(case)
        group.futures.append(future)
        return await future

    def open(self, key: Hashable) -> bool:
        """Whether a group of ``key`` is open (a call now could join it)."""
        return key in self._open

    def alone(self) -> None:
        """Count a call the pool ran at once, outside any group (a group of one)."""
        self.groups += 1
        self.calls += 1

    def seal(self, group: Group) -> list[dict[str, Any]]:
        """Close ``group`` to newcomers (later calls open a new group); its cases."""
        group.sealed = True
        if self._open.get(group.key) is group:
            del self._open[group.key]
        return group.cases

    async def _drive(self, group: Group, runner: Runner) -> None:
        failure: BaseException | None = None
        try:
            outcomes = await runner(group)
        except asyncio.CancelledError:
            failure = SandboxError("the service is stopping; retry the call")
            raise
        except Exception as exc:  # every call of the group gets the error its own run would have raised
            failure = exc
        finally:
            self.seal(group)
            self.groups += 1
            self.calls += len(group.futures)
            for index, future in enumerate(group.futures):
                if future.done():  # its call was cancelled
                    continue
                if failure is not None:
                    future.set_exception(failure)
                else:
                    future.set_result(outcomes[index])

    async def close(self) -> None:
        """Stop every driver (their calls get a :class:`SandboxError`)."""
        for driver in list(self._drivers):
            driver.cancel()
        await asyncio.gather(*self._drivers, return_exceptions=True)
