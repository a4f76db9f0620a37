"""A build box's disk bound (``build_max_disk_mb``, :mod:`evaluator_host.builds.disk_bound`) on docker.

A box is created with the ``fsize`` ulimit of the bound (:func:`fsize_ulimit`: no file of the build
larger). While an install runs, :class:`BoxWatch` measures what the box wrote — its writable layer
(the engine's ``SizeRw``) and the install's output so far — at
:class:`~evaluator_host.builds.disk_bound.Pacer`'s pace, and past the bound kills every process of the
build uid in the box (the install ends); :meth:`BoxWatch.over` measures once more after it ended.
Either way the install raises :class:`Exceeded` (outside the engine's error boundary), and the box —
thrown away after every build — is never committed: nothing of it stays.
"""

from __future__ import annotations

import threading
import time

import docker
from docker.types import Ulimit

from evaluator_host.builds import disk_bound

__all__ = ["BoxWatch", "Exceeded", "fsize_ulimit", "written"]


class Exceeded(Exception):  # noqa: N818 - a signal to the builder, which raises the BuildError naming the bound
    """A box's install wrote more than the bound: ``used`` bytes when it was seen."""

    def __init__(self, used: int) -> None:
        super().__init__(f"the build wrote {used} bytes")
        self.used = used


def fsize_ulimit(bound_mb: int) -> Ulimit:
    """The ``fsize`` ulimit (bytes) of a box: no file larger than the bound."""
    return Ulimit(name="fsize", soft=bound_mb << 20, hard=bound_mb << 20)


def written(client: docker.DockerClient, container_id: str) -> int:
    """Bytes of the box's writable layer (``SizeRw``; 0 when the engine does not say)."""
    found = client.api.containers(all=True, size=True, filters={"id": container_id})
    return int(found[0].get("SizeRw") or 0) if found else 0


class BoxWatch:
    """Watch one install in box ``container_id`` (run by the build ``uid``) against ``bound_mb``; feed it
    the install's output size with :meth:`output`; :meth:`stop` when the install ended, then :meth:`over`."""

    def __init__(self, client: docker.DockerClient, container_id: str, uid: int, bound_mb: int) -> None:
        self.client, self.container_id, self.uid = client, container_id, uid
        self.bound = bound_mb << 20
        self.used: int | None = None  # the bytes seen once past the bound
        self._output = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="evh-build-disk", daemon=True)
        self._thread.start()

    def output(self, size: int) -> None:
        """Count ``size`` more bytes of the install's output (the live log on the host)."""
        self._output += size

    def _run(self) -> None:
        pacer = disk_bound.Pacer()
        while not self._stopped.wait(pacer.wait_s(1.0)):
            if not pacer.due():
                continue
            started = time.monotonic()
            try:
                used = written(self.client, self.container_id) + self._output
            except Exception:  # noqa: BLE001 - an engine hiccup: looked at again next time (and after it ended)
                pacer.measured(time.monotonic() - started)
                continue
            pacer.measured(time.monotonic() - started)
            if used >= self.bound:
                self.used = used
                self._kill()
                return

    def _kill(self) -> None:
        """Kill every process of the build uid in the box (the install with them)."""
        api = self.client.api
        try:
            stop = api.exec_create(self.container_id, ["sh", "-c", "kill -9 -1"], user=f"{self.uid}:{self.uid}")
            api.exec_start(stop["Id"])
        except Exception:  # noqa: BLE001 - the box is thrown away after the build whatever happens here
            pass

    def stop(self) -> None:
        """The install ended: stop watching."""
        self._stopped.set()
        self._thread.join(timeout=60)

    def over(self) -> int | None:
        """The bytes written when the install passed the bound, seen while it ran or now; else None."""
        if self.used is None:
            used = written(self.client, self.container_id) + self._output
            if used >= self.bound:
                self.used = used
        return self.used
