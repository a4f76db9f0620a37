"""The restricted policy's names: the import allowlist, the attributes and builtins it refuses, its errors.

Data only (and the two exception classes): every other module of the policy reads these.
"""

from __future__ import annotations

import builtins
import types

# The vetted standard library: pure computation on values. Left out on purpose: anything that
# opens files or sockets, starts processes, loads code or reaches the interpreter (os, sys, io's
# file classes, pathlib, shutil, tempfile, subprocess, socket, urllib.request, http, importlib,
# inspect, types, gc, ctypes, pickle, marshal, threading, multiprocessing, logging, builtins).
STDLIB_ALLOWLIST: frozenset[str] = frozenset(
    {
        "__future__",
        "abc",
        "ast",
        "asyncio",
        "base64",
        "binascii",
        "bisect",
        "calendar",
        "cmath",
        "collections",
        "collections.abc",
        "contextlib",
        "copy",
        "csv",
        "dataclasses",
        "datetime",
        "decimal",
        "difflib",
        "enum",
        "fractions",
        "functools",
        "hashlib",
        "heapq",
        "hmac",
        "html",
        "io",
        "itertools",
        "json",
        "math",
        "numbers",
        "operator",
        "pprint",
        "random",
        "re",
        "reprlib",
        "secrets",
        "statistics",
        "string",
        "struct",
        "textwrap",
        "time",
        "typing",
        "unicodedata",
        "urllib",
        "urllib.parse",
        "uuid",
        "zlib",
    }
)

# Modules of which only these names are handed out (the rest open files, start processes or
# reach an event loop's executor/subprocess machinery).
ONLY: dict[str, frozenset[str]] = {
    "io": frozenset(
        {"StringIO", "BytesIO", "TextIOWrapper", "SEEK_SET", "SEEK_CUR", "SEEK_END", "UnsupportedOperation"}
    ),
    "asyncio": frozenset(
        {
            *"sleep gather wait wait_for timeout shield as_completed create_task TaskGroup Semaphore".split(),
            *"BoundedSemaphore Lock Event Condition Queue PriorityQueue LifoQueue QueueEmpty QueueFull".split(),
            *"TimeoutError CancelledError InvalidStateError iscoroutine iscoroutinefunction".split(),
            *"FIRST_COMPLETED FIRST_EXCEPTION ALL_COMPLETED".split(),
        }
    ),
    "uuid": frozenset(
        {"UUID", "uuid3", "uuid4", "uuid5", "NAMESPACE_DNS", "NAMESPACE_URL", "NAMESPACE_OID", "NAMESPACE_X500"}
    ),  # uuid1/getnode may run ifconfig
    "urllib": frozenset({"parse"}),
}
# Names refused on every module (they run argv-driven command lines that read files).
MODULE_DENY = frozenset({"main", "test"})

# Attribute names refused whatever the object: the ways to a frame, a code object, an event loop.
FORBIDDEN_ATTRS: frozenset[str] = frozenset(
    {
        "tb_frame", "tb_next", "f_back", "f_builtins", "f_code", "f_globals", "f_locals", "f_trace",
        "f_generator", "co_code", "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code",
        "cr_await", "cr_origin", "ag_frame", "ag_code", "ag_await", "get_stack", "print_stack",
        "get_loop", "get_coro", "format_map", "mro",
    }
)  # fmt: skip

# Dunder attributes code may read (``super().__init__(…)``, ``type(x).__name__``): none leads on.
DUNDER_READS: frozenset[str] = frozenset(
    {"__init__", "__name__", "__qualname__", "__doc__", "__class__", "__module__", "__version__"}
)

# Dunder methods a class body may define (its own objects' behaviour; nothing is reached by it).
DUNDER_DEFS = frozenset(
    f"__{name}__"
    for name in (
        "init post_init repr str format hash bool len iter next reversed contains getitem setitem delitem "
        "missing call enter exit aenter aexit aiter anext await eq ne lt le gt ge add radd iadd sub rsub "
        "isub mul rmul imul matmul rmatmul truediv rtruediv itruediv floordiv rfloordiv ifloordiv mod rmod "
        "imod pow rpow ipow neg pos abs invert and rand iand or ror ior xor rxor ixor lshift rshift int "
        "float complex index round floor ceil trunc bytes"
    ).split()
)

FORBIDDEN_TYPES = (types.FrameType, types.CodeType, types.TracebackType)
DANGEROUS_BUILTINS = frozenset(
    id(getattr(builtins, name))
    for name in (
        "open __import__ exec eval compile breakpoint input globals locals vars help getattr setattr delattr".split()
    )
    if hasattr(builtins, name)
)
# Functions of these modules are refused whatever path hands them out (a forged ``__module__`` lets
# ``typing.get_type_hints`` resolve names in any module's namespace, for instance).
FORBIDDEN_FUNCTION_MODULES = frozenset(
    "os posix nt sys subprocess _posixsubprocess builtins io _io importlib _imp marshal pickle _pickle "
    "ctypes _ctypes gc inspect socket _socket shutil pathlib signal _signal threading _thread "
    "multiprocessing tempfile runpy code codeop pdb pty fcntl resource mmap select sysconfig site "
    "_frozen_importlib _frozen_importlib_external zipimport posixpath genericpath ntpath".split()
)
# Classes refused as values (a class is a way to make what the policy refuses): every class of a module
# whose functions are refused, but the builtin types and the in-memory io classes the io view hands out;
# of those modules, these by name.
FORBIDDEN_CLASS_MODULES = FORBIDDEN_FUNCTION_MODULES - {"builtins", "io", "_io"}
FORBIDDEN_CLASS_NAMES = frozenset({"FileIO", "open", "open_code"})
# The container types whose bound methods (``d.get``, ``d.pop``, ``d.setdefault``, ``l.pop``…) hand
# out their items: their results pass the value guard like ``d[k]`` does.
CONTAINER_TYPES: tuple[type, ...] = (dict, list, set, frozenset, tuple, types.MappingProxyType)
# Their methods that return an item itself (``values``/``items``/``copy`` return containers, whose
# items are guarded when taken out; ``append`` and the rest return None or a count).
ITEM_METHODS = frozenset({"get", "pop", "popitem", "setdefault"})


class RestrictedError(Exception):
    """Raised when restricted code reaches for something the policy refuses."""


class PolicySyntaxError(SyntaxError):
    """The code uses a construct the restricted policy refuses (``lineno``, ``offset`` 1-based)."""
