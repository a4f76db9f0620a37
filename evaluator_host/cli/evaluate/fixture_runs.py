"""The ``test`` command's run (its contract: :mod:`evaluator_host.cli.evaluate.fixtures`): a fixtures file read and
checked (every problem named, a misspelled field with its "did you mean"), run in this process or by the
service at ``--server``, and the report printed, as JSON or as JUnit XML.

Imported only when ``test`` runs (``cli/evaluate/fixtures.py`` names :func:`run_test` lazily): the evaluation path loads
here, not for the rest of the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from rich.console import Console

from evaluator_host.cli.evaluate.fixtures import sidecar_of
from evaluator_host.cli.evaluate.judge import Judge, given, judge_of, start_private, with_judge
from evaluator_host.cli.inputs import UsageError, parse_json, parse_model, read_text
from evaluator_host.cli.output import located_error
from evaluator_host.definitions import languages
from evaluator_host.errors import EvaluatorHostError
from evaluator_host.evaluation.fixtures import junit_xml, report
from evaluator_host.evaluation.models import EvaluatorSettings, Fixture, FixtureReport
from evaluator_host.evaluation.usecases import Definition, evaluate_definition
from evaluator_host.shared.fields import unknown_field
from evaluator_host.tenancy.models import DEFAULT_WORKSPACE

__all__ = ["read_fixtures", "run_test"]


class _FixtureFile(BaseModel):
    fixtures: list[Fixture]


def _problem(error: Any) -> str:
    loc = [str(p) for p in error["loc"][1:]]
    where = f"fixture {loc[0]}" + (f" {'.'.join(loc[1:])}" if len(loc) > 1 else "") if loc else "the file"
    if error["type"] == "extra_forbidden":
        said = unknown_field(_FixtureFile, list(error["loc"])).get("msg")
        if said:
            return f"{where}: {said}"
    return f"{where}: {error['msg'].lower()}"


def read_fixtures(path: str) -> list[Fixture]:
    """The fixtures of ``path`` (a JSON array), or :class:`UsageError` naming every problem."""
    value = parse_json(read_text(path, "fixtures file"), f"fixtures file {path}")
    if isinstance(value, dict) and "fixtures" in value:
        value = value["fixtures"]  # the body of a saved evaluator, or {"fixtures": [...]}, will do too
    if not isinstance(value, list):
        raise UsageError(f"fixtures file {path}: a JSON array of fixtures {{name, inputs, outputs, expect}}")
    try:
        fixtures = _FixtureFile.model_validate({"fixtures": value}).fixtures
    except ValidationError as exc:
        raise UsageError(f"fixtures file {path}: " + "; ".join(_problem(e) for e in exc.errors())) from exc
    if not fixtures:
        raise UsageError(f"fixtures file {path} holds no fixture: nothing to test")
    return fixtures


def _definition(args: argparse.Namespace) -> Definition:
    """The file's definition with ``--language`` / ``--packages`` / ``--settings`` (as ``run`` reads them)."""
    code = read_text(args.target, "evaluator file")
    found = languages.by_suffix(Path(args.target).suffix)
    language = args.language or (found.name if found else None)
    if language is None:
        raise UsageError(f"cannot tell the language of {args.target}; pass --language")
    packages = parse_json(args.packages, "--packages") if args.packages else None
    return Definition(language, code, packages, parse_model(EvaluatorSettings, args.settings or "{}", "--settings"))


async def _run_local(definition: Definition, fixtures: list[Fixture], judge: Judge) -> FixtureReport:
    """The fixtures run by the inline use case in this process, on a private scratch data dir (``judge``'s
    hosts and secrets in it)."""
    services = await start_private(judge)
    try:
        evaluated = await evaluate_definition(services, DEFAULT_WORKSPACE, definition, [f.case() for f in fixtures])
    finally:
        await services.close()
    return report(fixtures, evaluated.results)


def _local(args: argparse.Namespace) -> tuple[str, FixtureReport]:
    judge = judge_of(args, local=True)
    definition = with_judge(_definition(args), judge)
    source = args.fixtures or str(sidecar_of(args.target))
    if not args.fixtures and not Path(source).exists():
        raise UsageError(f"no fixtures for {args.target}: write them to {source}, or pass --fixtures FILE")
    fixtures = read_fixtures(source)
    try:
        return Path(args.target).name, asyncio.run(_run_local(definition, fixtures, judge))
    except EvaluatorHostError as exc:
        at = exc.fields()
        raise UsageError(
            located_error(args.target, definition.code, exc.type_name, exc.message, at.get("line"), at.get("column"))
        ) from exc


def _remote(args: argparse.Namespace) -> tuple[str, FixtureReport]:
    from evaluator_host.cli.remote import service_client, usage_errors

    if given(args):  # never silently ignored
        raise UsageError(
            "--secret/--network/--env apply to a file's fixtures run here: a stored evaluator runs with its own "
            "secrets, network and settings.env"
        )
    key = args.api_key or os.environ.get("EVALUATOR_HOST_API_KEY")
    with service_client(args.server, key) as client, usage_errors():
        answer = client.test_evaluator(args.target, revision=args.revision)
    if not answer.results:
        raise UsageError(f"evaluator {args.target} revision {answer.revision} has no fixtures: nothing to test")
    suite = f"{answer.evaluator_id}@{answer.revision}" + (" (draft)" if answer.draft else "")
    return suite, FixtureReport(passed=answer.passed, failed=answer.failed, results=answer.results)


def _print(suite: str, checked: FixtureReport, console: Console) -> None:
    for outcome in checked.results:
        mark = "[green]PASS[/green]" if outcome.passed else "[red]FAIL[/red]"
        console.print(f"{mark} {outcome.name}", highlight=False)
        for problem in outcome.problems:
            console.print(f"     {problem}", highlight=False, markup=False)
        if outcome.error and not outcome.passed:
            console.print(f"     {outcome.error.splitlines()[0][:300]}", highlight=False, markup=False)
    total = checked.passed + checked.failed
    console.print(f"{suite}: {checked.passed} of {total} fixtures passed", highlight=False, markup=False)


def run_test(args: argparse.Namespace) -> int:
    """The ``test`` command (see the module docstring)."""
    is_file = Path(args.target).is_file()
    if not is_file and not args.target.startswith("ev_"):
        raise UsageError(f"{args.target}: no such file, and not an evaluator id (ev_…)")
    if not is_file and args.fixtures:
        raise UsageError("--fixtures is for a file; a stored evaluator's fixtures are stored with its revision")
    if is_file and args.revision is not None:
        raise UsageError("--revision is for a stored evaluator's id")
    suite, checked = _local(args) if is_file else _remote(args)
    if args.junit:
        try:
            Path(args.junit).write_bytes(junit_xml(suite, checked))
        except OSError as exc:
            raise UsageError(f"--junit {args.junit}: {exc.strerror or exc}") from exc
    if args.json:
        sys.stdout.write(checked.model_dump_json() + "\n")
    else:
        _print(suite, checked, Console())
    return 0 if checked.failed == 0 else 1
