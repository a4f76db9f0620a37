"""What process isolation this machine allows, probed once at start-up.

The process backend uses the strongest mode available:

``namespaces``  root: fresh mount/net/pid/ipc/uts namespaces (``unshare``), a pivot_root
                into a minimal read-only root, a private tmpfs ``/tmp`` and ``/dev/shm``,
                a unique unprivileged uid per worker, a pids and a memory cgroup when writable.
``userns``      namespaces refused but user namespaces work: the same namespaces and
                minimal root inside a user namespace. Not root: the service's uid mapped to
                the namespace's root (no uid change, no NPROC limit). Root (e.g. a container
                without CAP_SYS_ADMIN): never the host's root for user code — the service writes
                the namespace's id maps itself (``host_maps``: root and the worker's sandbox uid,
                each to itself; :func:`write_id_maps`) and the bootstrap drops to that uid, as in
                ``namespaces``.
``rlimits``     neither: rlimits, a scrubbed environment and a private working directory the
                worker's uid owns. As root, an unprivileged uid per worker all the same
                (``setresuid``, groups cleared): user code never runs as root. A root service
                that cannot change uid (no ``CAP_SETUID``) gets ``uid_drop_error`` and the
                backend refuses to start. With no private root and no network namespace of its
                own, the worker is confined by Landlock where the kernel has it
                (``landlock_abi``; ``runtimes/sandbox_landlock.py``: files read-only beneath
                the interpreter, runtime and harness, read-write beneath its own directory;
                no TCP; no signal or abstract socket out) and ``socket()`` is refused by its
                seccomp filter — what still holds when the restricted policy falls
                (docs/security.md). A kernel without Landlock is reported, never hidden.

``force="rlimits"`` (the ``process_isolation`` setting) skips the namespace modes, as on a
machine where ``unshare`` is missing or refused.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from evaluator_host.sandbox.process.uid_claims import claimed_uid

__all__ = ["AFTER_MAPS", "Isolation", "landlock_abi", "probe", "wait_for_userns", "write_id_maps"]

NAMESPACES = ("mount", "net", "pid", "ipc", "uts")
# host_maps: ``python -c AFTER_MAPS <argv>`` waits for one byte on stdin (sent once the id maps are written),
# then executes ``python <argv>``. The first program in a user namespace is executed before its maps
# exist, so it has no capabilities there; executed again as the namespace's (now mapped) root, it has.
AFTER_MAPS = "import os, sys; os.read(0, 1); os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
_CGROUP_NAME = "evaluator-host"


@dataclass(frozen=True)
class Isolation:
    """The isolation mode and its features, as reported by ``/healthz``."""

    mode: str
    unshare_argv: tuple[str, ...]
    uid_drop: bool
    pids_cgroup: Path | None
    memory_cgroup: Path | None = None
    cpu_cgroup: Path | None = None
    uid_drop_error: str | None = None  # why a root service cannot drop to a sandbox uid (then it refuses)
    host_maps: bool = False  # userns as root: the service writes each worker's id maps (write_id_maps)
    landlock_abi: int = 0  # rlimits: the kernel's Landlock ABI the workers are confined with (0: none)

    @property
    def user_code_as_root(self) -> bool:
        """Whether user code would run with the host's uid 0 (the service's own, undropped)."""
        return not self.uid_drop and os.geteuid() == 0

    @property
    def user(self) -> str:
        """Who user code runs as, in words."""
        if self.uid_drop:
            return "an unprivileged uid per worker"
        if os.geteuid() != 0:
            return f"the service's own unprivileged uid ({os.geteuid()})"
        if self.mode == "userns":
            return "uid 0 of a user namespace (mapped to the host's root)"
        return "root (uid 0)"

    @property
    def landlock(self) -> str:
        """The Landlock confinement of the rlimits mode's workers, in words (or why there is none)."""
        if self.mode != "rlimits":
            return "not used (a private root and a network namespace instead)"
        if self.landlock_abi < 1:
            return "landlock unavailable (this kernel has none): the host's files and loopback are not confined"
        net = ", no TCP bind/connect" if self.landlock_abi >= 4 else ""
        scopes = ", no signal or abstract socket out" if self.landlock_abi >= 6 else ""
        return f"landlock ABI {self.landlock_abi} (files: runtime read-only, own dir read-write{net}{scopes})"

    @property
    def summary(self) -> str:
        """One line naming every measure in force."""
        parts = [f"process:{self.mode}"]
        if self.mode != "rlimits":
            parts.append("namespaces(" + ",".join(NAMESPACES) + ")")
            parts.append("pivot_root(minimal read-only root, private /tmp and /dev/shm)")
        if self.uid_drop:
            parts.append("unprivileged uid per worker")
        if self.pids_cgroup:
            parts.append("pids cgroup")
        if self.memory_cgroup:
            parts.append("memory cgroup (the whole worker, no swap)")
        if self.cpu_cgroup:
            parts.append("cpu cgroup (the cpus setting)")
        if self.mode == "rlimits":
            parts.append(self.landlock)
        parts.append("rlimits(AS,CPU," + ("NPROC," if self.uid_drop else "") + "FSIZE,NOFILE,CORE)")
        parts += ["no_new_privs", "scrubbed env"]
        if os.uname().machine == "x86_64":
            sockets = ", socket()" if self.mode == "rlimits" else ""
            parts.append(f"seccomp (keyrings, namespaces, mounts, bpf, ptrace, modules, clocks{sockets} refused)")
        return " + ".join(parts)


