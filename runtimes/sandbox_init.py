"""Process-backend sandbox bootstrap (stdlib only, runs as the first code in a worker).

Started by the host as ``python -I -S sandbox_init.py`` with its config as the first frame on
stdin (never in argv: ``/proc/1/cmdline`` is readable inside the sandbox) — inside fresh
mount/net/pid/ipc/uts namespaces when the host could create them (``unshare``). It
sets the sandbox up and then runs the language harness:

0. closes every inherited descriptor but stdio (the channel);
1. joins the worker's pids cgroup (``cgroup_procs``), sets rlimits;
2. with ``root``: builds a minimal root file system on a tmpfs — read-only binds of the
   system directories, of the few ``/etc`` files the C library needs (a synthetic passwd and
   group; never the host's ``/etc``) and of ``binds`` (``[source, target]``: interpreter, runtime,
   harness, code — the host passes in-sandbox paths to the harness), a private
   size-limited ``/tmp`` and ``/dev/shm``, a minimal ``/dev``, a ``/proc`` of the new pid
   namespace — and ``pivot_root``s into it, so no other host file is visible;
3. sets ``no_new_privs`` and, with ``uid``, drops to that unprivileged uid/gid; with ``landlock``
   (``{"read": [...], "write": [...]}``: the rlimits-only mode, which has no private root), confines
   files, TCP, abstract sockets and signals with Landlock (``sandbox_landlock.py``, beside this file);
   with ``seccomp``, installs a syscall filter (:func:`_seccomp`: keyrings, namespaces, mounts, bpf,
   ptrace, kernel modules, clocks… refused; with ``no_sockets``, ``socket()`` too: no network of any
   family, while ``socketpair`` stays);
4. ``chdir``s to the private ``/tmp``; with ``init`` (a pid namespace of its own) forks and
   stays behind as its pid 1 (:func:`_fork_init`); then runs ``exec`` (argv) or, for Python,
   the harness ``run_python`` in this same process.

Config keys: ``root``, ``binds``, ``writable`` (``[source, target]`` bound writable: a build's
partial runtime and scratch, :mod:`evaluator_host.sandbox.process.runtimes`), ``tmpfs_mb``, ``uid``,
``cgroup_procs``, ``rlimits``, ``init``, ``seccomp``, ``no_sockets``, ``landlock``,
``loopback`` (bring ``lo`` up: a worker with an egress socket bound in)
(name → value), ``exec`` (+ ``channel_fds``: move the host's channel from fds 0/1 to 3/4
first, as the Node harness expects) | ``run_python`` + ``argv``.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys
from typing import Any

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
SYS_PIVOT_ROOT = 155  # x86_64
PR_SET_NO_NEW_PRIVS = 38
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
# Of the host's /etc only what the dynamic linker and the C library read: never the rest, where
# machines keep credentials (pip.conf, npmrc), host names, keys.
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives")
ETC_PASSWD = "root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
ETC_GROUP = "root:x:0:\nnogroup:x:65534:\n"
DEVICES = ("null", "zero", "full", "random", "urandom")

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(
        _libc.mount(
            src.encode() if src else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {src} on {target}",
    )


def _bind_ro(root: str, src: str, dst: str | None = None) -> None:
    target = root + (dst or src)
    if os.path.islink(src):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.symlink(os.readlink(src), target)
        return
    if not os.path.exists(src) or os.path.exists(target) and os.path.ismount(target):
        return
    if os.path.isdir(src):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()  # noqa: SIM115
    _mount(src, target, None, MS_BIND | MS_REC)
    try:
        _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    except OSError:  # locked flags in a user namespace: keep the bind, it stays unwritable by uid
        pass


def _bind_rw(root: str, src: str, dst: str) -> None:
    """A writable bind of the host directory ``src`` at ``dst`` (a build's partial runtime and scratch)."""
    target = root + dst
    os.makedirs(target, exist_ok=True)
    _mount(src, target, None, MS_BIND)
    try:
        _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV)
    except OSError:  # locked flags in a user namespace: keep the bind as it is
        pass


