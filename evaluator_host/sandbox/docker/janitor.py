"""The janitor: a service's containers go away when the service does, however it ends.

A docker-backend service starts one janitor process (``python -m
evaluator_host.sandbox.docker.janitor OWNER``) in a session of its own and keeps the write
end of the janitor's stdin open for its whole life, never writing to it. The kernel closes
that end when the service's process ends — a clean exit, a crash, or SIGKILL — and the
janitor, blocked reading its stdin, sees end-of-file at once. It then force-removes every
container labelled as the service's (workers, spares, build boxes) and exits. A service that
closes normally removes its containers itself first; the janitor then finds none.

This is what makes "every managed container goes away within seconds of its service dying,
even when no service ever starts again on that data dir" hold: the containers' own processes
cannot do it (a container cannot remove itself, and the engine's auto-remove would lose the
exit state — the OOM flag — that the pool reads after a worker dies).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from evaluator_host.settings import Settings

__all__ = ["main", "spawn"]


def spawn(settings: Settings, owner: str) -> subprocess.Popen[bytes]:
    """Start the janitor of the containers labelled ``owner``; the caller keeps the returned
    process's ``stdin`` open until it has removed its containers itself (:func:`dismiss`)."""
    argv = [sys.executable, "-m", "evaluator_host.sandbox.docker.janitor", owner]
    if settings.docker_host:
        argv += ["--docker-host", settings.docker_host]
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a signal to the service's process group does not reach it
        close_fds=True,
    )


def dismiss(janitor: subprocess.Popen[bytes]) -> None:
    """Let the janitor go (it sweeps once more, finds nothing, and exits)."""
    if janitor.stdin is not None:
        janitor.stdin.close()
    try:
        janitor.wait(timeout=30)
    except subprocess.TimeoutExpired:
        janitor.kill()
        janitor.wait()


def _sweep(owner: str, docker_host: str | None, before: float) -> int:
    """Remove ``owner``'s containers created before ``before`` (a service started on the same data
    dir since then owns the newer ones); their count."""
    import docker

    from evaluator_host.sandbox.docker.engine import MANAGED, OWNER

    client = docker.DockerClient(base_url=docker_host, timeout=30) if docker_host else docker.from_env(timeout=30)
    try:
        listed = client.api.containers(all=True, filters={"label": [f"{MANAGED}=1", f"{OWNER}={owner}"]})
        found = [c["Id"] for c in listed if float(c.get("Created", 0)) <= before]

        def remove(container_id: str) -> None:
            try:
                client.api.remove_container(container_id, force=True)
            except docker.errors.NotFound:
                pass

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(remove, found))
        return len(found)
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    """Wait for the service to go (end-of-file on stdin), then remove its containers."""
    parser = argparse.ArgumentParser(prog="evaluator-host-janitor")
    parser.add_argument("owner")
    parser.add_argument("--docker-host")
    args = parser.parse_args(argv)
    while True:
        try:
            if not os.read(0, 4096):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    died = time.time() + 1.0  # the engine's creation times are whole seconds
    for _attempt in range(3):  # the engine may be busy removing many containers at once
        try:
            _sweep(args.owner, args.docker_host, died)
            return 0
        except Exception:  # noqa: BLE001 - try again, then give up: nothing else can be done here
            continue
    return 1


if __name__ == "__main__":
    sys.exit(main())
