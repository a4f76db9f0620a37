"""Landlock for a process-backend worker (stdlib only; loaded by path by ``sandbox_init.py``).

The rlimits-only mode has no private root and no network namespace: without this, code that got out of
the restricted policy (or any code under the standard policy) reads whatever the worker's uid may read on
the host, lists the host's ``/tmp``, connects to the service's own API and any loopback server, and —
when the service is not root and the worker shares its uid — signals the service. :func:`restrict`
confines the worker process (and everything it starts) with the kernel's Landlock LSM, unprivileged
(``no_new_privs`` is set first):

* **files**: read and execute only beneath ``read`` (the interpreter, the runtime, the harness, the
  vendored packages: what the host passes) and the system directories the C library needs
  (:data:`SYSTEM_READ`), read and write only beneath ``write`` (the worker's own directory) and the
  harmless devices (:data:`DEVICES`); nothing else — not the host's ``/tmp``, ``/etc``, ``/home``, the
  data dir, another process's ``/proc`` entries;
* **TCP** (Landlock ABI 4+): no bind, no connect, on any port;
* **scopes** (ABI 6+): no abstract UNIX socket outside the worker, no signal to a process outside it.

Every right this kernel's ABI knows is handled (denied unless a rule allows it). :func:`abi` is the ABI
(0: no Landlock); the host probes it once and reports it (``/healthz``'s ``isolation_details``).
"""

from __future__ import annotations

import ctypes
import os

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # the same on every architecture
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the rights a rule on a file may carry
READ = EXECUTE | READ_FILE | READ_DIR
WRITE = READ | WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SYM | MAKE_FIFO | REFER | TRUNCATE

SYSTEM_READ = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/lib32",
    "/libx32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/alternatives",
    "/etc/ssl",  # public: openssl.cnf (Node reads it at start) and the CA certificates
    "/proc/self",  # its own entries only (/proc/<pid> of the worker at the time of the rule)
)
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi() -> int:
    """The Landlock ABI of this kernel (0 when it has none, or it is disabled, or a filter refuses it)."""
    version = _libc.syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    return int(version) if version > 0 else 0


def _fail(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"landlock {what}: {os.strerror(err)}")


def restrict(read: list[str], write: list[str]) -> int:
    """Confine this process (and its future children) as the module docstring says; returns the ABI used.
    ``OSError`` when the kernel has no Landlock or refuses (the host asked for it: never run unconfined)."""
    version = abi()
    if version < 1:
        raise OSError(0, "landlock: this kernel offers no Landlock")
    handled_fs = FS_BY_ABI.get(version, (1 << 16) - 1)
    attr = _RulesetAttr(handled_fs, 0, 0)
    size = 8
    if version >= 4:
        attr.net, size = NET_BIND_TCP | NET_CONNECT_TCP, 16
    if version >= 6:
        attr.scoped, size = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL, 24
    ruleset = _libc.syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise _fail("create_ruleset")
    try:
        rules = [(path, READ) for path in (*SYSTEM_READ, *read)]
        rules += [(path, WRITE) for path in write]
        rules += [(path, READ_FILE | WRITE_FILE) for path in DEVICES]
        for path, access in rules:
            _allow(int(ruleset), path, access & handled_fs)
        if _libc.syscall(SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise _fail("restrict_self")
    finally:
        os.close(int(ruleset))
    return version


def _allow(ruleset: int, path: str, access: int) -> None:
    """A rule: ``access`` beneath ``path`` (a file: its file rights only); a missing path is skipped."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(path):
            access &= FILE_ONLY
        rule = _PathBeneath(access, fd)
        if _libc.syscall(SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH), ctypes.byref(rule), 0):
            raise _fail(f"add_rule {path}")
    finally:
        os.close(fd)
