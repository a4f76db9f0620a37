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

The parts: ``containers.py`` (the hardened settings and the creation of a container), ``worker.py`` (one
container's connection), ``store_binds.py`` (store mode's folder bind and lease), ``images.py`` (runtime images,
and store folders through the process backend's builder), ``build_box.py`` (where images are built),
``engine.py`` (the engine boundary), ``janitor.py`` (the containers of a service that died).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from evaluator_host.errors import SandboxError
from evaluator_host.sandbox.base import RuntimeKey
from evaluator_host.sandbox.cgroups import OomWatch, memory_cgroup_of
from evaluator_host.sandbox.docker import janitor
from evaluator_host.sandbox.docker.containers import Containers
from evaluator_host.sandbox.docker.engine import (
    Engine,
    NotFound,
    container_state,
    exit_state,
    oom_flag_settled,
    remove_container,
)
from evaluator_host.sandbox.docker.images import DockerRuntimeBuilder
from evaluator_host.sandbox.docker.store_binds import close_lease, lease_folder
from evaluator_host.sandbox.docker.worker import DockerWorker
from evaluator_host.sandbox.egress.proxy import EgressGate, EgressProxy
from evaluator_host.settings import Settings

__all__ = ["DockerBackend", "DockerWorker"]

log = logging.getLogger(__name__)


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
        self.containers = Containers(settings, self.engine, self.builder)
        self._workers: set[DockerWorker] = set()
        self._closed = False
        # network for evaluators that declare it: the gate's socket bound into a container of network "none"
        self.egress: EgressProxy | None = EgressProxy(settings.egress_hosts, ca_bundle=settings.ca_bundle)
        self._first_box: asyncio.TimerHandle | None = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self.builder.boxes.keep_spare = True  # a started build box: new package sets skip a container start
        # the first one once start-up is over (or after the first build: build_box.py)
        self._first_box = loop.call_later(settings.spare_build_box_after_s, self.builder.boxes.prepare_soon)

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

    async def start_worker(self, runtime: RuntimeKey) -> DockerWorker:
        """Start an unbound harness container for ``runtime``."""
        if self._closed:
            raise SandboxError("the service is shutting down")
        lease = lease_folder(self.builder, runtime.location)
        gate = await self.egress.open() if runtime.egress and self.egress is not None else None
        try:
            cid, sock, init_pid, watch = await self.engine.call(self._create, runtime, gate)
        except NotFound as exc:  # the runtime image was removed (pruned) since it was built or found
            if gate is not None:
                await gate.close()
            close_lease(lease)
            self.builder.forget_location(runtime.location)
            raise SandboxError(f"the runtime image {runtime.location} was removed: retry to rebuild it") from exc
        except BaseException:
            if gate is not None:
                await gate.close()
            close_lease(lease)
            raise
        sock.setblocking(False)
        raw, writer = await asyncio.open_connection(sock=sock, limit=1 << 20)
        worker = DockerWorker(self, cid, raw, writer, init_pid, gate, watch)
        worker.lease = lease
        self._workers.add(worker)
        return worker

    def _create(
        self, client: Any, runtime: RuntimeKey, gate: EgressGate | None
    ) -> tuple[str, socket.socket, int | None, OomWatch | None]:
        """A started container (``Containers.create_sync``: its init's pid only when it is the container's as this
        host sees it) and its OOM watch, registered here in the engine's thread (a usage threshold's registration
        waits for an RCU grace period: never on the event loop)."""
        cid, sock, init_pid = self.containers.create_sync(client, runtime, gate)
        return cid, sock, init_pid, OomWatch.register(memory_cgroup_of(init_pid))

    async def remove(
        self, container_id: str, *, inspect: bool, told: Callable[[], Awaitable[bool | None]] | None = None
    ) -> tuple[int | None, bool]:
        """Remove a container; with ``inspect``, first read its exit code and OOM flag (an exit by SIGKILL without
        the flag asks ``told`` — the worker's own evidence, its OOM watch — then waits up to a second for the flag:
        ``engine.oom_flag_settled``). The removal is tried whatever the reads raised; ``(None, False)`` when the
        engine refused it (down: its containers went with it)."""
        code: int | None = -9
        oom = False
        try:
            if inspect:

                async def read() -> tuple[int, bool]:
                    return await self.engine.call(lambda client: container_state(client.api, container_id))

                first = await self.engine.call(lambda client: exit_state(client.api, container_id))
                code, oom = await oom_flag_settled(first, read, told=told)
        except NotFound:  # gone already
            pass
        except SandboxError as exc:
            log.warning("could not read how container %s exited: %s", container_id[:12], exc)
        try:
            await self.engine.call(lambda client: remove_container(client.api, container_id))
        except SandboxError as exc:  # the engine is down: its containers went with it
            log.warning("could not remove container %s: %s", container_id[:12], exc)
            return None, False
        finally:
            self._workers = {w for w in self._workers if w.container_id != container_id}
        return code, oom

    async def close(self) -> None:
        """Remove every container this service started (and any left from a crash)."""
        self._closed = True
        if self._first_box is not None:
            self._first_box.cancel()
        await asyncio.gather(*(w.kill() for w in list(self._workers)), return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.builder.close)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.engine.sweep_sync)
        await asyncio.to_thread(janitor.dismiss, self._janitor)
        self.engine.close()
        if self.egress is not None:
            self.egress.close()
