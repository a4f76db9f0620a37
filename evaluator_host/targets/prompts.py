"""A target's prompt: a Jinja2 template rendered from a row in a sandbox, and the messages sent.

Contract:

* :class:`PromptTemplate` compiles a template once (``TargetError``, HTTP 400, naming the line, for a
  template that is not valid Jinja2) in the bounded sandbox of :mod:`evaluator_host.targets.sandbox`:
  no attribute starting with ``_``, no mutation of the row, no unsafe callables; ``StrictUndefined``
  (a column the row lacks is an error, not an empty string); no autoescaping (a prompt is not HTML).
* Bounds, so a template cannot hold the service: the source is at most ``MAX_TEMPLATE_CHARS``; the
  rendered text at most ``MAX_RENDERED_CHARS`` (rendering stops there); every loop, value and call is
  bounded as the sandbox's contract says (iterations, sizes refused before they are made, a render's
  time). Rendering fails with :class:`RenderError` (the row's error result) — a
  :class:`SandboxRefusal` when the template itself passed a bound —, never more.
* :func:`render_messages` renders on the prompt threads (``RENDER_THREADS`` of them, never the event
  loop's); :func:`row_messages` is the same, here.
* :meth:`PromptTemplate.check_columns` refuses (``FieldMappingError``, 422) a template naming a column
  that no row of the dataset has, with a "did you mean"; :meth:`PromptTemplate.check_row` refuses
  (``TargetError``, 400) one that passes a bound of the sandbox on a row (``POST /v1/jobs`` tries the
  dataset's first row): a template that fails so on every row never becomes a job.
* :func:`row_messages` makes the messages of a row: the optional system message, then the rendered
  prompt as the user message — or the row's ``messages_column`` (an OpenAI messages list, checked).
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from jinja2 import TemplateError, TemplateSyntaxError, meta
from jinja2.exceptions import SecurityError

from evaluator_host.errors import FieldMappingError, TargetError
from evaluator_host.targets.models import MAX_TEMPLATE_CHARS
from evaluator_host.targets.sandbox import (
    MAX_ITERATIONS,
    MAX_VALUE_CHARS,
    Guard,
    RenderError,
    SandboxRefusal,
    environment,
    guarded,
)

__all__ = [
    "MAX_ITERATIONS",
    "MAX_RENDERED_CHARS",
    "RENDER_THREADS",
    "PromptTemplate",
    "RenderError",
    "SandboxRefusal",
    "render_messages",
    "row_messages",
]

MAX_RENDERED_CHARS = MAX_VALUE_CHARS
RENDER_THREADS = 2  # renders at once in this process (off the event loop)
_ROLES = ("system", "user", "assistant", "tool", "developer")
_ENV = environment()
_GLOBALS = frozenset(_ENV.globals)
_THREADS = ThreadPoolExecutor(max_workers=RENDER_THREADS, thread_name_prefix="prompt-render")


class PromptTemplate:
    """A compiled prompt template (see the module's contract)."""

    def __init__(self, source: str, what: str = "target.prompt") -> None:
        if len(source) > MAX_TEMPLATE_CHARS:
            raise TargetError(f"{what} is longer than {MAX_TEMPLATE_CHARS:,} characters")
        self.what = what
        try:
            self.names = frozenset(meta.find_undeclared_variables(_ENV.parse(source))) - _GLOBALS
            self._template = _ENV.from_string(source)
        except TemplateSyntaxError as exc:
            raise TargetError(f"{what} is not a valid Jinja2 template: {exc.message} (line {exc.lineno})") from None

    def render(self, row: Mapping[str, Any]) -> str:
        """The text for ``row``, or :class:`RenderError` (a missing column, a bound, a sandbox refusal)."""
        return guarded(lambda guard: self._render(row, guard))

    def _render(self, row: Mapping[str, Any], guard: Guard) -> str:
        parts: list[str] = []
        size = 0
        try:
            for piece in self._template.generate(dict(row)):
                size += len(piece)
                if size > MAX_RENDERED_CHARS:
                    raise SandboxRefusal(f"the rendered prompt is longer than {MAX_RENDERED_CHARS:,} characters")
                guard.tick()
                parts.append(piece)
        except RenderError:
            raise
        except SecurityError as exc:
            raise SandboxRefusal(f"the prompt template does what the sandbox refuses: {exc}"[:500]) from None
        except TemplateError as exc:
            raise RenderError(f"the prompt template failed on this row: {exc.message or type(exc).__name__}") from None
        except (RecursionError, MemoryError) as exc:
            raise SandboxRefusal(f"the prompt template failed: {type(exc).__name__}: {exc}"[:500]) from None
        except (ArithmeticError, LookupError, TypeError, ValueError, AssertionError) as exc:
            raise RenderError(f"the prompt template failed on this row: {type(exc).__name__}: {exc}"[:500]) from None
        return "".join(parts)

    def check_columns(self, columns: list[str]) -> None:
        """``FieldMappingError`` (422) naming a template variable no row of the dataset has (with a "did you
        mean" from ``columns``); nothing without columns to compare with."""
        if not columns:
            return
        for name in sorted(self.names - set(columns)):
            guess = difflib.get_close_matches(name, columns, n=1, cutoff=0.6)
            hint = f"; did you mean `{guess[0]}`?" if guess else ""
            shown = ", ".join(repr(c) for c in columns[:50]) + (" …" if len(columns) > 50 else "")
            raise FieldMappingError(
                f"{self.what} uses {{{{ {name} }}}}, which no row of the dataset has{hint} (its columns: {shown})"
            )

    async def check_row(self, row: Mapping[str, Any]) -> None:
        """``TargetError`` (400) when rendering ``row`` passes a bound of the sandbox (rendered off the loop);
        a row the template cannot render otherwise (a missing column) is that row's error, not this one's."""
        try:
            await asyncio.get_running_loop().run_in_executor(_THREADS, self.render, row)
        except SandboxRefusal as exc:
            raise TargetError(f"{self.what} fails on the dataset's first row: {exc}") from None
        except RenderError:
            pass


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


async def render_messages(
    row: Mapping[str, Any], template: PromptTemplate | None, messages_column: str | None, system: str | None
) -> list[dict[str, Any]]:
    """:func:`row_messages` rendered on the prompt threads, never on the event loop."""
    if template is None:
        return row_messages(row, template, messages_column, system)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_THREADS, row_messages, row, template, messages_column, system)
