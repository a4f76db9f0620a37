"""Coalescing: single-case calls to one key that wait for a worker together share one ``run`` frame.

When many clients call one revision at once, the calls queue on its warm workers anyway;
sending each in its own frame costs a write, a wake-up, a read and a stray check per call.
Instead, the first single-case call to a key opens a *group* and takes a worker for it (its
*leader*); every single-case call to the same key that arrives while the leader waits for the
worker, or in the same turn of the event loop as it got one, joins the group (up to ``limit``
cases); then the group is *sealed* and all of its cases run as one batch. Each call gets its own
row's outcome, exactly as if it had run alone: rows are independent in a batch (a row that ends the
worker fails alone, the rest go on in a fresh one; timeouts are per row).

A call is cancelled alone: a group of several calls runs in a driver task that belongs to no call,
so a client that goes away never cancels the others' rows (a leader cancelled while it waits hands
its group to a driver). A leader left alone runs its own row in its own task — the common case of
a key in steady use by one client at a time, which then pays no driver task and no hand-over of
its outcome between tasks; cancelled during its row, it gives up its worker as any cancelled batch
does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from evaluator_host.errors import SandboxError
from evaluator_host.sandbox.base import RawOutcome

__all__ = ["Acquire", "Coalescer", "Group", "RunRows"]

_STOPPING = "the service is stopping; retry the call"


@dataclass
class Group:
    """The cases of the calls coalesced so far, and the future of each call."""

    key: Hashable
    cases: list[dict[str, Any]] = field(default_factory=list)
    futures: list[asyncio.Future[RawOutcome]] = field(default_factory=list)
    sealed: bool = False


Acquire = Callable[[], Awaitable[Any]]
"""A leased worker for the key's rows (what ``RunRows`` runs them on, and releases)."""
RunRows = Callable[[list[dict[str, Any]], Any], Awaitable[list[RawOutcome]]]
"""Run the cases on the worker ``Acquire`` gave (releasing it); one outcome per case, in order."""


class Coalescer:
    """Open groups per key, their driver tasks and their leaders running alone."""

    def __init__(self) -> None:
        self._open: dict[Hashable, Group] = {}
        self._drivers: set[asyncio.Task[None]] = set()
        self._alone: set[asyncio.Task[Any]] = set()  # leaders running their own row
        self._closing = False
        self.groups = 0  # groups run so far (a call that ran alone counts as a group of one)
        self.calls = 0  # calls that went through groups

    async def submit(
        self, key: Hashable, case: dict[str, Any], acquire: Acquire, run: RunRows, limit: int
    ) -> RawOutcome:
        """The outcome of ``case``, run in the open group of ``key`` (a new one, led by this call, when none is
        open or it has ``limit`` cases): ``acquire`` gives the group's worker, ``run`` runs the sealed group's
        cases on it."""
        future: asyncio.Future[RawOutcome] = asyncio.get_running_loop().create_future()
        group = self._open.get(key)
        if group is not None and len(group.cases) < limit:
            group.cases.append(case)
            group.futures.append(future)
            return await future
        group = Group(key, [case], [future])
        self._open[key] = group
        return await self._lead(group, acquire, run)

    def seal(self, group: Group) -> list[dict[str, Any]]:
        """Close ``group`` to newcomers (later calls open a new group); its cases."""
        group.sealed = True
        if self._open.get(group.key) is group:
            del self._open[group.key]
        return group.cases

    async def _lead(self, group: Group, acquire: Acquire, run: RunRows) -> RawOutcome:
        """Take the group's worker in the leader's own task, let the calls of this turn of the loop join, then
        run the leader's row alone here, or the whole group in a driver (see the module docstring)."""
        mine = group.futures[0]
        try:
            slot = await acquire()
        except asyncio.CancelledError:
            mine.cancel()
            self._hand_over(group, acquire, run, None)  # the others still want a worker
            raise
        except Exception as exc:  # every call of the group gets the error its own run would have raised
            mine.cancel()  # (the leader raises it itself)
            self._finish(group, None, exc)
            raise
        try:
            await asyncio.sleep(0)  # calls arriving in this turn of the loop join the group
        except asyncio.CancelledError:
            mine.cancel()
            self._hand_over(group, acquire, run, slot)
            raise
        if len(group.cases) > 1:
            self._hand_over(group, acquire, run, slot)
            return await mine
        task = asyncio.current_task()
        assert task is not None
        self._alone.add(task)
        try:
            outcomes = await run(self.seal(group), slot)
        except asyncio.CancelledError:
            if not self._closing:
                raise
            task.uncancel()
            raise SandboxError(_STOPPING) from None
        finally:
            self._alone.discard(task)
            self.groups += 1
            self.calls += 1
        return outcomes[0]

    def _hand_over(self, group: Group, acquire: Acquire, run: RunRows, slot: Any) -> None:
        """Run ``group`` in a driver task (with ``slot``, the worker the leader took, or one it takes); the
        leader, when cancelled, is left out of the answers (its row still runs, as any cancelled call's)."""
        driver = asyncio.ensure_future(self._drive(group, acquire, run, slot))
        self._drivers.add(driver)
        driver.add_done_callback(self._drivers.discard)

    async def _drive(self, group: Group, acquire: Acquire, run: RunRows, slot: Any) -> None:
        failure: BaseException | None = None
        outcomes: list[RawOutcome] = []
        try:
            if slot is None:
                slot = await acquire()
            outcomes = await run(self.seal(group), slot)
        except asyncio.CancelledError:
            failure = SandboxError(_STOPPING)
            raise
        except Exception as exc:  # every call of the group gets the error its own run would have raised
            failure = exc
        finally:
            self._finish(group, outcomes, failure)

    def _finish(self, group: Group, outcomes: list[RawOutcome] | None, failure: BaseException | None) -> None:
        self.seal(group)
        self.groups += 1
        self.calls += len(group.futures)
        for index, future in enumerate(group.futures):
            if future.done():  # its call was cancelled (or is the leader, which raises itself)
                continue
            if failure is not None:
                future.set_exception(failure)
            elif outcomes is not None:
                future.set_result(outcomes[index])

    async def close(self) -> None:
        """Stop every driver and every leader running alone (their calls get a :class:`SandboxError`)."""
        self._closing = True
        await asyncio.sleep(0)  # a driver created in this turn starts first: it releases the worker it holds
        for task in [*self._drivers, *self._alone]:
            task.cancel()
        await asyncio.gather(*self._drivers, return_exceptions=True)