def _build_root(root: str, binds: list[list[str]], tmpfs_mb: int, writable: list[list[str]] | None = None) -> None:
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=0755")
    for src in SYSTEM_DIRS:
        _bind_ro(root, src)
    os.makedirs(root + "/etc")
    for src in ETC_FILES:
        _bind_ro(root, src)
    for name, text in (
        ("passwd", ETC_PASSWD),
        ("group", ETC_GROUP),
        ("nsswitch.conf", "passwd: files\ngroup: files\n"),
    ):
        with open(f"{root}/etc/{name}", "w") as fh:
            fh.write(text)
    # the private /tmp first: a bind whose path lies under /tmp (a checkout or venv there)
    # is then mounted on top of it instead of being hidden by it
    os.makedirs(root + "/tmp", exist_ok=True)
    _mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmpfs_mb}m,mode=1777")
    for src, dst in binds:
        _bind_ro(root, src, dst)
    for src, dst in writable or []:
        _bind_rw(root, src, dst)
    dev = root + "/dev"
    os.makedirs(dev, exist_ok=True)
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755")
    for name in DEVICES:
        open(f"{dev}/{name}", "a").close()  # noqa: SIM115
        _mount(f"/dev/{name}", f"{dev}/{name}", None, MS_BIND)
    os.makedirs(dev + "/shm")
    _mount("tmpfs", dev + "/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f"size={tmpfs_mb}m,mode=1777")
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"{dev}/{name}")
    os.makedirs(root + "/proc", exist_ok=True)
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.chdir(root)
    _check(_libc.syscall(SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "umount old root")
    os.chdir("/")
    try:
        _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    except OSError:
        pass


# -- seccomp: the syscalls user code has no business making (in the spirit of Docker's default profile)
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
DENIED_X86_64 = {
    "ptrace": 101,
    "syslog": 103,
    "adjtimex": 159,
    "pivot_root": 155,
    "chroot": 161,
    "acct": 163,
    "settimeofday": 164,
    "mount": 165,
    "umount2": 166,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "iopl": 172,
    "ioperm": 173,
    "init_module": 175,
    "delete_module": 176,
    "quotactl": 179,
    "lookup_dcookie": 212,
    "clock_settime": 227,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "unshare": 272,
    "perf_event_open": 298,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "clock_adjtime": 305,
    "setns": 308,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "finit_module": 313,
    "kexec_file_load": 320,
    "bpf": 321,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
}
CLONE, CLONE3 = 56, 435
SOCKET = 41  # refused with no_sockets (socketpair, 53, stays: asyncio's self-pipe)
CLONE_NEW_ANY = 0x7E020080  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
EPERM, ENOSYS = 1, 38
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def _assemble(lines: list[tuple[str | None, int, str | None, str | None, int]]) -> list[tuple[int, int, int, int]]:
    """(label, op, label if true, label if false, k) → BPF (op, jt, jf, k); None means the next one."""
    where = {label: i for i, (label, *_rest) in enumerate(lines) if label}
    out = []
    for i, (_label, op, jt, jf, k) in enumerate(lines):
        out.append((op, where[jt] - i - 1 if jt else 0, where[jf] - i - 1 if jf else 0, k))
    return out


def _seccomp(no_sockets: bool = False) -> bool:
    """Refuse the denied syscalls with EPERM, ``clone`` with any namespace flag too, and ``clone3``
    with ENOSYS (its flags live in memory a filter cannot read; libc then falls back to ``clone``).
    Needs ``no_new_privs``; x86_64 only (elsewhere nothing is installed and False is returned)."""
    if os.uname().machine != "x86_64":
        return False
    lines: list[tuple[str | None, int, str | None, str | None, int]] = [
        (None, LD_W_ABS, None, None, 4),  # seccomp_data.arch
        (None, JEQ_K, None, "deny", AUDIT_ARCH_X86_64),  # another ABI (i386 via int 0x80): refused
        (None, LD_W_ABS, None, None, 0),  # seccomp_data.nr
        (None, JGE_K, "deny", None, X32_SYSCALL_BIT),  # the x32 ABI: refused
        *((None, JEQ_K, "deny", None, nr) for nr in sorted(DENIED_X86_64.values())),
        *([(None, JEQ_K, "deny", None, SOCKET)] if no_sockets else []),
        (None, JEQ_K, "clone", None, CLONE),
        (None, JEQ_K, "nosys", None, CLONE3),
        (None, RET_K, None, None, RET_ALLOW),
        ("clone", LD_W_ABS, None, None, 16),  # args[0], the flags (low word)
        (None, JSET_K, "deny", None, CLONE_NEW_ANY),
        (None, RET_K, None, None, RET_ALLOW),
        ("nosys", RET_K, None, None, RET_ERRNO | ENOSYS),
        ("deny", RET_K, None, None, RET_ERRNO | EPERM),
    ]
    code = _assemble(lines)
    filters = (_Filter * len(code))(*(_Filter(*c) for c in code))
    program = _Program(len(code), filters)
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0), "seccomp")
    return True


