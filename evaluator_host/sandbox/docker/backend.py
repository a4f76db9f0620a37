"""The docker backend: each worker is a harness in a hardened, single-tenant container.

Containers are started *unbound* from a runtime image (base image + the pinned
packages) and kept as spares, ``spare_workers`` per (runtime image, memory_mb); a
worker for a new evaluator revision takes a spare and binds it by sending the code
in a ``load`` frame, so no container is created on the request path once a runtime
has been used. A bound container only ever serves its one :class:`WorkerSpec` key
(the pool's rule), and is removed when the pool discards it.

Transport: the container's own stdio, through one ``attach`` connection made before
the container starts: frames go to the harness on stdin and come back on stdout;
stderr (everything user code writes to fd 1/2) is demultiplexed into a capped buffer.
``detachKeys`` is set to five ctrl-A bytes, a sequence that cannot occur in the
framed protocol (JSON never holds raw control bytes and a frame header is four bytes).

Hardening on every container (see docs/security.md): no network, read-only root,
``/tmp`` and ``/dev/shm`` small noexec tmpfs, all capabilities dropped,
no-new-privileges, an unprivileged uid, pids/memory(+swap)/CPU limits, docker's init,
nothing of the host mounted writable (the harness folder is mounted read-only), no
engine socket, logs discarded, and labels + a name prefix for the sweeps at start-up
and shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import docker
from docker.types import LogConfig, Ulimit

from evaluator_host.errors import SandboxError
from evaluator_host.models import EvaluatorSettings
from evaluator_host.sandbox.base import (
    RUNTIMES_DIR,
    SANDBOX_ENV,
    ExitInfo,
    RawOutput,
    WorkerSpec,
    memory_exhausted,
    node_command,
)
from evaluator_host.sandbox.docker.build_box import NODE_PREFIX, SITE
from evaluator_host.sandbox.docker.engine import NAME_PREFIX, Engine, NotFound
from evaluator_host.sandbox.docker.images import DockerRuntimeBuilder
from evaluator_host.sandbox.protocol import encode_frame
from evaluator_host.settings import Settings

__all__ = ["DockerBackend", "DockerWorker"]

log = logging.getLogger(__name__)

_HARNESS = "/sandbox/runtimes/python/harness.py"
_NODE_HARNESS = "/sandbox/runtimes/node/harness.mjs"
_DETACH_KEYS = ",".join(["ctrl-a"] * 5)
_HEADER = 8  # docker's stream multiplexing header: [stream, 0, 0, 0, size (4 bytes, BE)]
_MIB = 1024 * 1024


_SpareKey = tuple[str, int, str]  # (runtime image, memory_mb, harness family: "python" | "node")


class DockerWorker:
    """One container's attach connection, demultiplexed into protocol frames and raw output."""

    def __init__(
        self, backend: DockerBackend, container_id: str, raw: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.container_id = container_id
        self.reader = asyncio.StreamReader(limit=1 << 20)
        self.writer = writer
        self.output_overflow = asyncio.Event()
        self.raw = RawOutput()  # its cap is set when the worker is bound
        self._backend = backend
        self._eof = asyncio.Event()
        self._exit: ExitInfo | None = None
        self._kill_lock = asyncio.Lock()
        self._demux = asyncio.ensure_future(self._pump(raw))

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
                else:
                    self._raw_output(payload)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
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

    def take_raw_output(self) -> str:
        """Raw output written straight to fd 1/2 since the last call (capped)."""
        return self.raw.take()

    async def kill(self) -> ExitInfo:
        """Remove the container; when it had already exited, report how (OOM kill, exit code)."""
        async with self._kill_lock:
            if self._exit is None:
                exited = self._eof.is_set() and not self.output_overflow.is_set()
                if not exited:
                    self._hang_up()
                code, oom = await self._backend.remove(self.container_id, inspect=exited)
                tail = self.raw.tail
                self._exit = ExitInfo(returncode=code, oom_killed=oom or memory_exhausted(tail), raw_output=tail)
                with contextlib.suppress(Exception):
                    self.writer.close()
                self._demux.cancel()
            return self._exit

    async def wait(self) -> ExitInfo:
        """Wait until the container has exited, then remove it."""
        await self._eof.wait()
        return await self.kill()


class DockerBackend:
    """Starts harness containers from runtime images; keeps unbound spares per runtime."""

    name = "docker"

    def __init__(self, settings: Settings, engine: Engine | None = None) -> None:
        self.settings = settings
        self.engine = engine or Engine(settings)
        self.engine.sweep_sync()
        self.builder = DockerRuntimeBuilder(settings, self.engine)
        self.builder.base_id()
        self._spares: dict[_SpareKey, list[DockerWorker]] = {}
        self._filling: dict[_SpareKey, int] = {}
        self._last_used: dict[_SpareKey, float] = {}
        self._workers: set[DockerWorker] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self._fill(
            (self.builder.base_id(), EvaluatorSettings().memory_mb, "python")
        )  # the bare runtime with default limits: ready at once
        self.builder.boxes.keep_spare = True  # a started build box: new package sets skip a container start
        self.builder.boxes.prepare_soon()

    @property
    def isolation(self) -> dict[str, Any]:
        """The measures in force on every container."""
        s = self.settings
        return {
            "summary": (
                "docker containers: network none, read-only root, noexec tmpfs /tmp, cap-drop ALL, "
                f"no-new-privileges, uid {s.container_user}, pids<={s.pids_max}, memory=memory+swap, "
                f"cpus={s.cpus:g}, init"
            ),
            "mode": "docker",
            "network": "none",
            "user": s.container_user,
            "pids_limit": s.pids_max,
            "cpus": s.cpus,
            "base_image": s.base_image,
        }

    # -- containers ----------------------------------------------------------------------
    def _command(self, image: str, memory_mb: int, family: str) -> list[str]:
        if family == "python":
            config = {"site_dirs": [SITE] if image != self.builder.base_id() else [], "reap_strays": True}
            return ["python3", "-I", "-S", _HARNESS, json.dumps(config)]
        # the Node harness speaks on fds 3/4: the shell moves the attach streams there first
        node = node_command("node", _NODE_HARNESS, memory_mb, {"reap_strays": True})
        return ["sh", "-c", 'exec "$@" 3<&0 4>&1 </dev/null >&2', "sh", *node]

    def _create_sync(
        self, client: docker.DockerClient, image: str, memory_mb: int, family: str
    ) -> tuple[str, socket.socket]:
        api = client.api
        s = self.settings
        tmpfs = f"rw,noexec,nosuid,nodev,size={s.tmpfs_mb}m,mode=1777"
        host_config = api.create_host_config(
            network_mode="none",
            read_only=True,
            tmpfs={"/tmp": tmpfs},
            shm_size=s.tmpfs_mb * _MIB,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges:true"],
            pids_limit=s.pids_max,
            mem_limit=memory_mb * _MIB,
            memswap_limit=memory_mb * _MIB,
            nano_cpus=int(s.cpus * 1e9),
            init=True,
            ipc_mode="private",
            binds={str(RUNTIMES_DIR): {"bind": "/sandbox/runtimes", "mode": "ro"}},
            ulimits=[
                Ulimit(name="nofile", soft=256, hard=256),
                Ulimit(name="core", soft=0, hard=0),
                Ulimit(name="fsize", soft=s.tmpfs_mb * _MIB, hard=s.tmpfs_mb * _MIB),
            ],
            log_config=LogConfig(type=LogConfig.types.NONE),
        )
        created = api.create_container(
            image,
            command=self._command(image, memory_mb, family),
            user=s.container_user,
            environment=dict(SANDBOX_ENV),
            working_dir="/tmp",
            hostname="sandbox",
            stdin_open=True,
            labels=self.engine.labels(**{"evaluator-host.image": image[:80]}),
            name=f"{NAME_PREFIX}{self.engine.owner}-{uuid.uuid4().hex[:12]}",
            host_config=host_config,
        )
        cid = str(created["Id"])
        try:
            attached = api.attach_socket(
                cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1, "detachKeys": _DETACH_KEYS}
            )
            raw = getattr(attached, "_sock", attached)
            if not isinstance(raw, socket.socket):
                raise SandboxError("the docker backend needs a local engine (unix socket or plain tcp)")
            sock = socket.socket(raw.family, raw.type, fileno=os.dup(raw.fileno()))
            # Close the SDK's own descriptor now: one left to the garbage collector keeps the
            # connection open after we drop ours, and the engine then blocks writing a flood
            # into it (the container cannot be removed until that descriptor is collected).
            raw.close()
            attached.close()
            api.start(cid)
        except BaseException:
            with contextlib.suppress(Exception):
                api.remove_container(cid, force=True)
            raise
        return cid, sock

    async def _create(self, image: str, memory_mb: int, family: str) -> DockerWorker:
        cid, sock = await self.engine.call(self._create_sync, image, memory_mb, family)
        sock.setblocking(False)
        raw, writer = await asyncio.open_connection(sock=sock, limit=1 << 20)
        worker = DockerWorker(self, cid, raw, writer)
        self._workers.add(worker)
        return worker

    async def remove(self, container_id: str, *, inspect: bool) -> tuple[int | None, bool]:
        """Remove a container; with ``inspect``, first read its exit code and OOM flag."""

        def remove(client: docker.DockerClient) -> tuple[int | None, bool]:
            code: int | None = -9
            oom = False
            try:
                if inspect:
                    with contextlib.suppress(Exception):
                        client.api.wait(container_id, timeout=10)
                    state = client.api.inspect_container(container_id)["State"]
                    code, oom = state.get("ExitCode"), bool(state.get("OOMKilled"))
                client.api.remove_container(container_id, force=True)
            except NotFound:
                pass
            return code, oom

        try:
            return await self.engine.call(remove)
        except SandboxError as exc:  # the engine is down: its containers went with it
            log.warning("could not remove container %s: %s", container_id[:12], exc)
            return None, False
        finally:
            self._workers = {w for w in self._workers if w.container_id != container_id}

    # -- spares --------------------------------------------------------------------------
    def _fill(self, key: _SpareKey) -> None:
        """Start spares for ``key`` in the background up to ``spare_workers``."""
        if self._closed:
            return
        self._last_used[key] = time.monotonic()
        missing = self.settings.spare_workers - len(self._spares.get(key, [])) - self._filling.get(key, 0)
        for _ in range(max(0, missing)):
            self._filling[key] = self._filling.get(key, 0) + 1
            task = asyncio.ensure_future(self._spawn_spare(key))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if self._sweeper is None:
            self._sweeper = asyncio.ensure_future(self._sweep_spares())

    async def _spawn_spare(self, key: _SpareKey) -> None:
        try:
            worker = await self._create(*key)
        except Exception as exc:  # noqa: BLE001 - a spare is an optimization; the request path retries
            log.warning("could not start a spare container: %s", exc)
            return
        finally:
            self._filling[key] -= 1
        if self._closed:
            await worker.kill()
            return
        self._spares.setdefault(key, []).append(worker)

    async def _sweep_spares(self) -> None:
        while not self._closed:
            await asyncio.sleep(min(5.0, self.settings.idle_ttl_s / 2))
            now = time.monotonic()
            for key, spares in list(self._spares.items()):
                idle = now - self._last_used.get(key, 0.0) > self.settings.idle_ttl_s
                for worker in [w for w in spares if idle or not w.alive]:
                    spares.remove(worker)
                    await worker.kill()

    def _take_spare(self, key: _SpareKey) -> DockerWorker | None:
        spares = self._spares.get(key, [])
        while spares:
            worker = spares.pop(0)
            if worker.alive:
                return worker
            task = asyncio.ensure_future(worker.kill())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return None

    # -- the Protocol --------------------------------------------------------------------
    async def start_worker(self, spec: WorkerSpec) -> DockerWorker:
        """Bind a spare container (or a new one) to ``spec`` and refill the spares."""
        if self._closed:
            raise SandboxError("the service is shutting down")
        image = spec.runtime_location or self.builder.base_id()
        family = "python" if spec.language == "python" else "node"
        key = (image, spec.memory_mb, family)
        worker = self._take_spare(key) or await self._create(*key)
        self._fill(key)
        self.builder.touch(spec.runtime_id)
        worker.raw.cap = spec.output_limit
        load: dict[str, Any] = {
            "op": "load",
            "code": Path(spec.code_path).read_text(encoding="utf-8"),
            "interface": spec.interface,
            "output_limit": spec.output_limit,
            "result_limit": spec.result_limit,
        }
        if family == "python":
            load.update(filename="evaluator.py", code_dir="/tmp/.evaluator", entrypoint=spec.entrypoint)
        else:
            packaged = image != self.builder.base_id()
            load.update(spec.loader, language=spec.language, work_dir="/tmp/.evaluator")
            load["node_modules"] = f"{NODE_PREFIX}/node_modules" if packaged else None
        worker.writer.write(encode_frame(load))
        try:
            await worker.writer.drain()
        except (ConnectionError, OSError) as exc:
            info = await worker.kill()
            raise SandboxError(f"the container died before it was bound (exit {info.returncode})") from exc
        return worker

    async def close(self) -> None:
        """Remove every container this service started (and any left from a crash)."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        # Spare starts and removals run in engine threads that a cancel would not stop: a container
        # created after the sweep below would outlive the service. Let them finish (spawns that
        # finish after close remove their own container).
        await asyncio.gather(*self._tasks, return_exceptions=True)
        spares = [w for ws in self._spares.values() for w in ws]
        self._spares.clear()
        await asyncio.gather(*(w.kill() for w in {*spares, *self._workers}), return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.builder.close)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.engine.sweep_sync)
        self.engine.close()
