"""``evaluator-host test PATH|ID``: an evaluator's fixtures, for CI.

* ``PATH`` (an evaluator file: ``.py``, ``.js``, ``.ts``): its fixtures come from ``--fixtures FILE``, or
  else from the sidecar beside it, ``NAME.fixtures.json`` for ``NAME.py`` (a JSON array of fixtures
  ``{name, inputs, outputs, trace?, expect}``, the shape ``POST /v1/evaluators`` takes). They run in this
  process on a private scratch data dir, as ``evaluator-host run --cases`` does (``--packages``,
  ``--settings``, ``--language`` as for ``run``).
* ``ID`` (a stored evaluator's id, ``ev_…``): the service at ``--server`` runs the stored fixtures of
  its latest revision, or of ``--revision N`` (``POST /v1/evaluators/{id}/test``).

Exit status: 0 every fixture passed, 1 a fixture failed, 2 a usage error (no such file, no fixtures,
a fixture file that does not parse or validate — each problem named, a misspelled field with its
"did you mean" —, a definition the service refuses, an evaluator that does not exist). ``--junit FILE``
writes the report as JUnit XML (one testcase a fixture), ``--json`` prints it as JSON.

This module is the command's parser; the command itself (reading the fixtures, running them, the report) is
:mod:`evaluator_host.cli.evaluate.fixture_runs`, imported only when ``test`` runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaluator_host.cli.evaluate.judge import add_options as add_judge_options
from evaluator_host.cli.lazy import lazy
from evaluator_host.definitions import languages

__all__ = ["add_parser", "sidecar_of"]


def sidecar_of(path: str) -> Path:
    """The fixtures file beside an evaluator file: ``exact.py`` -> ``exact.fixtures.json``."""
    found = Path(path)
    return found.with_name(found.stem + ".fixtures.json")


def add_parser(sub: Any) -> None:
    """``test``: the subcommand and its options."""
    test = sub.add_parser("test", help="run an evaluator's fixtures (a file and its sidecar, or a stored id) for CI")
    test.add_argument("target", metavar="PATH|ID", help="an evaluator file (.py, .js, .ts) or a stored evaluator's id")
    test.add_argument("--fixtures", help="PATH: the fixtures file (default: NAME.fixtures.json beside NAME.py)")
    test.add_argument("--junit", metavar="FILE", help="write the report as JUnit XML to FILE")
    test.add_argument("--json", action="store_true", help="print the report as JSON")
    test.add_argument("--revision", type=int, help="ID: this revision's fixtures (default: the latest)")
    test.add_argument("--server", help="ID: URL of the service (default: http://HOST:PORT of the settings)")
    test.add_argument("--api-key", help="ID: bearer key (default: EVALUATOR_HOST_API_KEY)")
    test.add_argument("--language", choices=languages.names(), help="PATH: default from the file's suffix")
    test.add_argument("--packages", help='PATH: exact pins as JSON, e.g. {"numpy": "1.26.4"}')
    test.add_argument("--settings", help='PATH: settings as JSON, e.g. {"timeout_s": 5}')
    add_judge_options(test, "PATH: ")
    test.set_defaults(func=lazy("evaluator_host.cli.evaluate.fixture_runs:run_test"))
