"""A docker worker: one container's attach connection, demultiplexed into protocol frames (stdout) and the raw
output user code writes (stderr, capped), with its cgroup's counters, its OOM watch and the stray reaper seen
from the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from evaluator_host.sandbox.base import ExitInfo, RawOutput, memory_exhausted
from evaluator_host.sandbox.cgroups import Counter, OomWatch, cgroup_of, memory_cgroup_of, oom_counter
from evaluator_host.sandbox.docker.store_binds import close_lease
from evaluator_host.sandbox.egress.proxy import EgressGate
from evaluator_host.sandbox.protocol import RawSync
from evaluator_host.sandbox.strays import StrayReaper
from evaluator_host.shared.idle import Backoff

__all__ = ["DockerWorker", "Remover"]

log = logging.getLogger(__name__)

_HEADER = 8  # docker's stream multiplexing header: [stream, 0, 0, 0, size (4 bytes, BE)]
# How long an exited container's OOM watch is given to tell (its engine removes the cgroup after the exit)
_OOM_WATCH_WAIT_S = 2.0


class Remover(Protocol):
    """What a worker asks of its backend when it ends: remove its container (the docker backend)."""

    async def remove(
        self, container_id: str, *, inspect: bool, told: Callable[[], Awaitable[bool | None]] | None = None
    ) -> tuple[int | None, bool]: ...


class DockerWorker:
    """One container's attach connection, demultiplexed into protocol frames and raw output."""

    def __init__(
        self,
        backend: Remover,
        container_id: str,
        raw: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        init_pid: int | None = None,
        egress: EgressGate | None = None,
        watch: OomWatch | None = None,
    ) -> None:
        self.container_id = container_id
        self.egress = egress
        self.reader = asyncio.StreamReader(limit=1 << 20)
        self.writer = writer
        self.output_overflow = asyncio.Event()
        self.raw = RawOutput()  # its cap is set when the worker is bound
        self._sync = RawSync.attach(self.reader)  # replies wait for the raw output before them (protocol.py)
        self._backend = backend
        self._eof = asyncio.Event()
        self._exit: ExitInfo | None = None
        self._kill_lock = asyncio.Lock()
        self._ending: asyncio.Future[ExitInfo] | None = None
        pids = cgroup_of(init_pid, "pids", "pids.current")
        self._pids = Counter(pids / "pids.current" if pids else None)
        self._reaper = StrayReaper(init_pid, self._pids)  # docker's --init, seen from the host (a local engine)
        self._oom = oom_counter(memory_cgroup_of(init_pid))
        self._watch = watch  # tells an OOM after the engine removed the cgroup (v1, a local engine: backend.py)
        self._demux = asyncio.ensure_future(self._pump(raw))
        self.lease: int | None = None  # the store folder's lease (store mode), released with the container

    @property
    def alive(self) -> bool:
        """Whether the attach stream is still open (the container runs)."""
        return not self._eof.is_set()

    async def _pump(self, raw: asyncio.StreamReader) -> None:
        try:
            while True:
                header = await raw.readexactly(_HEADER)
                size = int.from_bytes(header[4:8], "big")
                payload = await raw.readexactly(size) if size else b""
                if header[0] == 1:
                    self.reader.feed_data(payload)
                elif payload := self._sync.strip(payload):
                    self._raw_output(payload)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            if rest := self._sync.close():
                self._raw_output(rest)
            self.reader.feed_eof()
            self._eof.set()

    def _raw_output(self, chunk: bytes) -> None:
        if self.raw.feed(chunk) and not self.output_overflow.is_set():
            self.output_overflow.set()
            self._hang_up()  # the pool sees EOF and reports output_limit

    def _hang_up(self) -> None:
        """End the attach connection for both sides now (the engine's writes fail instead of blocking)."""
        sock = self.writer.transport.get_extra_info("socket")
        with contextlib.suppress(Exception):
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(Exception):
            self.writer.transport.abort()

    def oom_kills(self) -> int:
        """Processes of the container the kernel killed for memory (its memory cgroup, local engines)."""
        return self._oom.read()

    async def reap_strays(self) -> bool:
        """Kill what user code left running in the container, from the host (a local engine only:
        elsewhere the harness's own reaping is what there is)."""
        return await self._reaper.reap()

    def set_output_limit(self, limit: int) -> None:
        """Cap the raw output kept per evaluation (set when the worker is bound)."""
        self.raw.cap = limit

    def take_raw_output(self) -> str:
        """Raw output written straight to fd 1/2 since the last call (capped)."""
        return self.raw.take()

    def raw_behind(self) -> None:
        """Nothing to wait for: the frames' sync marks order raw output and replies (protocol.py)"""
        return None

    async def kill(self) -> ExitInfo:
        """Remove the container; when it had already exited, report how (OOM kill, exit code). The ending runs
        to its end even when the caller is cancelled (the container removed, the worker's files and eventfds
        closed); a later call gets the same answer (or the same error, logged once)."""
        async with self._kill_lock:
            if self._exit is None:
                if self._ending is None:
                    self._ending = asyncio.ensure_future(self._end())
                    self._ending.add_done_callback(_log_failure)
                self._exit = await asyncio.shield(self._ending)
            return self._exit

    async def _end(self) -> ExitInfo:
        exited = self._eof.is_set() and not self.output_overflow.is_set()
        if not exited:
            self._hang_up()
        # the kernel's count of OOM kills in the container's cgroup: it tells while the container lives (we kill
        # it); once it exited on its own, the engine removes the cgroup, often before the attach stream ends: an
        # exit by SIGKILL then asks the OOM watch (cgroups.OomWatch), then waits for the engine's OOMKilled flag
        # (engine.oom_flag_settled: what there is without a watch — cgroup v2, a remote engine)
        kills = self._oom.read()
        told = self._oom_told if exited and self._watch is not None else None
        try:
            code, oom = await self._backend.remove(self.container_id, inspect=exited, told=told)
        finally:
            self._oom.close()
            self._pids.close()
            self._reaper.close()
            if self._watch is not None:
                self._watch.close()
            close_lease(self.lease)
            self.lease = None
            with contextlib.suppress(Exception):
                self.writer.close()
            self._demux.cancel()
            if self.egress is not None:
                await self.egress.close()
        tail = self.raw.tail
        return ExitInfo(returncode=code, oom_killed=oom or kills > 0 or memory_exhausted(tail), raw_output=tail)

    async def _oom_told(self) -> bool | None:
        """The OOM watch's verdict on a container that exited on its own, once its engine removed the cgroup
        (read every 5, 10, 20 … ms, at most 2 s, on the event loop); None without a verdict."""
        if self._watch is None:
            return None
        backoff, deadline = Backoff(0.005, 0.2), time.monotonic() + _OOM_WATCH_WAIT_S
        while (told := self._watch.verdict()) is None and (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(backoff.after(found=False), left))
        return told

    async def wait(self) -> ExitInfo:
        """Wait until the container has exited, then remove it."""
        await self._eof.wait()
        return await self.kill()


def _log_failure(ending: asyncio.Future[ExitInfo]) -> None:
    """Log a worker's ending that failed (a cancelled caller would not see it)."""
    if not ending.cancelled() and (exc := ending.exception()) is not None:
        log.warning("ending a docker worker failed: %s", exc, exc_info=exc)
