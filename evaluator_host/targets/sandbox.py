"""The prompt templates' sandbox: Jinja2's :class:`~jinja2.sandbox.ImmutableSandboxedEnvironment` with every
path that makes a value, or repeats work, bounded — so a template cannot hold the service whatever it does.

Contract (one :class:`Guard` per render, set with :func:`guarded`; outside a render nothing is evaluated at
compile time but constants):

* **Loops.** Every ``{% for %}`` (recursive loops' ``loop(...)`` too) iterates through a counter: at most
  ``MAX_ITERATIONS`` iterations per render, whatever is iterated (a row's list, a string made by ``*``,
  ``~`` or ``replace``, a filter's result). A ``range`` holds at most ``MAX_ITERATIONS`` numbers.
* **Sizes, refused before the value is made.** No operation may make a string past ``MAX_VALUE_CHARS``
  characters or a list, tuple or dict past ``MAX_ITEMS`` items: ``*`` and ``+`` on strings and lists,
  ``~`` (the size of what it joins), ``str.replace`` / the ``replace`` filter (the occurrences counted
  first), ``join`` (method and filter), ``center`` / ``ljust`` / ``rjust`` / ``zfill`` / ``expandtabs``,
  ``str.format`` / ``format_map`` (each field's width, precision and value, and their sum), ``batch`` /
  ``slice`` (at most ``MAX_GROUPS`` groups), ``sum`` (numbers only), and the filters that write a value
  out (``tojson``, ``pprint`` with their indentation, ``string``, ``escape``, …: the value's size first;
  ``urlize`` is not kept). Integers stay under ``MAX_INT_BITS`` bits through ``*`` and ``**``. Every
  ``{{ … }}`` is sized before it is written, and a block's text (``{% set %}``, macros, ``{% filter %}``)
  before it is joined. Any other call's or filter's result past a bound is refused (those can only grow
  their input by a small factor).
* **Time.** A render stops after ``MAX_RENDER_S`` seconds of its thread's CPU time (checked every 32 loop
  iterations, calls, filters, operators and outputs).
* The limits, the guard and the size checks are :mod:`evaluator_host.targets.bounds`'s; this module
  applies them at every path of Jinja2's. A bound passed raises :class:`SandboxRefusal` (the template's
  own doing, whatever the row): so does what the sandbox refuses (``_`` attributes, unsafe callables,
  mutation). :class:`RenderError` is its base: a row the template cannot render (a missing column, a
  type error).
"""

from __future__ import annotations

import functools
import re
import types
from collections.abc import Callable, Iterable, Iterator
from string import Formatter
from typing import Any

from jinja2 import StrictUndefined, nodes
from jinja2.compiler import CodeGenerator, Frame, optimizeconst
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEscapeFormatter, SandboxedFormatter
from markupsafe import Markup

from evaluator_host.targets.bounds import (
    MAX_GROUPS,
    MAX_INT_BITS,
    MAX_ITEMS,
    MAX_ITERATIONS,
    MAX_RENDER_S,
    MAX_VALUE_CHARS,
    Guard,
    RenderError,
    SandboxRefusal,
    check_chars,
    check_int_bits,
    check_items,
    check_size,
    check_str_call,
    checked,
    current_guard,
    guarded,
    in_render,
    join_size,
    replace_size,
    too_big,
    weight,
)

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
    "environment",
    "guarded",
    "weight",
]

_KEPT_FILTERS = (
    "abs attr batch capitalize count d default dictsort e escape first float forceescape int items join last "
    "length list lower map max min pprint reject rejectattr replace reverse round safe select selectattr slice "
    "sort string striptags sum title tojson trim truncate unique upper urlencode wordcount xmlattr"
).split()
# filters that write their value out (their output grows with the value's size): the value is sized first
_WRITERS = frozenset(
    "capitalize e escape forceescape lower safe string striptags title trim truncate upper urlencode wordcount "
    "xmlattr".split()
)
# filters whose result is as long as their value: a sized value (a range) is checked first
_SAME_LENGTH = frozenset("dictsort items list map reject rejectattr reverse select selectattr sort unique".split())
_COUNT_FILTER = "_counted_loop"


def counted_loop(value: Any) -> Iterator[Any]:
    """What every ``{% for %}`` iterates: ``value``, each item counted against the render's iterations."""
    guard = current_guard()

    def counted() -> Iterator[Any]:
        for item in value:
            guard.spend()
            yield item

    return counted()


