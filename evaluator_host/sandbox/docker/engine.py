"""The Docker engine boundary: the SDK client, labels, and error translation.

The docker SDK is blocking, so every call goes through :meth:`Engine.call`, which
runs it in a worker thread and translates engine failures in one place:

* the engine cannot be reached → :class:`BackendUnavailable` (HTTP 503 + Retry-After);
  the client reconnects on the next call, so the service recovers when the engine does;
* any other engine error → :class:`SandboxError` (HTTP 503).

Only the modules of ``evaluator_host/sandbox/docker/`` import the SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import docker
import docker.errors
import requests.exceptions

from evaluator_host.errors import BackendUnavailable, EvaluatorHostError, SandboxError
from evaluator_host.sandbox.docker.labels import INSTANCE, MANAGED, OWNER
from evaluator_host.settings import Settings
from evaluator_host.shared.idle import Backoff

__all__ = [
    "INSTANCE",
    "MANAGED",
    "OWNER",
    "Engine",
    "NotFound",
    "container_running",
    "container_state",
    "exec_exit_code",
    "exit_state",
    "oom_flag_settled",
    "remove_container",
    "unusable_reason",
]

log = logging.getLogger(__name__)

NAME_PREFIX = "evh-"
NotFound = docker.errors.NotFound
T = TypeVar("T")

_UNREACHABLE = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    ConnectionError,
    FileNotFoundError,
)


def _translate(exc: BaseException) -> EvaluatorHostError:
    if isinstance(exc, _UNREACHABLE) or (
        isinstance(exc, docker.errors.DockerException) and not isinstance(exc, docker.errors.APIError)
    ):
        return BackendUnavailable(f"the Docker engine is not reachable: {exc}", retry_after_s=5)
    return SandboxError(f"the Docker engine refused: {exc}")


_SIGKILLED = 128 + 9  # a container's exit code when its init died of SIGKILL (the OOM killer's, or anyone's)
# How long an exit by SIGKILL is given for the engine to flag it OOM-killed, and the first pause between reads
_OOM_FLAG_WAIT_S = 1.0
_OOM_FLAG_FIRST_S = 0.02


def exit_state(api: docker.APIClient, container_id: str) -> tuple[int, bool]:
    """A container's exit code and the engine's ``OOMKilled`` flag, once it has exited (waited for, at most
    10 s); ``NotFound`` when it is gone. The flag can still be on its way: :func:`oom_flag_settled`."""
    with contextlib.suppress(Exception):
        api.wait(container_id, timeout=10)
    return container_state(api, container_id)


def container_state(api: docker.APIClient, container_id: str) -> tuple[int, bool]:
    """One read of a container's exit code and ``OOMKilled`` flag; ``NotFound`` when it is gone."""
    state = api.inspect_container(container_id)["State"]
    return int(state.get("ExitCode") or 0), bool(state.get("OOMKilled"))


async def oom_flag_settled(
    first: tuple[int, bool],
    read: Callable[[], Awaitable[tuple[int, bool]]],
    *,
    told: Callable[[], Awaitable[bool | None]] | None = None,
    wait_s: float = _OOM_FLAG_WAIT_S,
) -> tuple[int, bool]:
    """An exited container's ``(exit code, OOM-killed)``, from its ``first`` read. An exit by SIGKILL without the
    engine's flag first asks the service's own evidence, ``told`` (the worker's OOM watch: True ends it as an OOM
    kill); otherwise the flag is read again (``read``) while it is missing — for at most ``wait_s`` seconds, pausing
    20, 40, 80 … ms between reads (about six reads in the second), on the event loop: no engine thread is held.

    The engine's flag is the only evidence the engine leaves once a container exited on its own: its memory cgroup
    (and the kernel's ``oom_kill`` count in it) is removed before the attach stream ends. The engine sets the flag
    from an event it handles on its own schedule, so on a loaded host it can be read false a moment after the exit
    (a memory bomb then answered "error", exit 137: 1 time in 120 with both cores busy), or never (2 of 600 with
    this wait, docs/benchmarks.md, stop 77) — hence ``told`` first. Only exits by SIGKILL without the flag wait —
    the OOM killer's, and user code killing itself — and at most ``wait_s``. A read that finds the container gone
    (``NotFound``) ends the wait with what was read before."""
    code, oom = first
    if code == _SIGKILLED and not oom and told is not None and await told():
        return code, True
    backoff, deadline = Backoff(_OOM_FLAG_FIRST_S, wait_s), time.monotonic() + wait_s
    while code == _SIGKILLED and not oom and (left := deadline - time.monotonic()) > 0:
        await asyncio.sleep(min(backoff.after(found=False), left))
        try:
            code, oom = await read()
        except NotFound:
            break
    return code, oom


_EXEC_EXIT_WAIT_S = 5.0  # how long an exec whose stream ended may still read "running"
_EXEC_FIRST_S = 0.02  # the first pause between reads of an exec or its container (then doubling, capped)
_STOPPING_WAIT_S = 1.0  # how long a failed command's container is watched for a stop under way


