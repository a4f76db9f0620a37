"""The restricted policy's proof: nothing reachable from the allowlist leads out.

Breadth-first over every attribute (and every item of a dict, list or tuple) reachable from
each allowlisted standard module *through the policy's own guards* — what restricted code can
reach without calling anything — to depth 3 (``RESTRICTED_WALK_DEPTH=4`` for more), asserting
no step yields ``os``, ``sys``, ``subprocess``, ``builtins`` (or any module off the allowlist),
``open``, ``__import__``, ``exec``/``eval``/``compile``, a function of ``os``/``posix``/``sys``/
``subprocess``, a frame, a code object or a traceback. Host-side: the guards are the same file
the harness loads in the sandbox.
"""

from __future__ import annotations

import builtins
import io
import os
import sys
import types
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest

from evaluator_host.definitions.languages import RUNTIMES_DIR
from evaluator_host.definitions.restricted import policy_module
from tests.support import policy_guards

POLICY = policy_module(RUNTIMES_DIR / "python")
DEPTH = int(os.environ.get("RESTRICTED_WALK_DEPTH", "3"))  # 4 walks 1.45 M objects in ~150 s: 0 found


@pytest.fixture(autouse=True, scope="module")
def _typing_restored() -> Iterator[None]:
    """The policy's globals guard ``typing``, ``dataclasses`` and ``copy`` process-wide, as they do in a
    sandboxed worker; in this (shared) test process every guard is taken off again, or code run later (libcst,
    the other policy test modules with their own ``RestrictedError``) breaks (:mod:`tests.support.policy_guards`)."""
    with policy_guards.restored():
        yield


FORBIDDEN_MODULES = {"os", "posix", "nt", "sys", "subprocess", "builtins", "io", "_io", "importlib", "codecs"}
FORBIDDEN_OBJECTS = [builtins.open, io.open, builtins.__import__, builtins.exec, builtins.eval, builtins.compile]
FORBIDDEN_OBJECTS += [builtins.getattr, builtins.setattr, builtins.delattr, vars(builtins)]
FORBIDDEN_FUNCTION_MODULES = {"os", "posix", "nt", "sys", "subprocess", "_posixsubprocess"}


def _violation(value: Any) -> str | None:
    if isinstance(value, types.ModuleType):
        real = value.__name__
        if real in FORBIDDEN_MODULES and real not in POLICY.STDLIB_ALLOWLIST:
            return f"module {real}"
        if real not in POLICY.STDLIB_ALLOWLIST:
            return f"module {real} (off the allowlist)"
        if real == "io" and hasattr(value, "open"):
            return "io with open"
        return None
    if any(value is bad for bad in FORBIDDEN_OBJECTS):
        return f"builtin {value!r}"
    if isinstance(value, types.FrameType | types.CodeType | types.TracebackType):
        return type(value).__name__
    if type(value) is dict and ("__builtins__" in value or any(value is vars(m) for m in list(sys.modules.values()))):
        return "a module's namespace or a globals dict"
    if callable(value) and getattr(value, "__module__", None) in FORBIDDEN_FUNCTION_MODULES:
        return f"function {value.__module__}.{getattr(value, '__name__', '?')}"
    return None


