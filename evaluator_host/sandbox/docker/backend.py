"""The docker backend: each worker is a harness in a hardened, single-tenant container.

Containers are started *unbound* from a runtime image (base image + the pinned
packages); the pool keeps them as spares and binds one to an evaluator revision with a
``load`` frame, so no container is created on the request path once a runtime has been
used. A bound container only ever serves its one :class:`WorkerSpec` key (the pool's
rule), and is removed when the pool discards it.

Transport: the container's own stdio, through one ``attach`` connection made before
the container starts: frames go to the harness on stdin and come back on stdout;
stderr (everything user code writes to fd 1/2) is demultiplexed into a capped buffer.
``detachKeys`` is set to five ctrl-A bytes, a sequence that cannot occur in the
framed protocol (JSON never holds raw control bytes and a frame header is four bytes).

Hardening on every container (see docs/security.md): no network, read-only root,
``/tmp`` and ``/dev/shm`` small noexec tmpfs, all capabilities dropped,
no-new-privileges, an unprivileged uid, pids/memory(+swap)/CPU limits, docker's init,
nothing of the host mounted writable (the harness folder is mounted read-only; an egress
worker's gate socket, ``sandbox/egress/proxy.py``, is its only way out), no
engine socket, logs discarded, and labels + a name prefix for the sweeps at start-up
and shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from typing import Any

import docker
from docker.types import LogConfig, Ulimit

from evaluator_host.definitions import languages
from evaluator_host.definitions.languages import RUNTIMES_DIR
from evaluator_host.errors import SandboxError
from evaluator_host.sandbox.base import SANDBOX_ENV, ExitInfo, RawOutput, RuntimeKey, memory_exhausted
from evaluator_host.sandbox.cgroups import Counter, cgroup_of, memory_cgroup_of, oom_counter
from evaluator_host.sandbox.docker import janitor
from evaluator_host.sandbox.docker.engine import NAME_PREFIX, Engine, NotFound
from evaluator_host.sandbox.docker.images import DockerRuntimeBuilder, is_folder
from evaluator_host.sandbox.egress.proxy import (
    IN_SANDBOX_PORT,
    SANDBOX_CA_BUNDLE,
    SANDBOX_CA_DIR,
    SANDBOX_SOCKET,
    EgressGate,
    EgressProxy,
    proxy_env,
)
from evaluator_host.sandbox.protocol import RawSync
from evaluator_host.sandbox.strays import StrayReaper
from evaluator_host.settings import Settings

__all__ = ["DockerBackend", "DockerWorker"]

log = logging.getLogger(__name__)

_DETACH_KEYS = ",".join(["ctrl-a"] * 5)
_HEADER = 8  # docker's stream multiplexing header: [stream, 0, 0, 0, size (4 bytes, BE)]
_MIB = 1024 * 1024


class DockerWorker:
    """One container's attach connection, demultiplexed into protocol frames and raw output."""

    def __init__(
        self,
        backend: DockerBackend,
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

    async def kill(self) -> ExitInfo:
        """Remove the container; when it had already exited, report how (OOM kill, exit code)."""
        async with self._kill_lock:
            if self._exit is None:
                exited = self._eof.is_set() and not self.output_overflow.is_set()
                if not exited:
                    self._hang_up()
                code, oom = await self._backend.remove(self.container_id, inspect=exited)
                self._oom.close()
                self._pids.close()
                tail = self.raw.tail
                self._exit = ExitInfo(returncode=code, oom_killed=oom or memory_exhausted(tail), raw_output=tail)
                if self.egress is not None:
                    await self.egress.close()
                _close_lease(self.lease)
                self.lease = None
                with contextlib.suppress(Exception):
                    self.writer.close()
                self._demux.cancel()
            return self._exit

    async def wait(self) -> ExitInfo:
        """Wait until the container has exited, then remove it."""
        await self._eof.wait()
        return await self.kill()


class DockerBackend:
    """Starts unbound harness containers from runtime images."""

    name = "docker"

    def __init__(self, settings: Settings, engine: Engine | None = None) -> None:
        self.settings = settings
        self.engine = engine or Engine(settings)
        self.swept = self.engine.sweep_sync()  # leftovers of a previous run (counted in the metrics)
        # removes this service's containers when the service ends, even by SIGKILL (janitor.py)
        self._janitor = janitor.spawn(settings, self.engine.owner, self.engine.instance)
        self.builder = DockerRuntimeBuilder(settings, self.engine)
        self.builder.base_id()
        self._workers: set[DockerWorker] = set()
        self._closed = False
        # network for evaluators that declare it: the gate's socket bound into a container of network "none"
        self.egress: EgressProxy | None = EgressProxy(settings.egress_hosts, ca_bundle=settings.ca_bundle)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
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
            "network": "none; evaluators declaring `network` reach only the egress proxy (a unix socket)",
            "user": s.container_user,
            "pids_limit": s.pids_max,
            "cpus": s.cpus,
            "base_image": s.base_image,
        }

    # -- containers ----------------------------------------------------------------------
    def _command(self, runtime: RuntimeKey, image: str) -> list[str]:
        family = languages.family(runtime.family)
        with_packages = image != self.builder.base_id() or is_folder(runtime.location)
        packages = family.image_packages_dir if with_packages else None
        config: dict[str, Any] = {
            "reap_strays": True,
            "sync": True,  # sync marks on the raw output: docker relays it apart from the replies
            "work_dir": "/tmp/.evaluator",
            "vendor_dirs": [languages.VENDOR_DIR] if family.vendor else [],
            # the harness's own memory limit, below the container's: a big allocation raises inside the
            # worker (the Python harness sets RLIMIT_AS from it) and the worker stays; the cgroup is the backstop
            "memory_mb": runtime.memory_mb,
            "address_space_mb": runtime.memory_mb + family.address_space_mb,
            **family.packages_config(packages),
        }
        if runtime.egress:
            config["egress"] = {"socket": SANDBOX_SOCKET, "port": IN_SANDBOX_PORT}
        harness = f"/sandbox/runtimes/{family.name}/{family.harness}"
        argv = family.command_for(family.image_executable, harness, runtime.memory_mb, config)
        if family.channel_fds:  # the shell moves the attach streams to fds 3/4 first
            return ["sh", "-c", 'exec "$@" 3<&0 4>&1 </dev/null >&2', "sh", *argv]
        return argv

    def _create_sync(
        self, client: docker.DockerClient, runtime: RuntimeKey, gate: EgressGate | None = None
    ) -> tuple[str, socket.socket, int | None]:
        folder = runtime.location if is_folder(runtime.location) else None
        image = self.builder.base_id() if folder is not None or not runtime.location else runtime.location
        memory_mb = runtime.memory_mb
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
            binds={
                str(RUNTIMES_DIR): {"bind": "/sandbox/runtimes", "mode": "ro"},
                # a store-mode runtime: its folder of links into the package store, where an image keeps them
                **(
                    {
                        f"{folder}/{languages.family(runtime.family).packages_dir}": {
                            "bind": languages.family(runtime.family).image_packages_dir,
                            "mode": "ro",
                        }
                    }
                    if folder is not None
                    else {}
                ),
                # host packages the harness itself needs (RestrictedPython), read-only like the harness
                **{
                    src: {"bind": f"{languages.VENDOR_DIR}/{name}", "mode": "ro"}
                    for src, name in languages.family(runtime.family).vendor_dirs()
                },
                # the worker's one way out (egress runtimes only): its gate to the egress proxy
                **({str(gate.path): {"bind": SANDBOX_SOCKET, "mode": "ro"}} if gate is not None else {}),
                # and the CAs it trusts (the system's and the proxy's own, for destinations it adds headers to)
                **(
                    {str(gate.proxy.sandbox_bundle): {"bind": SANDBOX_CA_BUNDLE, "mode": "ro"}}
                    if gate is not None
                    else {}
                ),
                **(
                    {str(gate.proxy.sandbox_ca_dir): {"bind": SANDBOX_CA_DIR, "mode": "ro"}}
                    if gate is not None and gate.proxy.sandbox_ca_dir is not None
                    else {}
                ),
            },
            ulimits=[
                Ulimit(name="nofile", soft=256, hard=256),
                Ulimit(name="core", soft=0, hard=0),
                Ulimit(name="fsize", soft=s.tmpfs_mb * _MIB, hard=s.tmpfs_mb * _MIB),
            ],
            log_config=LogConfig(type=LogConfig.types.NONE),
        )
        created = api.create_container(
            image,
            command=self._command(runtime, image),
            user=s.container_user,
            environment={
                **SANDBOX_ENV,
                **(proxy_env(gate.proxy.sandbox_ca_dir is not None) if gate is not None else {}),
            },
            working_dir="/tmp",
            hostname="sandbox",
            # no libnetwork at all (its set-up hook re-executes dockerd: ~45% of a container's start);
            # the container still gets a network namespace of its own, with only a loopback, down
            network_disabled=True,
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
            init_pid = api.inspect_container(cid)["State"].get("Pid") or None
        except BaseException:
            with contextlib.suppress(Exception):
                api.remove_container(cid, force=True)
            raise
        return cid, sock, init_pid

    async def start_worker(self, runtime: RuntimeKey) -> DockerWorker:
        """Start an unbound harness container for ``runtime``."""
        if self._closed:
            raise SandboxError("the service is shutting down")
        lease = self._lease_folder(runtime.location)
        gate = await self.egress.open() if runtime.egress and self.egress is not None else None
        try:
            cid, sock, init_pid = await self.engine.call(self._create_sync, runtime, gate)
        except NotFound as exc:  # the runtime image was removed (pruned) since it was built or found
            if gate is not None:
                await gate.close()
            _close_lease(lease)
            self.builder.forget_location(runtime.location)
            raise SandboxError(f"the runtime image {runtime.location} was removed: retry to rebuild it") from exc
        except BaseException:
            if gate is not None:
                await gate.close()
            _close_lease(lease)
            raise
        sock.setblocking(False)
        raw, writer = await asyncio.open_connection(sock=sock, limit=1 << 20)
        worker = DockerWorker(self, cid, raw, writer, init_pid, gate)
        worker.lease = lease
        self._workers.add(worker)
        return worker

    def _lease_folder(self, location: str | None) -> int | None:
        """A store folder's lease, taken before its container is created and held while it lives (a prune
        then keeps the folder); :class:`SandboxError` when a prune removed it first (docker would bind an
        empty folder in its place). None for an image."""
        if not is_folder(location):
            return None
        lease = self.builder.lease(os.path.basename(str(location)))
        if not os.path.isdir(str(location)):
            _close_lease(lease)
            self.builder.forget_location(location)
            raise SandboxError(f"the runtime {location} was removed: retry to rebuild it")
        return lease

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

    async def close(self) -> None:
        """Remove every container this service started (and any left from a crash)."""
        self._closed = True
        await asyncio.gather(*(w.kill() for w in list(self._workers)), return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.builder.close)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.engine.sweep_sync)
        await asyncio.to_thread(janitor.dismiss, self._janitor)
        self.engine.close()
        if self.egress is not None:
            self.egress.close()


def _close_lease(lease: int | None) -> None:
    if lease is not None:
        with contextlib.suppress(OSError):
            os.close(lease)