def _works(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv + ["true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _cgroup(controller: str, limit_files: tuple[str, ...]) -> Path | None:
    """A writable ``evaluator-host`` cgroup directory with ``controller`` (v1 or v2) whose children
    get one of ``limit_files``, or None."""
    candidates = [Path("/sys/fs/cgroup") / controller]
    v2 = Path("/sys/fs/cgroup")
    try:
        if controller in (v2 / "cgroup.controllers").read_text().split():
            candidates.append(v2)
    except OSError:
        pass
    for base in candidates:
        if not (base / "cgroup.procs").exists():
            continue
        path = base / _CGROUP_NAME
        try:
            path.mkdir(exist_ok=True)
            if base == v2:
                (base / "cgroup.subtree_control").write_text(f"+{controller}")
                (path / "cgroup.subtree_control").write_text(f"+{controller}")
            probe_dir = path / "probe"
            probe_dir.mkdir(exist_ok=True)
            ok = any((probe_dir / name).exists() for name in limit_files)
            probe_dir.rmdir()
            if ok:
                return path
        except OSError:
            continue
    return None


def _uid_drop_error(uid: int) -> str | None:
    """None when a child of this process can become ``uid`` (groups cleared), else why not."""
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", f"import os, sys; sys.exit(os.getuid() != {uid})"],
            user=uid,
            group=uid,
            extra_groups=[],
            capture_output=True,
            timeout=10,
        )
    except PermissionError as exc:
        if exc.errno == errno.EACCES:  # the uid changed, then could not run this interpreter: the backend
            return None  # checks what the uid can reach and says so
        return f"{type(exc).__name__}: {exc}"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None if done.returncode == 0 else f"the child still ran as uid {os.geteuid()}"


def probe(force: str = "auto", sandbox_uid: int = 200_000) -> Isolation:
    """Find the strongest isolation mode this process can use (``force="rlimits"``: the weakest);
    ``sandbox_uid`` is the uid a root service's rlimits mode tries to drop to."""
    if force == "rlimits":
        return _rlimits(sandbox_uid)
    unshare = shutil.which("unshare")
    base = [unshare, *(f"--{ns}" for ns in NAMESPACES), "--fork", "--kill-child", "--"] if unshare else []
    if unshare and os.geteuid() == 0 and _works(base):
        pids = _cgroup("pids", ("pids.max",))
        memory = _cgroup("memory", ("memory.max", "memory.limit_in_bytes"))
        cpu = _cgroup("cpu", ("cpu.max", "cpu.cfs_quota_us"))
        return Isolation("namespaces", tuple(base), True, pids_cgroup=pids, memory_cgroup=memory, cpu_cgroup=cpu)
    if unshare and os.geteuid() == 0:
        user = [unshare, "--user", *base[1:]]  # no --map-root-user: the maps are written by the service
        if _drop_works_as_a_claimed_uid(user, sandbox_uid):
            return Isolation("userns", tuple(user), uid_drop=True, pids_cgroup=None, host_maps=True)
    elif unshare:
        user = [unshare, "--user", "--map-root-user", *base[1:]]
        if _works(user):
            return Isolation("userns", tuple(user), uid_drop=False, pids_cgroup=None)
    return _rlimits(sandbox_uid)


def wait_for_userns(pid: int, timeout_s: float = 5.0) -> bool:
    """Wait until ``pid`` (an ``unshare --user`` just started) is in a user namespace of its own."""
    deadline = time.monotonic() + timeout_s
    ours = os.readlink("/proc/self/ns/user")
    while time.monotonic() < deadline:
        try:
            if os.readlink(f"/proc/{pid}/ns/user") != ours:
                return True
        except OSError:
            return False
        time.sleep(0.001)
    return False


def write_id_maps(pid: int, uid: int) -> None:
    """Map, in ``pid``'s new user namespace, root to the host's root (so the bootstrap can build the
    sandbox from root-owned paths) and ``uid`` to itself (what it then drops to): the only ids there.
    Root writes them from outside (CAP_SETUID and CAP_SETGID in the parent namespace); ``OSError`` else."""
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w") as fh:
            fh.write(f"0 0 1\n{uid} {uid} 1\n")


def _drop_works_as_a_claimed_uid(argv: list[str], base: int) -> bool:
    """:func:`_userns_drop_works` as a worker uid claimed while it runs (``uid_claims``)."""
    try:
        with claimed_uid(base) as uid:
            return _userns_drop_works(argv, uid)
    except OSError:
        return False


def _userns_drop_works(argv: list[str], uid: int) -> bool:
    """Whether a child in a user namespace (and the other namespaces) whose maps this process writes
    can drop to ``uid``: the userns mode of a root service."""
    code = (
        "import os, sys\nsys.stdin.readline()\nos.setgroups([])\n"
        f"os.setresgid({uid}, {uid}, {uid})\nos.setresuid({uid}, {uid}, {uid})\nsys.exit(os.getuid() != {uid})\n"
    )
    try:
        proc = subprocess.Popen(
            [*argv, sys.executable, "-I", "-S", "-c", AFTER_MAPS, "-I", "-S", "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except OSError:
        return False
    try:
        assert proc.stdin is not None
        if wait_for_userns(proc.pid):
            write_id_maps(proc.pid, uid)
        proc.stdin.write(b".go\n")  # one byte for AFTER_MAPS, a line for the code
        proc.stdin.close()
        return proc.wait(timeout=10) == 0
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def landlock_abi() -> int:
    """This kernel's Landlock ABI (0: none, disabled, or refused by a seccomp profile): the version query
    of ``landlock_create_ruleset`` (syscall 444 on every architecture), which creates nothing."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return int(version) if version > 0 else 0


def _rlimits(sandbox_uid: int) -> Isolation:
    """The rlimits-only mode: as root with a uid per worker, or with ``uid_drop_error`` saying why not;
    with the kernel's Landlock ABI (its workers' own boundary)."""
    abi = landlock_abi()
    if os.geteuid() != 0:
        return Isolation("rlimits", (), uid_drop=False, pids_cgroup=None, landlock_abi=abi)
    try:
        with claimed_uid(sandbox_uid) as uid:  # no other service's worker has it, nor reaps it meanwhile
            error = _uid_drop_error(uid)
    except OSError as exc:
        error = f"{type(exc).__name__}: {exc}"
    return Isolation("rlimits", (), uid_drop=error is None, pids_cgroup=None, uid_drop_error=error, landlock_abi=abi)
