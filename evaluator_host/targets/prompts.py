"""A target's prompt: a Jinja2 template rendered from a row in a sandbox, and the messages sent.

Contract:

* :class:`PromptTemplate` compiles a template once (``TargetError``, HTTP 400, naming the line, for a
  template that is not valid Jinja2) in an :class:`~jinja2.sandbox.ImmutableSandboxedEnvironment`:
  no attribute starting with ``_``, no mutation of the row, no unsafe callables; ``StrictUndefined``
  (a column the row lacks is an error, not an empty string); no autoescaping (a prompt is not HTML).
* Bounds, so a template cannot hold the service: the source is at most ``MAX_TEMPLATE_CHARS``; the
  rendered text at most ``MAX_RENDERED_CHARS`` (rendering stops there); ``*``, ``**`` and ``%`` on
  strings and lists may not make a value past that size; iterating (``range``, the row's lists,
  dicts and strings) counts against ``MAX_ITERATIONS`` per render; the filters and globals that can
  make large values from small ones (``center``, ``indent``, ``wordwrap``, ``format``, ``lipsum``, …)
  are not there. Rendering fails with :class:`RenderError` (the row's error result), never more.
* :func:`row_messages` makes the messages of a row: the optional system message, then the rendered
  prompt as the user message — or the row's ``messages_column`` (an OpenAI messages list, checked).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from jinja2 import StrictUndefined, TemplateError, TemplateSyntaxError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from evaluator_host.errors import TargetError
from evaluator_host.targets.models import MAX_TEMPLATE_CHARS

__all__ = ["MAX_ITERATIONS", "MAX_RENDERED_CHARS", "PromptTemplate", "RenderError", "row_messages"]

MAX_RENDERED_CHARS = 1024 * 1024
MAX_ITERATIONS = 1_000_000
_FILTERS_KEPT = (
    "abs attr batch capitalize count d default dictsort e escape first float forceescape int items join last "
    "length list lower map max min pprint reject rejectattr replace reverse round safe select selectattr slice "
    "sort string striptags sum title tojson trim truncate unique upper urlencode urlize wordcount xmlattr"
).split()
_ROLES = ("system", "user", "assistant", "tool", "developer")


class RenderError(Exception):
    """A row's prompt could not be made (the row's result is an error with this message)."""


class _Budget:
    def __init__(self) -> None:
        self.left = MAX_ITERATIONS

    def spend(self, n: int = 1) -> None:
        self.left -= n
        if self.left < 0:
            raise RenderError(f"the template iterates more than {MAX_ITERATIONS:,} times")


class _List(list[Any]):
    budget: _Budget

    def __iter__(self) -> Iterator[Any]:
        for item in super().__iter__():
            self.budget.spend()
            yield item


class _Dict(dict[str, Any]):
    budget: _Budget

    def __iter__(self) -> Iterator[str]:
        for key in super().__iter__():
            self.budget.spend()
            yield key

    def items(self) -> Any:  # counted like iteration
        self.budget.spend(len(self))
        return super().items()

    def values(self) -> Any:
        self.budget.spend(len(self))
        return super().values()


class _Str(str):
    budget: _Budget

    def __iter__(self) -> Iterator[str]:
        for char in super().__iter__():
            self.budget.spend()
            yield char


def _counted(value: Any, budget: _Budget) -> Any:
    """``value`` (a row's JSON data) with its lists, dicts and strings counting iteration in ``budget``."""
    if isinstance(value, str):
        out: Any = _Str(value)
    elif isinstance(value, dict):
        out = _Dict({k: _counted(v, budget) for k, v in value.items()})
    elif isinstance(value, list):
        out = _List(_counted(v, budget) for v in value)
    else:
        return value
    out.budget = budget
    return out


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else 0


class _Environment(ImmutableSandboxedEnvironment):
    """The sandbox with the bounds of the module's contract on ``*``, ``**`` and ``%``."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def call_binop(self, context: Any, operator_: str, left: Any, right: Any) -> Any:
        if operator_ == "*":
            for seq, times in ((left, right), (right, left)):
                if _size(seq) and isinstance(times, int) and _size(seq) * times > MAX_RENDERED_CHARS:
                    raise RenderError(f"a value of more than {MAX_RENDERED_CHARS:,} characters")
            return operator.mul(left, right)
        if operator_ == "**":
            if isinstance(right, int) and abs(right) > 1000:
                raise RenderError("an exponent above 1000")
            return operator.pow(left, right)
        if isinstance(left, str):  # "%" formatting can pad to any width
            raise RenderError("the % string formatting operator is not available in prompts")
        return operator.mod(left, right)


def _environment() -> _Environment:
    env = _Environment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
    env.filters = {name: env.filters[name] for name in _FILTERS_KEPT if name in env.filters}
    env.globals = {"dict": dict}
    return env


_ENV = _environment()


class PromptTemplate:
    """A compiled prompt template (see the module's contract)."""

    def __init__(self, source: str, what: str = "target.prompt") -> None:
        if len(source) > MAX_TEMPLATE_CHARS:
            raise TargetError(f"{what} is longer than {MAX_TEMPLATE_CHARS:,} characters")
        try:
            self._template = _ENV.from_string(source)
        except TemplateSyntaxError as exc:
            raise TargetError(f"{what} is not a valid Jinja2 template: {exc.message} (line {exc.lineno})") from None

    def render(self, row: Mapping[str, Any]) -> str:
        """The text for ``row``, or :class:`RenderError` (a missing column, a bound, a sandbox refusal)."""
        budget = _Budget()
        context = {k: _counted(v, budget) for k, v in row.items()}
        context["range"] = _counted_range(budget)
        parts: list[str] = []
        size = 0
        try:
            for piece in self._template.generate(context):
                size += len(piece)
                if size > MAX_RENDERED_CHARS:
                    raise RenderError(f"the rendered prompt is longer than {MAX_RENDERED_CHARS:,} characters")
                parts.append(piece)
        except RenderError:
            raise
        except TemplateError as exc:
            raise RenderError(f"the prompt template failed on this row: {exc.message or type(exc).__name__}") from None
        except (ArithmeticError, LookupError, TypeError, ValueError, RecursionError, MemoryError) as exc:
            raise RenderError(f"the prompt template failed on this row: {type(exc).__name__}: {exc}"[:500]) from None
        return "".join(parts)


def _counted_range(budget: _Budget) -> Callable[..., Iterator[int]]:
    def counted(*args: int) -> Iterator[int]:
        span = range(*args)
        budget.spend(len(span))
        return iter(span)

    return counted


def _checked_messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise RenderError("the messages column does not hold a non-empty list of messages")
    for message in value:
        if not isinstance(message, dict) or message.get("role") not in _ROLES or "content" not in message:
            raise RenderError('each message needs a "role" (system, user, assistant, tool, developer) and "content"')
    return [dict(m) for m in value]


def row_messages(
    row: Mapping[str, Any], template: PromptTemplate | None, messages_column: str | None, system: str | None
) -> list[dict[str, Any]]:
    """The messages sent for ``row`` (see the module's contract); :class:`RenderError` when it has none."""
    if template is not None:
        messages = [{"role": "user", "content": template.render(row)}]
    else:
        if messages_column is None or messages_column not in row:
            raise RenderError(f"the row has no {messages_column!r} column")
        messages = _checked_messages(row[messages_column])
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    return messages
