"""The ``evaluator-host`` command line.

``serve``  start the HTTP service (127.0.0.1 by default; a non-loopback address needs
           API keys or ``--insecure``; ``cli/operate/serve.py``).
``run``    evaluate a file: ``--case JSON`` or ``--cases FILE.jsonl`` locally, or a batch job over
           ``--data ROWS`` (JSONL/CSV/JSON) with a progress bar, locally or on ``--server URL``
           (``cli/evaluate/run.py``).
``images`` ``list | show ID | build | prune`` the cached runtime images of the docker backend; ``images build
           --base`` its base image (``sandbox/docker/base_image.py``).
``runtimes`` ``list | show ID | prune`` the built runtimes of both backends (``cli/operate/runtimes.py``).
``test``   an evaluator's fixtures, for CI: a file with its ``NAME.fixtures.json``, or a stored id on
           ``--server`` (exit 0 / 1 a fixture failed / 2; ``--junit FILE``; ``cli/evaluate/fixtures.py``).
``migrate`` rewrite legacy 4-argument evaluators to ``evaluate(inputs, outputs, trace)``
           (``cli/evaluate/migrate.py``).
``workspaces`` ``create | list | update``, ``keys`` ``create | list | revoke``: the operator's
           commands, through a running service (``cli/service/admin.py``).
``db``     ``status | upgrade`` the database's schema (``cli/operate/db.py``; ``serve`` migrates by itself).
``worker`` run queued jobs' chunks on this host (``cli/operate/worker.py``; ``EVALUATOR_HOST_QUEUE_URL``).
``rules``  ``list | create | show | pause | resume | delete | scores | stats | shadow | promote`` online rules,
           through a running service (``cli/service/rules.py``).
``jobs``   ``list | show JOB_ID`` batch jobs and each sink's deliveries, through a running service
           (``cli/service/jobs.py``).
``review`` ``list | create | items | verdict | export | agreement | fixtures`` review queues and agreement,
           through a running service (``cli/service/review.py``).
``demo-traffic`` send instrumented chat traces over OTLP with the OpenTelemetry SDK (``cli/evaluate/demo.py``).

Start-up contract: building the parser and dispatching import only what the chosen subcommand needs. Each
subcommand's handler is named lazily (``set_defaults(func=lazy("evaluator_host.cli.operate.images:run_images"))``,
:mod:`evaluator_host.cli.lazy`) or lives in a module whose top level is light; the heavy modules — the API
(FastAPI, uvicorn), the sandbox (docker), the store (SQLAlchemy, alembic), jobs, online, builds, the
evaluation path's use cases, the vault, OpenTelemetry — are imported inside the handler that uses them (or
under ``TYPE_CHECKING`` for annotations). So ``evaluator-host --help``, ``--version`` and every
subcommand's ``--help`` load none of them (``tests/cli/test_startup.py``), and a command pays only for its own.
"""

from __future__ import annotations

import argparse
import os
import sys

from evaluator_host import API_VERSION, __version__
from evaluator_host.cli.evaluate.judge import add_options as add_judge_options
from evaluator_host.cli.inputs import UsageError
from evaluator_host.cli.lazy import lazy
from evaluator_host.definitions import languages

__all__ = ["main"]


