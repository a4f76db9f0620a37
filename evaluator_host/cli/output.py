"""What the command line prints of evaluations: the capability report, the results table, and a
refused definition's error at its place (``FILE:LINE:COLUMN: Type: message``, the source line and a
caret under the column, as compilers print them).

Shared by ``run`` (``cli/main.py``: one case or a few) and ``run --data`` (``cli/evaluate/batch.py``: the
evaluator's report before its job), so neither imports the other.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rich.console import Console
from rich.table import Table

from evaluator_host.evaluation.models import EvaluationResult
from evaluator_host.evaluation.outcomes.aggregate import aggregate

__all__ = ["located_error", "print_capabilities", "print_results"]

_PLACE = re.compile(r" \(line \d+(?:, column \d+)?\)(?=$|;)")  # the place the message says again (before a hint)


_ABOUT_THE_CODE = frozenset({"SyntaxError", "CodeSyntaxError", "InterfaceError", "PolicyError", "PackageSpecError"})


def located_error(path: str, code: str, type_name: str, message: str, line: int | None, column: int | None) -> str:
    """A definition error as ``PATH:LINE:COLUMN: Type: message``, then the source line and a caret under
    the column; an error about the code that names no line is ``PATH: Type: message``, and any other
    (a limit on the cases, a dataset's problem) is ``Type: message``: the file is not where it lies."""
    if not line:
        return f"{path}: {type_name}: {message}" if type_name in _ABOUT_THE_CODE else f"{type_name}: {message}"
    where = f"{path}:{line}:{column}" if column else f"{path}:{line}"
    text = f"{where}: {type_name}: {_PLACE.sub('', message)}"
    lines = code.splitlines()
    if 0 < line <= len(lines):
        source = lines[line - 1]
        text += f"\n    {source.expandtabs(4)}"
        if column:  # under the column's character, tabs shown as the line shows them
            text += "\n    " + " " * len(source[: column - 1].expandtabs(4)) + "^"
    return text


def print_capabilities(capabilities: dict[str, list[dict[str, Any]]] | None, console: Console) -> None:
    """The definition's capability report, once: what it reaches for that the sandbox will refuse."""
    found = [(kind, item) for kind, items in (capabilities or {}).items() for item in items]
    if not found:
        console.print("[dim]capabilities: none found (no network, files, processes, env, dynamic code, native)[/dim]")
        return
    console.print("[bold]capabilities[/bold] (static and advisory; the sandbox has no network and a read-only root):")
    for kind, item in found:
        console.print(f"  {kind:<13} line {item['line']}: {item['detail']}", highlight=False, markup=False)


def print_results(results: list[EvaluationResult], console: Console) -> None:
    """The results as a table, then each one's output and warnings, then (several) their aggregate."""
    table = Table(title="results")
    for column in ("#", "status", "score", "passed", "outputs / error", "ms"):
        table.add_column(column)
    for index, result in enumerate(results):
        info = (
            (
                f"{result.error.type}: {result.error.message}"
                + (f" (line {result.error.line})" if result.error.line else "")
            )
            if result.error
            else json.dumps(result.outputs or result.details)
        )
        table.add_row(
            str(index),
            result.status,
            "" if result.score is None else f"{result.score:g}",
            "" if result.passed is None else str(result.passed),
            info[:200],
            f"{result.duration_ms:.2f}",
        )
    console.print(table)
    for result in results:
        for stream in ("stdout", "stderr"):
            if getattr(result, stream):
                console.print(f"[dim]{stream}:[/dim] {getattr(result, stream).rstrip()}")
        for warning in result.warnings:
            console.print(f"[yellow]warning:[/yellow] {warning}")
    if len(results) > 1:
        agg = aggregate(results)
        mean = agg.score.mean if agg.score else None  # full precision: --json
        console.print(
            f"count={agg.count} errors={agg.errors} mean score={'none' if mean is None else f'{mean:.4g}'} "
            f"pass rate={'none' if agg.pass_rate is None else f'{agg.pass_rate:.2%}'}"
        )