def _loopback_up() -> None:
    """Bring the network namespace's ``lo`` up (still privileged here): the harness's egress forwarder
    listens on it. The namespace has no other interface, so nothing else becomes reachable."""
    import fcntl
    import socket
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = struct.unpack("16sH", fcntl.ioctl(sock, siocgifflags, struct.pack("16sH", b"lo", 0)))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH", b"lo", flags | iff_up))


def _set_rlimits(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, f"RLIMIT_{name}"), (value, value))


def _close_inherited_fds() -> None:
    """Close every descriptor but stdio: whatever the service inherited (a socket-activated
    listener, a shell's ``exec 7<secret``) or its event loop leaked (uvloop's spawn ignores
    ``close_fds``) must never reach user code."""
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[1])


def _fork_init() -> None:
    """Stay behind as pid 1 of the worker's pid namespace; the harness goes on in the child (pid 2).

    The init holds nothing of the channel (the host sees EOF when the harness dies), reaps
    whatever is orphaned, and leaves with the harness — the kernel then kills everything else in
    the namespace. User code cannot signal it (pid 1 ignores signals from inside its namespace)
    nor patch it (another process): the host can always tell the harness (pid 2) from strays.
    """
    harness = os.fork()
    if harness == 0:
        return
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(0)
        except InterruptedError:
            continue
        if pid == harness:
            code = os.waitstatus_to_exitcode(status)
            os._exit(code if code >= 0 else 128 - code)  # killed by signal N: 128 + N, as a shell says


def main(config: dict[str, Any]) -> None:
    """Set the sandbox up as described by ``config`` and hand over to the harness."""
    _close_inherited_fds()
    for procs in config.get("cgroup_procs") or []:  # the worker's pids and memory cgroups
        with open(procs, "w") as fh:
            fh.write("0")
    if config.get("root"):
        _build_root(config["root"], config.get("binds", []), int(config.get("tmpfs_mb", 64)), config.get("writable"))
        try:
            _libc.sethostname(b"sandbox", 7)
        except OSError:
            pass
    if config.get("loopback"):
        _loopback_up()
    _set_rlimits(config.get("rlimits", {}))
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no_new_privs)")
    uid = config.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    os.chdir(config.get("workdir") or "/tmp")
    if config.get("landlock") is not None:
        _landlock_module().restrict(config["landlock"]["read"], config["landlock"]["write"])
    if config.get("seccomp"):
        _seccomp(bool(config.get("no_sockets")))
    if config.get("init"):
        _fork_init()
    if config.get("exec"):
        if config.get("channel_fds"):
            # the program speaks the protocol on fds 3 (in) and 4 (out); what it writes to
            # fd 1/2 goes to the host's raw-output drain, and fd 0 is /dev/null
            os.dup2(0, 3)
            os.dup2(1, 4)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            os.dup2(2, 1)
        os.execv(config["exec"][0], config["exec"])
    path = config["run_python"]
    sys.argv = [path, *config.get("argv", [])]
    with open(path, encoding="utf-8") as fh:
        code = compile(fh.read(), path, "exec")
    exec(code, {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__})


def _landlock_module() -> Any:
    """``sandbox_landlock.py`` beside this file, by path (``-I`` leaves this folder off ``sys.path``)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_landlock.py")
    spec = importlib.util.spec_from_file_location("sandbox_landlock", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read_config() -> dict[str, Any]:
    """The config: the first frame on stdin (4-byte big-endian length + JSON), read to its exact end
    (what follows on stdin is the harness's channel)."""

    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = os.read(0, n - len(data))
            if not chunk:
                raise SystemExit("no config on stdin")
            data += chunk
        return data

    config: dict[str, Any] = json.loads(exactly(int.from_bytes(exactly(4), "big")))
    return config


if __name__ == "__main__":
    main(_read_config())
