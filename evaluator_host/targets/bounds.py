"""The bounds of the prompt sandbox (:mod:`evaluator_host.targets.sandbox`): the limits, one render's
:class:`Guard` (iterations left, a CPU-time deadline) and the checks that size a value before it is made.

Contract: :func:`guarded` runs a render with a fresh guard current; :func:`current_guard` is it (ticking its
clock), and outside a render raises :class:`RenderError` (so Jinja2 folds nothing at compile time but
constants). Every ``check_*`` raises :class:`SandboxRefusal` past its bound; :func:`weight` estimates the
characters a value takes when written out, at a cost bounded by its ``limit``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from itertools import chain
from typing import Any

__all__ = [
    "MAX_GROUPS",
    "MAX_INT_BITS",
    "MAX_ITEMS",
    "MAX_ITERATIONS",
    "MAX_RENDER_S",
    "MAX_VALUE_CHARS",
    "Guard",
    "RenderError",
    "SandboxRefusal",
    "check_chars",
    "check_int_bits",
    "check_items",
    "check_size",
    "check_str_call",
    "checked",
    "current_guard",
    "guarded",
    "in_render",
    "join_size",
    "replace_size",
    "too_big",
    "weight",
]

MAX_VALUE_CHARS = 1024 * 1024  # characters of any string a template makes (and of the rendered prompt)
MAX_ITEMS = 100_000  # items of any list, tuple or dict a template makes; numbers of a range
MAX_ITERATIONS = 1_000_000  # loop iterations per render
MAX_GROUPS = 100_000  # lists made by one batch / slice
MAX_INT_BITS = 65_536  # an integer made by * or **
MAX_RENDER_S = 3.0  # CPU seconds of one render
_CLOCK_EVERY = 31  # the clock is read every 32 checks (each check's work is bounded: a read costs a system call)
_END = object()


class RenderError(Exception):
    """A row's prompt could not be made (the row's result is an error with this message)."""


class SandboxRefusal(RenderError):
    """The template passed a bound of the sandbox, or did what it refuses: its own doing, whatever the row."""


class Guard:
    """One render's budget: iterations left and a deadline in the rendering thread's CPU time (what a render
    costs the machine, whatever else runs: a loaded machine does not turn a bound into another)."""

    def __init__(self) -> None:
        self.left = MAX_ITERATIONS
        self.deadline = time.thread_time() + MAX_RENDER_S
        self._ticks = 0

    def tick(self) -> None:
        self._ticks += 1
        if not self._ticks & _CLOCK_EVERY and time.thread_time() > self.deadline:
            raise SandboxRefusal(f"the template takes more than {MAX_RENDER_S:g} s of CPU to render")

    def spend(self, n: int = 1) -> None:
        self.left -= n
        if self.left < 0:
            raise SandboxRefusal(f"the template iterates more than {MAX_ITERATIONS:,} times")
        self.tick()


_GUARD: ContextVar[Guard | None] = ContextVar("evaluator_host_prompt_guard", default=None)


def current_guard() -> Guard:
    """The render's guard; outside a render (Jinja2 folding constants at compile time) nothing is evaluated."""
    found = _GUARD.get()
    if found is None:
        raise RenderError("not evaluated outside a render")
    found.tick()
    return found


def in_render() -> bool:
    """A render is current (its guard is set)."""
    return _GUARD.get() is not None


def guarded(render: Callable[[Guard], str]) -> str:
    """``render(guard)`` with a fresh :class:`Guard` current (what the sandbox's bounds read)."""
    guard = Guard()
    token = _GUARD.set(guard)
    try:
        return render(guard)
    finally:
        _GUARD.reset(token)


def weight(value: Any, limit: int = MAX_VALUE_CHARS, indent: int = 0) -> int:
    """About the characters ``str(value)`` takes (at least that many for strings, containers and numbers;
    with ``indent``, written one item a line indented ``indent`` a level, as ``tojson`` and ``pprint`` may),
    counted only until it passes ``limit`` (then it answers at once): its cost is bounded by ``limit``."""
    total = 0
    stack: list[Iterator[Any]] = [iter((value,))]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
            continue
        if indent:
            total += 1 + indent * len(stack)
        if isinstance(item, str):
            total += len(item) + 2
        elif isinstance(item, (bytes, bytearray)):
            total += 4 * len(item) + 3
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += 2
            stack.append(iter(item))
        elif isinstance(item, dict):
            total += 2
            stack.append(chain.from_iterable(item.items()))
        elif isinstance(item, int):
            total += 2 + item.bit_length() // 3
        else:
            total += 24
        if total > limit:
            return total
    return total


def too_big(what: str) -> SandboxRefusal:
    return SandboxRefusal(f"the template makes {what}")


def check_chars(size: int) -> None:
    if size > MAX_VALUE_CHARS:
        raise too_big(f"a value of more than {MAX_VALUE_CHARS:,} characters")


def check_items(size: int) -> None:
    if size > MAX_ITEMS:
        raise too_big(f"a list of more than {MAX_ITEMS:,} items (a value too large)")


def check_size(value: Any, what: str = "a value") -> None:
    """Refuses ``value`` when writing it out would pass ``MAX_VALUE_CHARS``."""
    if weight(value) > MAX_VALUE_CHARS:
        raise too_big(f"{what} of more than {MAX_VALUE_CHARS:,} characters")


def checked(result: Any) -> Any:
    """A call's or filter's result, refused past a bound (only small-factor growth can reach here)."""
    if isinstance(result, (str, bytes)):
        check_chars(len(result))
    elif isinstance(result, (list, tuple, dict, set, frozenset)):
        check_items(len(result))
    return result


def check_int_bits(bits: int) -> None:
    if bits > MAX_INT_BITS:
        raise too_big(f"an integer of more than {MAX_INT_BITS:,} bits")


def replace_size(s: Any, old: Any, new: Any, count: Any) -> int:
    if not isinstance(s, (str, bytes)) or not isinstance(old, type(s)) or not isinstance(new, type(s)):
        return len(s)  # the call itself refuses the types
    text: Any = s
    hits: int = text.count(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return len(s) + hits * max(0, len(new) - len(old))


def join_size(separator: Any, items: list[Any]) -> int:
    total = weight(separator) * max(0, len(items) - 1)
    for item in items:
        total += weight(item, MAX_VALUE_CHARS - total)
        if total > MAX_VALUE_CHARS:
            break
    return total


def check_str_call(s: str | bytes, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuses, before it runs, a str (or bytes) method call whose result would pass a bound."""
    if name in ("center", "ljust", "rjust", "zfill"):
        width = args[0] if args else kwargs.get("width", 0)
        if isinstance(width, int):
            check_chars(width)
    elif name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        if isinstance(size, int):
            tab = "\t" if isinstance(s, str) else b"\t"
            check_chars(len(s) + s.count(tab) * max(0, size))  # type: ignore[arg-type]
    elif name == "replace":
        padded = (*args, None, None, -1)
        check_chars(replace_size(s, padded[0], padded[1], kwargs.get("count", padded[2])))
    elif name in ("translate", "maketrans"):
        raise SandboxRefusal(f"str.{name} is not available in prompt templates")
