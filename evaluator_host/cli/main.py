"""The ``evaluator-host`` command line.

``serve``  start the HTTP service (127.0.0.1 by default; a non-loopback address needs
           API keys or ``--insecure``).
``run``    evaluate a file: ``--case JSON`` or ``--cases FILE.jsonl`` locally, or a batch job over
           ``--data ROWS`` (JSONL/CSV/JSON) with a progress bar, locally or on ``--server URL``.
``images`` ``list | show ID | build | prune`` the cached runtime images of the docker backend; ``images build
           --base`` its base image (``sandbox/docker/base_image.py``).
``runtimes`` ``list | show ID | prune`` the built runtimes of both backends (``cli/runtimes.py``).
``test``   an evaluator's fixtures, for CI: a file with its ``NAME.fixtures.json``, or a stored id on
           ``--server`` (exit 0 / 1 a fixture failed / 2; ``--junit FILE``; ``cli/fixtures.py``).
``migrate`` rewrite legacy 4-argument evaluators to ``evaluate(inputs, outputs, trace)``
           (``cli/migrate.py``).
``workspaces`` ``create | list | update``, ``keys`` ``create | list | revoke``: the operator's
           commands, through a running service (``cli/admin.py``).
``db``     ``status | upgrade`` the database's schema (``cli/db.py``; ``serve`` migrates by itself).
``worker`` run queued jobs' chunks on this host (``cli/worker.py``; ``EVALUATOR_HOST_QUEUE_URL``).
``rules``  ``list | create | show | pause | resume | delete | scores | stats`` online rules, through a
           running service (``cli/rules.py``).
``demo-traffic`` send instrumented chat traces over OTLP with the OpenTelemetry SDK (``cli/demo.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from rich.console import Console

from evaluator_host import API_VERSION, __version__
from evaluator_host.cli.images import run_images
from evaluator_host.cli.inputs import UsageError, parse_json, parse_model, read_text, readable
from evaluator_host.cli.judge import Judge, judge_of, start_private, with_judge
from evaluator_host.cli.judge import add_options as add_judge_options
from evaluator_host.cli.output import located_error, print_capabilities, print_results
from evaluator_host.definitions import languages
from evaluator_host.errors import DataDirInUse, EvaluatorHostError
from evaluator_host.evaluation.models import Case, EvaluatorSettings
from evaluator_host.evaluation.usecases import Definition, Evaluated, evaluate_definition
from evaluator_host.settings import Settings
from evaluator_host.tenancy.models import DEFAULT_WORKSPACE

__all__ = ["main"]


def language_of(path: str, given: str | None) -> str | None:
    """``--language``, else the language of the file's suffix (the registry's), else None."""
    if given:
        return given
    found = languages.by_suffix(Path(path).suffix)
    return found.name if found else None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _port_in_use(host: str, port: int) -> str | None:
    """Why ``serve`` cannot bind ``host:port`` when the address is taken (said before anything starts,
    where uvicorn would only log ``[Errno 98]``); None when it is free (or fails otherwise: uvicorn
    reports that)."""
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return None
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return None
            return (
                f"port {port} on {host} is in use (another evaluator-host, or another program): choose another "
                f"with --port, EVALUATOR_HOST_PORT=, or PORT= for make run (e.g. make run PORT={port + 1})"
            )
    return None


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from evaluator_host.api import create_app
    from evaluator_host.services import lock_data_dir

    overrides: dict[str, Any] = {}
    if args.backend:
        overrides["backend"] = args.backend
    if args.host:
        overrides["host"] = args.host  # the service answers to the address it binds (api/hosts.py)
    settings = Settings(**overrides)
    host = settings.host
    port = args.port or settings.port
    if not _is_loopback(host) and not settings.api_keys and not settings.admin_key and not args.insecure:
        sys.stderr.write(
            f"refusing to bind {host} without EVALUATOR_HOST_API_KEYS or EVALUATOR_HOST_ADMIN_KEY; "
            "pass --insecure to allow it\n"
        )
        return 2
    if settings.queue_url and not settings.secrets_key:
        from evaluator_host.jobs.queue.signing import QueueKeyMissing, task_keys

        try:
            task_keys(settings)
        except QueueKeyMissing as exc:
            sys.stderr.write(f"evaluator-host: {exc}\n")
            return 2
    if (busy := _port_in_use(host, port)) is not None:
        sys.stderr.write(f"evaluator-host: {busy}\n")
        return 2
    try:  # a clear refusal up front; the service takes the lock for good when it starts
        settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(lock_data_dir(settings.data_dir))
    except DataDirInUse as exc:
        sys.stderr.write(f"evaluator-host: {exc.message}\n")
        return 2
    from evaluator_host.observability.logs import configure

    level = args.log_level or settings.log_level
    configure(level, settings.log_format, settings.access_log)
    from evaluator_host.cli.db import check_database

    if (problem := check_database(settings)) is not None:  # migrated now (logged), or a clear refusal
        sys.stderr.write(f"evaluator-host: {problem}\n")
        return 2
    app = create_app(settings)
    config = uvicorn.Config(app, host=host, port=port, log_level=level, access_log=False, log_config=None)
    return asyncio.run(_run_server(app, uvicorn.Server(config)))


async def _run_server(app: Any, server: Any) -> int:
    """Start the app's components (its lifespan's start, run here before uvicorn's: a refusal to start — an
    ``EvaluatorHostError`` such as a sandbox uid that cannot read the interpreter, or a malformed
    ``EVALUATOR_HOST_NETWORK_ALLOW`` — is its message alone on stderr and exit 2, not a traceback in the
    server's log), then serve until a signal. uvicorn runs the lifespan's end (the components stop before
    it re-raises the signal it caught); if it never got that far, they stop here."""
    started = app.router.lifespan_context(app)
    try:
        await started.__aenter__()
    except EvaluatorHostError as exc:
        sys.stderr.write(f"evaluator-host: {exc.message}\n")
        return 2
    stopped = False

    @contextlib.asynccontextmanager
    async def already_started(_app: Any) -> AsyncIterator[None]:
        nonlocal stopped
        try:
            yield
        finally:
            stopped = True
            await started.__aexit__(None, None, None)

    app.router.lifespan_context = already_started
    try:
        await server.serve()
    finally:
        if not stopped:
            await started.__aexit__(None, None, None)
    return 0 if server.started else 1


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


def _run(args: argparse.Namespace) -> int:
    definition = _definition(args)
    if args.data:
        from evaluator_host.cli.batch import run_batch

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
    serve.set_defaults(func=_serve)
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
    run.set_defaults(func=_run)
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
    images.set_defaults(func=run_images)
    from evaluator_host.cli.admin import add_parsers as add_admin
    from evaluator_host.cli.db import add_parser as add_db
    from evaluator_host.cli.demo import add_parser as add_demo
    from evaluator_host.cli.fixtures import add_parser as add_test
    from evaluator_host.cli.migrate import add_parser as add_migrate
    from evaluator_host.cli.results import add_parser as add_results
    from evaluator_host.cli.rules import add_parser as add_rules
    from evaluator_host.cli.runtimes import add_parser as add_runtimes
    from evaluator_host.cli.worker import add_parser as add_worker

    add_runtimes(sub)
    add_results(sub)
    add_test(sub)
    add_migrate(sub)
    add_admin(sub)
    add_db(sub)
    add_worker(sub)
    add_rules(sub)
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
