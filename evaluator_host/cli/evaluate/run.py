"""``evaluator-host run FILE``: evaluate a file on ``--case JSON`` or ``--cases FILE.jsonl`` in this process
(a private scratch data dir), or hand a ``--data`` dataset to the batch job (``cli/evaluate/batch.py``), locally or on
``--server``. Exit 0 every result ok, 1 one was not, 2 a usage error or a definition refused (its message
located in the file).

Imported only when ``run`` runs (``cli/main.py`` names :func:`run_file` lazily): the evaluation path loads
here, not for the rest of the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from rich.console import Console

from evaluator_host.cli.evaluate.judge import Judge, judge_of, start_private, with_judge
from evaluator_host.cli.inputs import UsageError, parse_json, parse_model, read_text, readable
from evaluator_host.cli.output import located_error, print_capabilities, print_results
from evaluator_host.definitions import languages
from evaluator_host.errors import EvaluatorHostError
from evaluator_host.evaluation.models import Case, EvaluatorSettings
from evaluator_host.evaluation.usecases import Definition, Evaluated, evaluate_definition
from evaluator_host.tenancy.models import DEFAULT_WORKSPACE

__all__ = ["language_of", "run_file"]


def language_of(path: str, given: str | None) -> str | None:
    """``--language``, else the language of the file's suffix (the registry's), else None."""
    if given:
        return given
    found = languages.by_suffix(Path(path).suffix)
    return found.name if found else None


def _read_cases(args: argparse.Namespace) -> list[Case]:
    """``--cases FILE`` (one JSON case a line) or ``--case JSON``; :class:`UsageError` naming the line."""
    if args.cases:
        lines = read_text(args.cases, "--cases").splitlines()
        return [
            parse_model(Case, line, f"--cases {args.cases} line {number}")
            for number, line in enumerate(lines, 1)
            if line.strip()
        ]
    return [parse_model(Case, args.case or "{}", "--case")]


def _definition(args: argparse.Namespace) -> Definition:
    """Read FILE and parse ``--packages`` / ``--settings``, or :class:`UsageError`."""
    code = read_text(args.file, "evaluator file")
    language = language_of(args.file, args.language)
    if language is None:
        raise UsageError(f"cannot tell the language of {args.file}; pass --language")
    packages = parse_json(args.packages, "--packages") if args.packages else None
    settings = parse_model(EvaluatorSettings, args.settings or "{}", "--settings")
    return Definition(language, code, packages, settings)


async def _evaluate(definition: Definition, cases: list[Case], judge: Judge) -> Evaluated:
    """The inline use case (:func:`~evaluator_host.evaluation.usecases.evaluate_definition`) in this
    process, on a private scratch data dir's default workspace (``judge``'s hosts and secrets in it)."""
    services = await start_private(judge)
    try:
        return await evaluate_definition(services, DEFAULT_WORKSPACE, definition, cases)
    finally:
        await services.close()


def run_file(args: argparse.Namespace) -> int:
    definition = _definition(args)
    if args.data:
        from evaluator_host.cli.evaluate.batch import run_batch

        readable(args.data, "--data")
        judge_of(args, local=not args.server)  # checked before anything starts
        return run_batch(args, definition.language)
    judge = judge_of(args, local=True)
    definition = with_judge(definition, judge)
    cases = _read_cases(args)
    try:
        evaluated = asyncio.run(_evaluate(definition, cases, judge))
    except EvaluatorHostError as exc:
        at = exc.fields()
        text = located_error(args.file, definition.code, exc.type_name, exc.message, at.get("line"), at.get("column"))
        sys.stderr.write(text + "\n")
        return 2
    results = evaluated.results
    if args.json:  # stdout stays one JSON result per line; the report goes to stderr
        print_capabilities(evaluated.capabilities, Console(stderr=True))
        for result in results:
            sys.stdout.write(result.model_dump_json() + "\n")
    else:
        console = Console()
        print_capabilities(evaluated.capabilities, console)
        print_results(results, console)
    return 0 if all(r.status == "ok" for r in results) else 1
