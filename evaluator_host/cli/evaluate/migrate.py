"""``evaluator-host migrate PATH... [--write] [--diff] [--check-with ROWS.jsonl] [--correct-answer-key K]``.

Files and directories (searched for the registry's suffixes; hidden folders, ``node_modules`` and
virtualenvs skipped). Without ``--write`` nothing is written: each file that would change is
listed (``--diff`` prints the unified diff). ``--check-with`` runs the differential check in this
process first: the original and the migrated code on every row of a JSONL file of cases
(``{"inputs", "outputs", "trace", "app_params"}``), compared as the API compares them; a file
whose answers differ is not written. Rows that compare nothing (a field the legacy code reads null on
every row, or every row an error on both versions: :mod:`evaluator_host.migration.coverage`) check
nothing: that file is not written either, and the fields some rows lack are printed as warnings.

Exit codes (like bump-pydantic and pyupgrade, fit for CI): 0 nothing left to migrate (or every
file written); 1 a file would change (check mode), or answered differently under ``--check-with``;
2 a file was refused, does not parse, the ``--check-with`` rows compare nothing for it, or the
arguments are wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from evaluator_host.cli.evaluate.judge import Judge, judge_of, start_private, with_judge
from evaluator_host.cli.evaluate.judge import add_options as add_judge_options
from evaluator_host.cli.evaluate.judge import given as judge_given
from evaluator_host.cli.inputs import UsageError
from evaluator_host.definitions import languages
from evaluator_host.errors import EvaluatorHostError, NothingCompared

if TYPE_CHECKING:  # the codemods and the evaluation path load when the command runs, not for the parser
    from evaluator_host.evaluation.models import Case
    from evaluator_host.migration.codemod import Migration

__all__ = ["add_parser", "files_of"]

_SKIP = {"node_modules", ".venv", "venv", "__pycache__", "site-packages"}


def files_of(paths: list[str]) -> Iterator[Path]:
    """Every evaluator file under ``paths``, in order (a file given by name is always included)."""
    for given in paths:
        path = Path(given)
        if path.is_dir():
            for found in sorted(path.rglob("*")):
                parts = found.relative_to(path).parts
                if any(p in _SKIP or p.startswith(".") for p in parts[:-1]):
                    continue
                if found.is_file() and languages.by_suffix(found.suffix) is not None:
                    yield found
        else:
            yield path


@dataclass
class _Checked:
    """One file's differential run: the rows that differ, what the rows did not exercise, or why they
    compared nothing (then nothing else is known)."""

    rows: list[dict[str, object]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    nothing: NothingCompared | None = None


async def _check(
    items: list[tuple[Path, str, Migration]], cases: list[Case], key: str, judge: Judge
) -> dict[Path, _Checked]:
    """Each migrated file's run on ``cases``: the differential run of the API
    (:func:`~evaluator_host.migration.compare.differential_run`) in-process, on a private scratch data dir,
    with the API's checks that the rows compare something (``key``: the correct_answer_key); ``judge``'s hosts
    and secrets in it, both versions given them."""
    from evaluator_host.evaluation.models import EvaluatorSettings
    from evaluator_host.evaluation.usecases import Definition
    from evaluator_host.migration.compare import differential_run
    from evaluator_host.migration.coverage import Rows, check_answers, check_rows, columns_of
    from evaluator_host.tenancy.models import DEFAULT_WORKSPACE

    services = await start_private(judge)
    found: dict[Path, _Checked] = {}
    rows = Rows(cases, columns_of(cases), dataset=False)
    try:
        for path, language, migration in items:
            checked = found[path] = _Checked()
            try:
                checked.warnings = check_rows(migration.reads, key, rows)
                # the legacy code's correct_answer comes from inputs[key], as the migrated code reads it
                legacy = EvaluatorSettings(correct_answer_key=key)
                before = with_judge(Definition(language, migration.original, settings=legacy), judge)
                after = with_judge(Definition(language, migration.code), judge)
                run = await differential_run(services, DEFAULT_WORKSPACE, before, after, cases)
                checked.rows = run.rows
                if not run.rows:
                    checked.warnings += check_answers(run.before, run.after, rows.columns)
            except NothingCompared as exc:
                checked.nothing = exc
    finally:
        await services.close()
    return found


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")


def _run(args: argparse.Namespace) -> int:
    from evaluator_host.evaluation.models import Case
    from evaluator_host.migration.codemod import migrate

    if judge_given(args) and not args.check_with:  # never silently ignored
        raise UsageError("--secret/--network/--env apply to --check-with's run: without it nothing runs")
    judge = judge_of(args, local=True)
    out = sys.stdout
    status = 0
    changed: list[tuple[Path, str, Migration]] = []
    for path in files_of(args.paths):
        language = languages.by_suffix(path.suffix)
        if language is None or not path.is_file():
            sys.stderr.write(f"{path}: not an evaluator file (suffixes: .py .js .ts ...)\n")
            status = 2
            continue
        try:
            migration = migrate(language.name, path.read_text(), args.correct_answer_key)
        except EvaluatorHostError as exc:
            line = getattr(exc, "line", None)
            sys.stderr.write(f"{path}{f':{line}' if line else ''}: refused ({exc.type_name}): {exc.message}\n")
            status = 2
            continue
        if not migration.changed:
            _say(f"{path}: unchanged ({migration.interface_before})")
            continue
        changed.append((path, language.name, migration))
    checks: dict[Path, _Checked] = {}
    if args.check_with and changed:
        lines = Path(args.check_with).read_text().splitlines()
        cases = [Case.model_validate_json(line) for line in lines if line.strip()]
        checks = asyncio.run(_check(changed, cases, args.correct_answer_key, judge))
    for path, _language, migration in changed:
        check = checks.get(path, _Checked())
        rows = check.rows
        if args.diff:
            out.write(migration.diff(str(path).lstrip("/")))
        if check.nothing is not None:
            _say(f"{path}: NOT migrated: {args.check_with} checks nothing: {check.nothing.message}")
            status = 2
            continue
        if rows:
            _say(f"{path}: NOT migrated: answers differ on {len(rows)} row(s) of {args.check_with}")
            for row in rows[:5]:
                _say(f"  row {row['index']}: {json.dumps(row['before'])} -> {json.dumps(row['after'])}")
            status = max(status, 1)
            continue
        verb = "migrated" if args.write else "would migrate"
        checked = " (same answers on every row)" if args.check_with else ""
        _say(f"{path}: {verb} ({', '.join(migration.rules)}){checked}")
        for warning in check.warnings:
            _say(f"  {path}: warning: {warning}")
        for note in migration.notes:
            _say(f"  {path}{f':{note.line}' if note.line else ''}: {note.message}")
        if args.write:
            path.write_text(migration.code)
        else:
            status = max(status, 1)
    return status


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``migrate`` on the CLI's subcommands."""
    parser = sub.add_parser(
        "migrate",
        help="rewrite legacy evaluate(app_params, inputs, output, correct_answer) evaluators to v2",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="evaluator files or directories")
    parser.add_argument("--write", action="store_true", help="rewrite the files in place")
    parser.add_argument("--diff", action="store_true", help="print the unified diff of each file that changes")
    parser.add_argument("--check-with", metavar="ROWS.jsonl", help="run both versions on these cases first")
    add_judge_options(parser, "--check-with: ")
    parser.add_argument(
        "--correct-answer-key", default="correct_answer", help="the inputs key legacy correct_answer came from"
    )
    parser.set_defaults(func=_run)
