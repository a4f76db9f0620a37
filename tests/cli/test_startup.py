"""The command line starts without loading the service (``cli/main.py``'s start-up contract).

Building the parser, every subcommand's ``--help``, ``evaluator-host rules --help`` and ``evaluator-host --version``
import none of the heavy modules — the API and FastAPI/uvicorn, the sandbox and docker, the store and
SQLAlchemy/alembic, jobs, online, builds, the evaluation path's use cases, the vault, OpenTelemetry: each is
imported by the handler that needs it. Checked in fresh interpreters (``sys.modules``, and ``-X importtime`` of
the real command), never by timing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

HEAVY = (
    "evaluator_host.api",
    "evaluator_host.sandbox",
    "evaluator_host.store",
    "evaluator_host.jobs",
    "evaluator_host.online",
    "evaluator_host.builds",
    "evaluator_host.evaluation.usecases",
    "evaluator_host.tenancy.vault",
    "sqlalchemy",
    "alembic",
    "docker",
    "fastapi",
    "uvicorn",
    "opentelemetry",
)


def _heavy(names: list[str]) -> list[str]:
    return sorted({n for n in names if any(n == h or n.startswith(h + ".") for h in HEAVY)})


def _python(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def _imported_by(*argv: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """The real ``python -m evaluator_host.cli ARGV`` and every module it imported (``-X importtime``)."""
    done = _python("-X", "importtime", "-m", "evaluator_host.cli", *argv)
    names = [
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    ]
    assert names, done.stderr[-2000:]
    return done, names


_EVERY_HELP = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from evaluator_host.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    helped = []
    for name, command in sub.choices.items():
        argvs = [[name, "--help"]]
        nested = [a for a in command._actions if a.__class__.__name__ == "_SubParsersAction"]
        argvs += [[name, inner, "--help"] for a in nested for inner in a.choices]
        for argv in argvs:
            with contextlib.redirect_stdout(io.StringIO()) as out:
                try:
                    parser.parse_args(argv)
                except SystemExit as exc:
                    assert exc.code == 0, (argv, exc.code)
            assert out.getvalue().startswith("usage: evaluator-host"), argv
            helped.append(" ".join(argv))
    print(json.dumps({"helped": helped, "modules": sorted(sys.modules)}))
    """
)


def test_building_the_parser_and_every_subcommands_help_import_no_heavy_module() -> None:
    done = _python("-c", _EVERY_HELP)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    commands = {"serve", "run", "images", "runtimes", "results", "test", "migrate", "workspaces", "keys", "db"}
    commands |= {"worker", "rules", "demo-traffic"}
    assert {argv.split()[0] for argv in found["helped"]} >= commands  # every subcommand the docs list, at least
    assert _heavy(found["modules"]) == []


@pytest.mark.parametrize("argv", [["rules", "--help"], ["--version"], ["--help"]])
def test_help_and_version_of_the_real_command_import_no_heavy_module(argv: list[str]) -> None:
    done, names = _imported_by(*argv)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: evaluator-host" if "--help" in argv else "evaluator-host ")
    assert _heavy(names) == []


def test_a_command_still_imports_what_its_handler_needs() -> None:
    """The contract is lazy loading, not less work: ``db status`` reaches SQLAlchemy when it runs (a sanity
    check that the importtime reading above sees heavy modules when they are imported)."""
    done, names = _imported_by("db", "status")
    assert "sqlalchemy" in names, done.stderr[-2000:]


def test_every_lazy_handler_names_a_function_that_exists() -> None:
    """A handler named as ``module:function`` (a typo would only show when that command runs)."""
    from evaluator_host.cli.lazy import Lazy
    from evaluator_host.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    handlers = [command.get_default("func") for command in sub.choices.values()]
    lazies = [h for h in handlers if isinstance(h, Lazy)]
    assert {f"{h.module}:{h.function}" for h in lazies} >= {
        "evaluator_host.cli.operate.serve:run_serve",
        "evaluator_host.cli.evaluate.run:run_file",
        "evaluator_host.cli.operate.images:run_images",
        "evaluator_host.cli.evaluate.fixture_runs:run_test",
    }
    for handler in lazies:
        assert callable(getattr(importlib.import_module(handler.module), handler.function)), handler


def test_the_runtimes_lock_formats_are_the_lockfiles() -> None:
    """``runtimes lock --format`` names the formats without importing the builds: the same as
    ``builds.lockfile.FORMATS``."""
    from evaluator_host.builds.lockfile import FORMATS
    from evaluator_host.cli.operate.runtimes import LOCK_FORMATS

    assert LOCK_FORMATS == tuple(FORMATS)
