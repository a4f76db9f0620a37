"""The janitor: a service's containers go away when the service does, however it ends.

A docker-backend service starts one janitor process (``python -m
evaluator_host.sandbox.docker.janitor OWNER --instance ID``) in a session of its own and keeps the
write end of the janitor's stdin open for its whole life, never writing to it. The kernel closes
that end when the service's process ends — a clean exit, a crash, or SIGKILL — and the
janitor, blocked reading its stdin, sees end-of-file at once. It then force-removes every
container labelled as the service's data dir's (``OWNER``: workers, spares, build boxes) that this
service created (its ``INSTANCE`` label) and, in that first look only, any other of the data dir's
whose creation second is before the death's (an earlier service's leftover); it looks again 2, 5 and
9 s later for the service's own only (a container the service asked for just before dying may be
listed only once the engine has finished creating it, its creation time then past the death: its
instance label says whose it is), then exits. A service that closes normally removes its containers
itself first; the janitor then finds none.

The next service on the data dir may start within those 9 s (the data dir's lock is free at the
death) and create containers of its own, so the later looks take nothing but the dead instance's: no
creation time (whole seconds, on the engine's clock, which may not be the janitor's) is trusted to
tell a new service's container from an old one — a rule "created up to a second after the death" once
removed a new service's build box under its first build. The first look comes at once, before a new
service can have started; a leftover of the death's own second is left to the next service's start-up
sweep.

This is what makes "every managed container goes away within seconds of its service dying,
even when no service ever starts again on that data dir" hold: the containers' own processes
cannot do it (a container cannot remove itself, and the engine's auto-remove would lose the
exit state — the OOM flag — that the pool reads after a worker dies).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from evaluator_host.sandbox.docker.labels import INSTANCE, MANAGED, OWNER

if TYPE_CHECKING:  # (the janitor's own process imports no settings: it waits, then sweeps with the docker SDK)
    from evaluator_host.settings import Settings

__all__ = ["listed_locally", "main", "spawn"]

_SWEEPS_S = (0.0, 2.0, 5.0, 9.0)  # after the service's end: when the janitor sweeps


def spawn(settings: Settings, owner: str, instance: str) -> subprocess.Popen[bytes]:
    """Start the janitor of the containers labelled ``owner`` (and ``instance``: the service's own); the
    caller keeps the returned process's ``stdin`` open until it has removed its containers itself
    (:func:`dismiss`)."""
    argv = [sys.executable, "-m", "evaluator_host.sandbox.docker.janitor", owner, "--instance", instance]
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
        try:
            janitor.stdin.write(b"bye")  # a clean end: its containers are gone already, one look is enough
            janitor.stdin.flush()
        except OSError:
            pass
        janitor.stdin.close()
    try:
        janitor.wait(timeout=30)
    except subprocess.TimeoutExpired:
        janitor.kill()
        janitor.wait()


def _owned(owner: str) -> dict[str, list[str]]:
    """The engine's label filter for ``owner``'s managed containers (both listings ask the same)."""
    return {"label": [f"{MANAGED}=1", f"{OWNER}={owner}"]}


def _theirs(listed: list[dict[str, Any]], died: float | None, instance: str | None) -> list[str]:
    """The ids of the listed containers a sweep removes: the dead ``instance``'s, whenever created, and with
    ``died`` any other created in a whole second before the death's (the engine lists creation times in whole
    seconds: one of the death's own second may be the next service's)."""
    return [
        c["Id"]
        for c in listed
        if (died is not None and int(c.get("Created", 0)) < int(died))
        or (instance and (c.get("Labels") or {}).get(INSTANCE) == instance)
    ]


def listed_locally(owner: str) -> list[dict[str, Any]] | None:
    """``owner``'s containers as the engine lists them (``GET /containers/json``), asked over the local engine's
    socket without the docker SDK (whose import is most of a janitor's CPU: a clean end finds nothing to
    remove); None when the engine is elsewhere (``DOCKER_HOST`` not a unix socket) or did not answer."""
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not host.startswith("unix://"):
        return None
    query = urllib.parse.urlencode({"all": "1", "filters": json.dumps(_owned(owner))})
    conn = http.client.HTTPConnection("localhost", timeout=30)
    try:
        conn.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.sock.settimeout(30)
        conn.sock.connect(host[len("unix://") :])
        conn.request("GET", f"/containers/json?{query}")
        response = conn.getresponse()
        found = json.loads(response.read()) if response.status == 200 else None
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    return found if isinstance(found, list) else None


def _sweep(owner: str, docker_host: str | None, died: float | None, instance: str | None = None) -> int:
    """Remove ``owner``'s containers the dead service ``instance`` created, whenever the engine finished
    creating them, and with ``died`` any other of ``owner``'s created in a second before the death's (a
    service started on the same data dir since then owns the newer ones): :func:`_theirs`; their count. The
    engine is asked first without the SDK (:func:`listed_locally`); the SDK is loaded only to remove what it
    lists, or to ask another engine."""
    if docker_host is None and (listed := listed_locally(owner)) is not None and not _theirs(listed, died, instance):
        return 0
    import docker

    from evaluator_host.sandbox.docker.engine import remove_container

    client = docker.DockerClient(base_url=docker_host, timeout=30) if docker_host else docker.from_env(timeout=30)
    try:
        listed = client.api.containers(all=True, filters=_owned(owner))
        found = _theirs(listed, died, instance)

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda cid: remove_container(client.api, cid), found))
        return len(found)
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    """Wait for the service to go (end-of-file on stdin), then remove its containers."""
    parser = argparse.ArgumentParser(prog="evaluator-host-janitor")
    parser.add_argument("owner")
    parser.add_argument("--docker-host")
    parser.add_argument("--instance")
    args = parser.parse_args(argv)
    clean = False  # the service said goodbye (dismiss) before its end: it removed its containers itself
    while True:
        try:
            data = os.read(0, 4096)
        except InterruptedError:
            continue
        except OSError:
            break
        if not data:
            break
        clean = True
    eof = time.monotonic()
    # what this service created is recognised by its label (a create it asked for just before it died may be
    # finished by a busy engine seconds later); another instance's only at once, when older than the death's
    # second (a service started since then on the same data dir owns the newer ones)
    died = time.time()
    swept = False
    # a container whose creation the service asked for just before it died may not be listed yet (a
    # busy engine): look again over the next seconds, at what it created
    for look, at in enumerate(_SWEEPS_S[:1] if clean else _SWEEPS_S):
        time.sleep(max(0.0, eof + at - time.monotonic()))
        for _attempt in range(3):  # the engine may be busy removing many containers at once
            try:
                _sweep(args.owner, args.docker_host, died if look == 0 else None, args.instance)
                swept = True
                break
            except Exception:  # noqa: BLE001 - try again, then give up: nothing else can be done here
                continue
    return 0 if swept else 1


if __name__ == "__main__":
    sys.exit(main())