def _share(text: str) -> float:
    """A share between 0 and 1 (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share between 0 and 1 (e.g. 0.05)")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for docs tests)."""
    parser = argparse.ArgumentParser(prog="evaluator-host", description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument(
        "--version", action="version", version=f"evaluator-host {__version__} (HTTP API v{API_VERSION})"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start the HTTP service")
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument("--backend", choices=["auto", "process", "docker"])
    serve.add_argument("--insecure", action="store_true", help="allow a non-loopback bind without API keys")
    serve.add_argument("--log-level", default=None, help="default: EVALUATOR_HOST_LOG_LEVEL (info)")
    serve.set_defaults(func=lazy("evaluator_host.cli.operate.serve:run_serve"))
    run = sub.add_parser("run", help="evaluate a file: one case, a few cases, or a batch job over a dataset")
    run.add_argument("file", help="evaluator source (.py, .js, .ts)")
    cases = run.add_mutually_exclusive_group()
    cases.add_argument("--case", help='one case as JSON: {"inputs": ..., "outputs": ..., "trace": ...}')
    cases.add_argument("--cases", help="a JSONL file of cases (at most max_cases), printed one by one")
    cases.add_argument("--data", help="a dataset (JSONL, CSV or JSON array): run a job with a progress bar")
    run.add_argument("--map", action="append", metavar="FIELD=COLUMN", help="field mapping, e.g. outputs=answer")
    run.add_argument("--server", help="URL of a running service (default: run in this process)")
    run.add_argument("--api-key", help="bearer key for --server (default: EVALUATOR_HOST_API_KEY)")
    run.add_argument("--output", help="--data: write every result to this JSONL file, in input order")
    run.add_argument("--fail-under", type=float, help="--data: exit 1 when the mean score is below this")
    run.add_argument(
        "--max-error-rate",
        type=_share,
        default=0.0,
        metavar="SHARE",
        help="--data: share of rows (0-1) that may end other than ok before the exit code is 1 (default 0)",
    )
    run.add_argument("--parallelism", type=int, help="--data: workers the job uses at once")
    model = run.add_argument_group("model target (--data): generate each row's outputs, then score them")
    model.add_argument("--target-url", metavar="BASE_URL", help="an OpenAI-compatible API, e.g. http://llm:8000/v1")
    model.add_argument("--target-model", metavar="MODEL", help="the model to call")
    prompt = model.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", help='a Jinja2 template of the row, e.g. "Q: {{ question }}"')
    prompt.add_argument("--prompt-file", help="the template, from a file")
    prompt.add_argument("--messages-column", help="a column holding an OpenAI messages list")
    model.add_argument("--target-key-secret", metavar="NAME", help="the workspace secret holding the API key")
    model.add_argument("--concurrency", type=int, help="model calls in flight at once (default 16)")
    model.add_argument("--max-calls", type=int, help="stop the job after this many model calls")
    model.add_argument("--max-tokens-total", type=int, help="stop the job once this many tokens are used")
    run.add_argument("--name", help="--data: evaluator name (default: the file name)")
    run.add_argument("--language", choices=languages.names())
    run.add_argument("--packages", help='exact pins as JSON, e.g. {"numpy": "1.26.4"}')
    run.add_argument("--settings", help='settings as JSON, e.g. {"timeout_s": 5}')
    run.add_argument("--json", action="store_true", help="print one JSON result per line (--data: the final job)")
    add_judge_options(run.add_argument_group("LLM judges: what the evaluator may reach and read"))
    run.set_defaults(func=lazy("evaluator_host.cli.evaluate.run:run_file"))
    images = sub.add_parser("images", help="list, show, build or prune the cached runtime images (docker backend)")
    images.add_argument("action", choices=["list", "show", "build", "prune"])
    images.add_argument("id", nargs="?", help="show: the runtime id (a unique prefix will do)")
    images.add_argument("--language", default=languages.DEFAULT, choices=languages.names())
    images.add_argument("--packages", default="{}", help='build: exact pins as JSON, e.g. {"numpy": "1.26.4"}')
    images.add_argument("--unused-days", type=float, default=30.0, help="prune: not used for this many days")
    images.add_argument("--all", action="store_true", help="prune: every runtime image not in use")
    images.add_argument("--runtime", action="append", help="prune: this runtime id (repeatable)")
    images.add_argument("--json", action="store_true", help="list, show: one JSON object per image")
    images.add_argument(
        "--base",
        action="store_true",
        help="build: the base image runtimes are built FROM (debootstrap + docker import), only that",
    )
    images.add_argument("--tag", help="build --base: the base image's tag (default: EVALUATOR_HOST_BASE_IMAGE)")
    images.add_argument("--from-image", help="build --base: start from this image (a registry's) instead of Debian")
    images.set_defaults(func=lazy("evaluator_host.cli.operate.images:run_images"))
    from evaluator_host.cli.evaluate.demo import add_parser as add_demo
    from evaluator_host.cli.evaluate.fixtures import add_parser as add_test
    from evaluator_host.cli.evaluate.migrate import add_parser as add_migrate
    from evaluator_host.cli.operate.db import add_parser as add_db
    from evaluator_host.cli.operate.runtimes import add_parser as add_runtimes
    from evaluator_host.cli.operate.worker import add_parser as add_worker
    from evaluator_host.cli.service.admin import add_parsers as add_admin
    from evaluator_host.cli.service.jobs import add_parser as add_jobs
    from evaluator_host.cli.service.results import add_parser as add_results
    from evaluator_host.cli.service.review import add_parser as add_review
    from evaluator_host.cli.service.rules import add_parser as add_rules

    add_runtimes(sub)
    add_results(sub)
    add_test(sub)
    add_migrate(sub)
    add_admin(sub)
    add_db(sub)
    add_worker(sub)
    add_rules(sub)
    add_jobs(sub)
    add_review(sub)
    add_demo(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``evaluator-host`` console script: a usage mistake is one line on stderr and exit 2."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except UsageError as exc:
        sys.stderr.write(f"evaluator-host: error: {exc}\n")
        return 2
    except BrokenPipeError:  # the reader went away (`… | head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
