"""A docker worker: one container's attach connection, demultiplexed into protocol frames (stdout) and the raw
output user code writes (stderr, capped), with its cgroup's counters and the stray reaper seen from the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Protocol

from evaluator_host.sandbox.base import ExitInfo, RawOutput, memory_exhausted
from evaluator_host.sandbox.cgroups import Counter, cgroup_of, memory_cgroup_of, oom_counter
from evaluator_host.sandbox.docker.store_binds import close_lease
from evaluator_host.sandbox.egress.proxy import EgressGate
from evaluator_host.sandbox.protocol import RawSync
from evaluator_host.sandbox.strays import StrayReaper

__all__ = ["DockerWorker", "Remover"]

_HEADER = 8  # docker's stream multiplexing header: [stream, 0, 0, 0, size (4 bytes, BE)]


class Remover(Protocol):
    """What a worker asks of its backend when it ends: remove its container (the docker backend)."""

    async def remove(self, container_id: str, *, inspect: bool) -> tuple[int | None, bool]: ...


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
        pids = cgroup_of(init_pid, "pids", "pids.current")
        self._pids = Counter(pids / "pids.current" if pids else None)
        self._reaper = StrayReaper(init_pid, self._pids)  # docker's --init, seen from the host (a local engine)
        self._oom = oom_counter(memory_cgroup_of(init_pid))
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
        """Remove the container; when it had already exited, report how (OOM kill, exit code)."""
        async with self._kill_lock:
            if self._exit is None:
                exited = self._eof.is_set() and not self.output_overflow.is_set()
                if not exited:
                    self._hang_up()
                # the kernel's count of OOM kills in the container's cgroup: it tells while the container lives
                # (we kill it); once it exited on its own, the engine has removed the cgroup before the attach
                # stream ended and its OOMKilled flag is the evidence (engine.oom_flag_settled waits for it)
                kills = self._oom.read()
                code, oom = await self._backend.remove(self.container_id, inspect=exited)
                self._oom.close()
                self._pids.close()
                tail = self.raw.tail
                oom = oom or kills > 0 or memory_exhausted(tail)
                self._exit = ExitInfo(returncode=code, oom_killed=oom, raw_output=tail)
                if self.egress is not None:
                    await self.egress.close()
                close_lease(self.lease)
                self.lease = None
                with contextlib.suppress(Exception):
                    self.writer.close()
                self._demux.cancel()
            return self._exit

    async def wait(self) -> ExitInfo:
        """Wait until the container has exited, then remove it."""
        await self._eof.wait()
        return await self.kill()