def exec_exit_code(api: docker.APIClient, exec_id: str, container_id: str, *, wait_s: float = _EXEC_EXIT_WAIT_S) -> int:
    """The exit code of an exec whose output stream has ended (blocking).

    The engine can still report the exec running, without a code, a moment after its stream ended: it is read
    again, pausing 20, 40, 80 … ms, for at most ``wait_s`` seconds (sooner ended when the container is found
    stopped). A code other than 0 is the command's only while its container runs on: a container removed or
    killed (an operator's ``docker rm``, a sweep of the data dir's containers) ends its execs before the engine
    marks the container itself stopped, so a failed command's container is watched for a further second; when it
    stopped or went, :class:`SandboxError` says so — the command did not fail, its container was taken away (a
    build box removed mid-install once read as the packages' failure)."""
    deadline = time.monotonic() + wait_s
    backoff = Backoff(_EXEC_FIRST_S, 1.0)
    code: int | None = None
    while True:
        try:
            state = api.exec_inspect(exec_id)
        except NotFound:
            break
        if not state.get("Running") and state.get("ExitCode") is not None:
            code = int(state["ExitCode"])
            break
        if (left := deadline - time.monotonic()) <= 0 or not container_running(api, container_id):
            break
        time.sleep(min(backoff.after(found=False), left))
    if code == 0:
        return 0
    stopping, backoff = time.monotonic() + (_STOPPING_WAIT_S if code is not None else 0.0), Backoff(_EXEC_FIRST_S, 0.5)
    while container_running(api, container_id):
        if (left := stopping - time.monotonic()) <= 0:
            return 1 if code is None else code
        time.sleep(min(backoff.after(found=False), left))
    raise SandboxError(f"container {container_id[:12]} stopped under a command run in it (removed or killed)")


def container_running(api: docker.APIClient, container_id: str) -> bool:
    """Whether the container runs now (False when the engine no longer knows it)."""
    try:
        return bool(api.inspect_container(container_id)["State"]["Running"])
    except NotFound:
        return False


_REMOVING = ("already in progress", "marked for removal")  # the engine's 409s for a removal under way
REMOVAL_SETTLE_S = 30.0


def remove_container(api: docker.APIClient, container_id: str, *, settle_s: float = REMOVAL_SETTLE_S) -> None:
    """Force-remove a container; afterwards it is gone, whoever removed it.

    Removers race by design: a dead service's janitor, the next service's start-up sweep on the same data dir,
    an operator's ``docker rm``. A container already gone (404) counts as removed; one whose removal another
    remover has under way (the engine's 409 "removal ... already in progress" / "dead or marked for removal")
    is waited for, retrying the removal, until the engine no longer knows it — at most ``settle_s`` seconds,
    after which a warning is logged and the call returns (a container stuck in the engine's own removal is not
    a reason to fail a sweep or a service's start). Any other engine error is raised."""
    deadline = time.monotonic() + settle_s
    while True:
        try:
            api.remove_container(container_id, force=True)
            return
        except NotFound:
            return
        except docker.errors.APIError as exc:
            if exc.status_code != 409 or not any(m in str(exc) for m in _REMOVING):
                raise
            if time.monotonic() >= deadline:
                log.warning("container %s is still being removed after %.0f s", container_id[:12], settle_s)
                return
        time.sleep(0.1)


def _connect(settings: Settings, timeout_s: float) -> docker.DockerClient:
    """A client for ``docker_host``, or for DOCKER_HOST / the local socket."""
    if settings.docker_host:
        return docker.DockerClient(base_url=settings.docker_host, timeout=timeout_s)
    return docker.from_env(timeout=timeout_s)


class Engine:
    """A lazily connected docker client shared by the backend and the image builder."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.owner = hashlib.sha256(str(settings.data_dir.resolve()).encode()).hexdigest()[:12]
        self.instance = uuid.uuid4().hex[:12]  # this process's: another service on the data dir has its own
        self._client: docker.DockerClient | None = None

    def client(self) -> docker.DockerClient:
        """The SDK client (created on first use; ``BackendUnavailable`` if the engine is down)."""
        if self._client is None:
            try:
                self._client = _connect(self.settings, 120)
            except Exception as exc:
                raise _translate(exc) from exc
        return self._client

    def run_sync(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call ``fn(client, *args, **kwargs)`` here (in a thread), translating engine errors."""
        try:
            return fn(self.client(), *args, **kwargs)
        except (EvaluatorHostError, NotFound):
            raise
        except Exception as exc:  # the boundary: every engine failure becomes one of ours
            raise _translate(exc) from exc

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """:meth:`run_sync` in a worker thread, so the event loop never blocks on the engine."""
        return await asyncio.to_thread(self.run_sync, fn, *args, **kwargs)

    def labels(self, **extra: str) -> dict[str, str]:
        """Labels for a container of this service: the operator's ``container_labels``, then this service's
        own (``evaluator-host.*``: an operator's label of the same name is replaced, never kept)."""
        return {**self.settings.container_labels, MANAGED: "1", OWNER: self.owner, INSTANCE: self.instance, **extra}

    def sweep_sync(self) -> int:
        """Remove every container this service (this data dir) left behind; return the count."""

        def sweep(client: docker.DockerClient) -> int:
            labels = [f"{MANAGED}=1", f"{OWNER}={self.owner}"]
            # sparse: the listing's own data, no inspect a container gone in between would fail with a 404
            found = client.containers.list(all=True, sparse=True, filters={"label": labels})
            for container in found:
                remove_container(client.api, str(container.id))
            return len(found)

        count = self.run_sync(sweep)
        if count:
            log.info("removed %d leftover sandbox containers", count)
        return count

    def close(self) -> None:
        """Close the client's connections."""
        if self._client is not None:
            self._client.close()
            self._client = None


def unusable_reason(settings: Settings, timeout_s: float = 3.0) -> str | None:
    """None when the docker backend can run (an engine answers and has the base image), else why not."""
    try:
        client = _connect(settings, timeout_s)
        try:
            client.ping()
            client.images.get(settings.base_image)
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - any failure means "no usable engine"
        return f"{type(exc).__name__}: {exc}"
    return None