def _walk(packages: tuple[str, ...] = ()) -> tuple[dict[str, int], list[str]]:
    """The walk from every allowlisted standard module, or (``packages``) from those runtime modules only."""
    g = POLICY.make_globals("evaluator", packages)
    guarded_import = g["__builtins__"]["__import__"]
    getattr_, getitem, getiter = g["_getattr_"], g["_getitem_"], g["_getiter_"]
    queue: deque[tuple[Any, str, int]] = deque()
    for name in packages or sorted(POLICY.STDLIB_ALLOWLIST):
        module = guarded_import(name)
        for part in name.split(".")[1:]:
            module = getattr_(module, part)
        queue.append((module, name, 0))
    seen: set[int] = set()
    stats = {
        "modules": len(queue),
        "attributes": 0,
        "items": 0,
        "refused": 0,
        "objects": 0,
        "max_depth": 0,
        "iterated": 0,
    }
    found: list[str] = []
    while queue:
        obj, path, depth = queue.popleft()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        stats["objects"] += 1
        stats["max_depth"] = max(stats["max_depth"], depth)
        steps: list[tuple[str, Any]] = []
        try:
            names = sorted(set(dir(obj)))
        except Exception:  # noqa: BLE001 - some objects refuse dir(); nothing to walk
            names = []
        for name in names:
            if name.startswith("_") and name not in POLICY.DUNDER_READS:
                continue  # refused at compile time and by the guard
            stats["attributes"] += 1
            try:
                steps.append((f"{path}.{name}", getattr_(obj, name)))
            except POLICY.RestrictedError:
                stats["refused"] += 1
            except Exception:  # noqa: BLE001 - an attribute that raises reaches nothing
                continue
        if isinstance(obj, dict | list | tuple | set | frozenset) and len(obj) < 1000:
            keys = list(obj) if isinstance(obj, dict) else range(len(obj)) if isinstance(obj, list | tuple) else []
            for key in keys:
                stats["items"] += 1
                try:
                    steps.append((f"{path}[{key!r}]", getitem(obj, key)))
                except POLICY.RestrictedError:
                    stats["refused"] += 1
                except Exception:  # noqa: BLE001
                    continue
            # iteration (and a dict's items / .get): the same guard as item access
            iterated = [obj, obj.items(), obj.values()] if isinstance(obj, dict) else [obj]
            for index, source in enumerate(iterated):
                try:
                    for n, item in enumerate(getiter(source)):
                        stats["iterated"] += 1
                        for part in item if index == 1 else (item,):
                            steps.append((f"{path}<iter {n}>", part))
                except POLICY.RestrictedError:
                    stats["refused"] += 1
            if isinstance(obj, dict):
                get = getattr_(obj, "get")
                for key in list(obj):
                    stats["items"] += 1
                    try:
                        steps.append((f"{path}.get({key!r})", get(key)))
                    except POLICY.RestrictedError:
                        stats["refused"] += 1
        for step, value in steps:
            problem = _violation(value)
            if problem:
                found.append(f"{step} -> {problem}")
            elif depth + 1 <= DEPTH and id(value) not in seen:
                queue.append((value, step, depth + 1))
    return stats, found


def test_nothing_reachable_from_the_allowlist_leads_to_os_sys_subprocess_open_or_a_frame() -> None:
    stats, found = _walk()
    print(f"restricted walk: {stats}")  # the proof's size, for the record
    assert stats["modules"] >= 40 and stats["max_depth"] >= 3
    assert not found, "\n".join(found[:30])


def test_nothing_reachable_from_the_built_in_nemo_protocol_types_leads_out() -> None:
    """The metric interface's ``nemo_evaluator_sdk`` (runtimes/python/protocols/), importable under the
    policy for a metric class: the same walk from it."""
    folder = str(RUNTIMES_DIR / "python" / "protocols")
    sys.path.append(folder)
    try:
        stats, found = _walk(("nemo_evaluator_sdk",))
    finally:
        sys.path.remove(folder)
        sys.modules.pop("nemo_evaluator_sdk", None)
    assert stats["objects"] > 100 and stats["max_depth"] >= 3
    assert not found, "\n".join(found[:30])


def test_the_issues_walks_are_refused() -> None:
    """``json.codecs.sys`` and ``re.enum.sys`` reach ``os`` under RestrictedPython's own guard; not here."""
    g = POLICY.make_globals("evaluator")
    imp, getattr_ = g["__builtins__"]["__import__"], g["_getattr_"]
    for module, chain in (("json", "codecs"), ("re", "enum.sys"), ("typing", "sys"), ("dataclasses", "sys")):
        obj = imp(module)
        try:
            for part in chain.split("."):
                obj = getattr_(obj, part)
        except POLICY.RestrictedError:
            continue
        raise AssertionError(f"{module}.{chain} was reachable: {obj!r}")
    assert "os" not in {m.__name__ for m in sys.modules.values() if m is obj}
