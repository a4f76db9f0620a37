"""The docker backend's containers: the hardened settings every worker container gets and its creation, attached
before it starts (docs/security.md; :mod:`evaluator_host.sandbox.docker.backend` says why each measure is there).
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from pathlib import Path
from typing import Any

import docker
from docker.types import LogConfig, Ulimit

from evaluator_host.definitions import languages
from evaluator_host.definitions.languages import RUNTIMES_DIR
from evaluator_host.errors import SandboxError
from evaluator_host.sandbox.base import SANDBOX_ENV, RuntimeKey
from evaluator_host.sandbox.docker.engine import NAME_PREFIX, Engine, remove_container
from evaluator_host.sandbox.docker.images import DockerRuntimeBuilder
from evaluator_host.sandbox.docker.store_binds import folder_binds, is_folder
from evaluator_host.sandbox.egress.proxy import (
    IN_SANDBOX_PORT,
    SANDBOX_CA_BUNDLE,
    SANDBOX_CA_DIR,
    SANDBOX_SOCKET,
    EgressGate,
    proxy_env,
)
from evaluator_host.settings import Settings

__all__ = ["Containers"]

_DETACH_KEYS = ",".join(["ctrl-a"] * 5)
_MIB = 1024 * 1024


class Containers:
    """Creates the worker containers of one docker backend."""

    def __init__(self, settings: Settings, engine: Engine, builder: DockerRuntimeBuilder) -> None:
        self.settings = settings
        self.engine = engine
        self.builder = builder

    def command(self, runtime: RuntimeKey, image: str) -> list[str]:
        """The harness's argv in a container of ``image`` (the family's command from the registry)."""
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

    def create_sync(
        self, client: docker.DockerClient, runtime: RuntimeKey, gate: EgressGate | None = None
    ) -> tuple[str, socket.socket, int | None]:
        """Create and start one hardened container for ``runtime`` (its gate bound in for egress), attached before
        it starts: its id, the attach socket and its init's pid as this host sees it (None when the engine does not
        say, or when that pid here is not the container's: a remote engine's, or an engine outside this service's
        pid namespace — the stray reaper and the cgroup counters must never act on another process)."""
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
                **folder_binds(runtime, folder),
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
            command=self.command(runtime, image),
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
            init_pid = _seen_here(api.inspect_container(cid)["State"].get("Pid") or None, cid)
        except BaseException:
            with contextlib.suppress(Exception):
                remove_container(api, cid)
            raise
        return cid, sock, init_pid


def _seen_here(pid: int | None, container_id: str) -> int | None:
    """``pid`` when this host's process of that pid belongs to the container (its cgroup path names it), else None."""
    if pid is None:
        return None
    try:
        return pid if container_id in Path(f"/proc/{pid}/cgroup").read_text() else None
    except OSError:
        return None