def _range(*args: int) -> range:
    span = range(*args)
    try:
        size = len(span)
    except OverflowError:
        size = MAX_ITERATIONS + 1
    if size > MAX_ITERATIONS:
        raise too_big(f"a range of more than {MAX_ITERATIONS:,} numbers")
    return span


# -- filters ------------------------------------------------------------------------------------------
def _pre_join(args: list[Any], kwargs: dict[str, Any], at: int) -> None:
    items = list(args[at])
    args[at] = items
    separator = args[at + 1] if len(args) > at + 1 else kwargs.get("d", "")
    check_chars(join_size(separator, items))


def _pre_replace(args: list[Any], kwargs: dict[str, Any], at: int) -> None:
    s = args[at]
    if not isinstance(s, str):
        check_size(s)
        s = args[at] = str(s)
    rest = (*args[at + 1 :], "", "", None)
    check_size(rest[0])
    check_size(rest[1])
    check_chars(replace_size(s, str(rest[0]), str(rest[1]), kwargs.get("count", rest[2])))


def _pre_groups(args: list[Any], kwargs: dict[str, Any], at: int, name: str) -> None:
    items = list(args[at])
    args[at] = items
    size = args[at + 1] if len(args) > at + 1 else kwargs.get("linecount" if name == "batch" else "slices", 1)
    if not isinstance(size, int):
        return
    groups = -(-len(items) // max(size, 1)) if name == "batch" else size
    if groups > MAX_GROUPS or (name == "batch" and size > MAX_ITEMS):
        raise too_big(f"more than {MAX_GROUPS:,} groups ({name})")


def _indented(name: str, args: list[Any], kwargs: dict[str, Any], at: int) -> None:
    given = args[at + 1] if len(args) > at + 1 else kwargs.get("indent")
    indent = 1 if name == "pprint" else len(given) if isinstance(given, str) else given if isinstance(given, int) else 0
    if weight(args[at], MAX_VALUE_CHARS, min(max(indent, 0), MAX_VALUE_CHARS)) > MAX_VALUE_CHARS:
        raise too_big(f"a value of more than {MAX_VALUE_CHARS:,} characters ({name})")


def _pre_sum(args: list[Any], kwargs: dict[str, Any], at: int) -> None:
    start = args[at + 2] if len(args) > at + 2 else kwargs.get("start", 0)
    if not isinstance(start, (int, float)):
        raise SandboxRefusal("the sum filter adds numbers only in prompt templates")


def _bounded_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` (a Jinja2 filter) with the module's bounds checked before it runs and on its result."""
    at = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0  # the value's position

    @functools.wraps(func)
    def bounded(*given: Any, **kwargs: Any) -> Any:
        current_guard()
        args = list(given)
        if len(args) > at:
            if name == "join":
                _pre_join(args, kwargs, at)
            elif name == "replace":
                _pre_replace(args, kwargs, at)
            elif name in ("batch", "slice"):
                _pre_groups(args, kwargs, at, name)
            elif name == "sum":
                _pre_sum(args, kwargs, at)
            elif name in _WRITERS:
                check_size(args[at])
            elif name in ("tojson", "pprint"):  # one item a line, indented by its depth
                _indented(name, args, kwargs, at)
            elif name in _SAME_LENGTH and isinstance(args[at], range):
                check_items(len(args[at]))
        return checked(func(*args, **kwargs))

    return bounded


# -- str.format ---------------------------------------------------------------------------------------
_SPEC = re.compile(r"(?:.?[<>=^])?[-+ ]?z?#?0?(?P<width>\d*)[,_]?(?:\.(?P<precision>\d+))?[a-zA-Z%]?\Z", re.S)


class _FormatBounds(Formatter):
    """Sizes each field before it is formatted, and their sum (the literal text is the format string's)."""

    written = 0

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if conversion:
            check_size(value, "a formatted field")
        return super().convert_field(value, conversion)

    def format_field(self, value: Any, format_spec: str) -> Any:
        current_guard()
        spec = _SPEC.match(format_spec)
        if spec is None:
            raise SandboxRefusal(f"the format spec {format_spec[:50]!r} is not available in prompt templates")
        width = int(spec["width"] or 0)
        precision = int(spec["precision"] or 0)
        check_chars(width)
        check_chars(precision)
        self.written += max(width, weight(value, MAX_VALUE_CHARS - self.written)) + precision
        check_chars(self.written)
        return super().format_field(value, format_spec)


class _Formatter(_FormatBounds, SandboxedFormatter):
    pass


class _EscapeFormatter(_FormatBounds, SandboxedEscapeFormatter):
    pass


# -- the environment ----------------------------------------------------------------------------------
class _CodeGenerator(CodeGenerator):
    """Jinja2's, with ``~`` sized before it joins (:meth:`_Environment.bounded_concat`)."""

    @optimizeconst
    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        if frame.eval_ctx.volatile:
            join = "(markup_join if context.eval_ctx.volatile else str_join)"
        elif frame.eval_ctx.autoescape:
            join = "markup_join"
        else:
            join = "str_join"
        self.write(f"environment.bounded_concat({join}, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _bounded_join(pieces: Iterable[str]) -> str:
    """A block's text (``environment.concat``): its pieces sized before they are joined."""
    parts = list(pieces)
    check_chars(sum(map(len, parts)))
    return "".join(parts)


def _finalize(value: Any) -> Any:
    """Every ``{{ … }}``: sized before it is written."""
    if in_render():
        current_guard()
    check_size(value)
    return value


class _Environment(ImmutableSandboxedEnvironment):
    """The sandbox with the bounds of the module's contract."""

    code_generator_class = _CodeGenerator
    intercepted_binops = frozenset({"*", "**", "%", "+"})
    concat = staticmethod(_bounded_join)

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        """The template's tree, every ``{% for %}`` iterating through :func:`counted_loop`."""
        tree = super()._parse(source, name, filename)
        for loop in list(tree.find_all(nodes.For)):
            loop.iter = nodes.Filter(loop.iter, _COUNT_FILTER, [], [], None, None, lineno=loop.iter.lineno)
        tree.set_environment(self)
        return tree

    def bounded_concat(self, join: Callable[[Iterable[Any]], str], values: tuple[Any, ...]) -> str:
        current_guard()
        total = 0
        for value in values:
            total += weight(value, MAX_VALUE_CHARS - total)
            check_chars(total)
        return join(values)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        current_guard()
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, (str, bytes)) and isinstance(times, int):
                    check_chars(len(seq) * times)
                elif isinstance(seq, (list, tuple)) and isinstance(times, int):
                    check_items(len(seq) * times)
            if isinstance(left, int) and isinstance(right, int):
                check_int_bits(left.bit_length() + right.bit_length())
        elif operator == "+":
            if isinstance(left, (str, bytes)) and isinstance(right, (str, bytes)):
                check_chars(len(left) + len(right))
            elif isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
                check_items(len(left) + len(right))
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
                if left.bit_length() * right > MAX_INT_BITS:
                    raise too_big(f"an integer of more than {MAX_INT_BITS:,} bits (an exponent too large)")
        elif operator == "%" and isinstance(left, str):  # "%" formatting can pad to any width
            raise SandboxRefusal("the % string formatting operator is not available in prompt templates")
        return self.binop_table[operator](left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (Jinja2's)
        current_guard()
        for value in (*args, *kwargs.values()):  # a lazy range made into a container: sized first
            if isinstance(value, range):
                check_items(len(value))
        if isinstance(__obj, LoopContext) and args:  # a recursive loop's next level: counted like any loop
            args = (counted_loop(args[0]), *args[1:])
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, (str, bytes)):
            name = getattr(__obj, "__name__", "")
            if name == "join" and args:
                items = list(args[0])
                check_chars(join_size(owner, items))
                args = (items, *args[1:])
            else:
                check_str_call(owner, name, args, kwargs)
        return checked(super().call(__context, __obj, *args, **kwargs))

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """``str.format`` / ``format_map`` of a string, bounded (:class:`_FormatBounds`), else None."""
        if not isinstance(value, (types.MethodType, types.BuiltinMethodType)) or value.__name__ not in (
            "format",
            "format_map",
        ):
            return None
        text = value.__self__
        if not isinstance(text, str):
            return None
        is_map = value.__name__ == "format_map"

        def bounded(*args: Any, **kwargs: Any) -> str:
            current_guard()
            formatter: _FormatBounds
            formatter = _EscapeFormatter(self, escape=text.escape) if isinstance(text, Markup) else _Formatter(self)
            if is_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument, no keyword arguments")
                kwargs, args = args[0], ()
            return type(text)(formatter.vformat(text, args, kwargs))

        return functools.update_wrapper(bounded, value)


def environment() -> _Environment:
    """A new sandbox (see the module's contract): the kept filters, bounded; ``range`` and ``dict``."""
    env = _Environment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True, finalize=_finalize)
    kept = {name: _bounded_filter(name, env.filters[name]) for name in _KEPT_FILTERS if name in env.filters}
    env.filters = {**kept, _COUNT_FILTER: counted_loop}
    env.globals = {"dict": dict, "range": _range}
    return env
