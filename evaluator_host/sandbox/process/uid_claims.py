"""Sandbox uids claimed machine-wide: one lock file per uid in use, so that no two holders share one.

A root service gives each worker a uid of its own (``sandbox_uid_base + slot``). In the rlimits-only mode
that uid is all that tells a worker's processes apart (no pid namespace), so when a worker ends its
service kills every process of the uid (``strays.reap_uid``) while it still holds the uid's claim. Any
process run as a sandbox uid therefore holds that uid's claim first:

* a worker, for as long as it or any process of its uid lives (``ProcessBackend`` keeps the descriptor);
* a start-up probe (can a child drop to the uid? can the uid read the interpreter?), for as long as the
  probe runs. Before, probes ran as ``sandbox_uid_base`` unclaimed: another service on the machine that
  held that uid for a worker killed the probe when its worker ended, and the probe's service refused to
  start ("cannot read" its interpreter, or "would run user code as root": CI 74), and the probe shared
  its uid with live user code.

A claim is an exclusive ``flock`` on ``CLAIMS/<uid>.lock``: the kernel drops it when its holder's
descriptor closes, a crashed service's claims with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["CLAIMS", "SLOTS", "claim", "claimed_uid"]

CLAIMS = Path("/run/evaluator-host/uids")  # one lock file per sandbox uid in use, machine-wide
SLOTS = 1024  # workers take sandbox_uid_base .. + SLOTS - 1 (builds: the uid after, build_sandbox.build_uid)


def claim(uid: int) -> int | None:
    """The descriptor holding ``uid``'s claim (the caller closes it to let go), or None when another
    holder has it. ``OSError`` when the claims directory cannot be made (not root)."""
    CLAIMS.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(CLAIMS / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def claimed_uid(base: int) -> Iterator[int]:
    """A worker uid (``base`` .. ``base + SLOTS - 1``, the lowest free) claimed while the block runs: for a
    probe that runs a process as a sandbox uid. The block must wait for its process to end before it
    leaves (the uid is anyone's again then). ``OSError`` when every uid is held."""
    for uid in range(base, base + SLOTS):
        fd = claim(uid)
        if fd is not None:
            try:
                yield uid
            finally:
                os.close(fd)
            return
    raise OSError(f"every sandbox uid from {base} to {base + SLOTS - 1} is held by a live worker")
