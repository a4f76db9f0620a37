"""The runtimes resource: build a package set ahead of time, follow its build, see what is cached.

:class:`RuntimeCatalog` answers ``/v1/runtimes`` from the backend's builder
(:class:`~evaluator_host.builds.build_once.BuildOnce`): builds under way (whoever started them —
``POST /v1/runtimes``, an evaluation, a saved evaluator) with their elapsed time and the live end
of their log; builds that failed lately with the installer's message and its "did you mean";
built runtimes with their pins, whole lock, size, last use and build duration (the
``inventory`` of either backend; the runtime of no packages of each family, which no build makes, is ready
with an empty lock). A build under way says where it stands (``progress``: waiting,
resolving, downloading n/N, installing, finishing; from the installer's reports in its live log,
:mod:`evaluator_host.builds.uv`), in the view and, for ``GET /v1/runtimes/{id}``, in
``X-Runtime-Build`` (``building; runtime=…; phase=downloading 3/12; elapsed=4.1s``). A ``POST``
starts the build in the background and answers at once; the build is the same one an evaluation
would run (one per package set, shared).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection
from datetime import UTC, datetime

from evaluator_host.builds import uv
from evaluator_host.builds.build_once import BuildOnce, BuildState, note, tail
from evaluator_host.builds.models import BuildProgress, RuntimeView
from evaluator_host.definitions import languages
from evaluator_host.definitions.models import Packages
from evaluator_host.definitions.packages import normalize_pins
from evaluator_host.errors import BuildError, NotFoundError, PackageSpecError
from evaluator_host.sandbox.base import Builder
from evaluator_host.sandbox.inventory import RuntimeInfo

__all__ = ["RuntimeCatalog"]

_TAIL = 4096
_PROGRESS_BYTES = 1 << 16  # of the live output, for the last progress report


def _when(stamp: float | None) -> datetime | None:
    return datetime.fromtimestamp(stamp, UTC) if stamp else None


def ready_view(info: RuntimeInfo, log_tail: str = "") -> RuntimeView:
    """A built runtime as the API shows it."""
    return RuntimeView(
        id=info.id,
        status="ready",
        language=info.language,
        packages=info.packages,
        lock=info.lock,
        hashes=info.hashes,
        size_bytes=info.size_bytes,
        created_at=_when(info.created_at),
        last_used=_when(info.last_used),
        build_seconds=info.build_seconds,
        in_use=info.in_use,
        log_tail=log_tail,
    )


class RuntimeCatalog:
    """``/v1/runtimes`` over one builder (see the module docstring)."""

    def __init__(self, builder: Builder) -> None:
        self.builder = builder
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._pending: dict[str, BuildState] = {}  # started here, not yet picked up by a build thread

    @property
    def _once(self) -> BuildOnce:
        if not isinstance(self.builder, BuildOnce):
            raise NotFoundError("this backend keeps no runtimes")
        return self.builder

    async def create(self, language: str, packages: Packages, workspace: str | None = None) -> tuple[RuntimeView, bool]:
        """Start building ``packages`` (unless built or under way) for ``workspace``: the runtime and
        whether it is new work."""
        pins = normalize_pins(language, packages)
        if not pins:
            raise PackageSpecError(
                "a runtime needs at least one pinned package (without any, nothing is built)", package=""
            )
        once = self._once
        rid = await asyncio.to_thread(once.runtime_for, language, pins)
        with contextlib.suppress(NotFoundError):
            view = await self.get(rid)
            if view.status != "failed":
                return view, False
        once.failed.pop(rid)
        loop = asyncio.get_running_loop()
        self._pending[rid] = BuildState(language, pins, datetime.now(UTC).timestamp(), loop.time())
        self._tasks[rid] = asyncio.create_task(self._build(rid, language, pins, workspace))
        return await self.get(rid), True

    async def _build(self, rid: str, language: str, pins: dict[str, str], workspace: str | None) -> None:
        try:
            await self.builder.ensure(language, pins, workspace)
        except BuildError:
            pass  # BuildOnce.failed keeps it for GET
        finally:
            self._pending.pop(rid, None)
            self._tasks.pop(rid, None)

    async def get(self, rid: str) -> RuntimeView:
        """One runtime by id (``NotFound`` when no build of it is known)."""
        once = self._once
        state = once.building.get(rid) or self._pending.get(rid)
        found = None
        if state is not None and rid not in once.building:  # waiting for a slot, or just finished
            found = await asyncio.to_thread(once.inventory, rid)
            state = None if found else state
        if state is not None:
            view = self._building_view(rid, state)
            at = view.progress
            where = "" if at is None else f"; phase={at.phase}" + (f" {at.done}/{at.total}" if at.total else "")
            note(f"building; runtime={rid}{where}; elapsed={view.elapsed_s or 0:.1f}s")
            return view
        found = found or await asyncio.to_thread(once.inventory, rid)
        if found:
            return ready_view(found[0], uv.without_progress(await asyncio.to_thread(once.build_log, rid))[-_TAIL:])
        failed = once.failed.peek(rid)
        if failed is not None:
            return self._failed_view(rid, failed)
        bare = self.bare_view(rid)
        if bare is not None:
            return bare
        raise NotFoundError(f"no runtime {rid!r} (GET /v1/runtimes lists them)")

    def bare_view(self, rid: str) -> RuntimeView | None:
        """The runtime of no packages whose id is ``rid`` (a family's interpreter alone: nothing to build, so it is
        in no inventory, yet every job of an evaluator without pins names it), ready with an empty lock; else None."""
        once = self._once
        for name in languages.names():
            if once.runtime_for(name, {}) == rid:
                return RuntimeView(id=rid, status="ready", language=languages.get(name).family.name, packages={})
        return None

    async def list_all(self, only: Collection[str] | None = None) -> list[RuntimeView]:
        """Every runtime (of the ids in ``only``, when given): built, under way and failed lately."""
        once = self._once
        views = {info.id: ready_view(info) for info in await asyncio.to_thread(once.inventory)}
        for rid, failed in once.failed.items():
            views.setdefault(rid, self._failed_view(rid, failed))
        for rid, state in [*self._pending.items(), *once.building.items()]:
            views[rid] = self._building_view(rid, state)
        return [view for rid, view in views.items() if only is None or rid in only]

    def _building_view(self, rid: str, state: BuildState) -> RuntimeView:
        logs = self._once.live_logs(rid)
        started = rid in self._once.building
        reported = uv.progress(tail(logs[:1], _PROGRESS_BYTES)) if started else None
        if reported:
            state.progress = dict(reported)
        # its live log just went (the build ending): the last progress it reported, never back to the first phase
        last = state.progress if started else None
        progress = BuildProgress.model_validate(last) if last else None
        if not started:
            progress = BuildProgress(phase="waiting")
        elif progress is None and languages.get(state.language).family.installer == "pip":
            progress = BuildProgress(phase="resolving")  # (the build sandbox starting: uv resolves first)
        return RuntimeView(
            id=rid,
            status="building",
            language=self._family(state.language),
            packages=state.packages,
            created_at=_when(state.started_at),
            elapsed_s=round(datetime.now(UTC).timestamp() - state.started_at, 1),
            progress=progress,
            log_tail=uv.without_progress(tail(logs, _TAIL * 2))[-_TAIL:],
        )

    def _failed_view(self, rid: str, state: BuildState) -> RuntimeView:
        error = state.error
        detail = None
        if error is not None:
            detail = {
                "type": error.type_name,
                "message": error.message,
                "runtime_id": rid,
                "output": error.output,
                "suggestions": error.suggestions,
            }
        return RuntimeView.model_validate(
            {
                "id": rid,
                "status": "failed",
                "language": self._family(state.language),
                "packages": state.packages,
                "created_at": _when(state.started_at),
                "build_seconds": round(state.seconds, 2) if state.seconds is not None else None,
                "log_tail": error.output[-_TAIL:] if error else "",
                "error": detail,
            }
        )

    @staticmethod
    def _family(language: str) -> str:
        return languages.get(language).family.name

    async def close(self) -> None:
        """Stop waiting for builds started here (a build thread already running finishes on its own)."""
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
