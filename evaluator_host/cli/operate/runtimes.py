"""``evaluator-host runtimes list | show ID | lock ID | prune``: the built runtimes of both backends.

Process-backend runtimes are directories under ``cache_dir/runtimes``; docker-backend runtimes
are images (listed when an engine answers). ``prune`` removes those unused for
``--unused-days`` (default 30), every one with ``--all``, or the ones named with ``--runtime``,
and never one in use: a live worker of any service holds a lease on its process runtime (the
``.used`` mark alone would make a long-lived worker's runtime look idle), and the engine refuses
to remove an image a container runs. ``--json`` gives the raw records.

``lock ID`` writes a built runtime's full lock (:mod:`evaluator_host.builds.lockfile`, the same renderers as
``GET /v1/runtimes/{id}/lock``): ``--format json`` (default), ``requirements``, ``package-lock`` or
``cyclonedx`` (an SBOM), to stdout or ``-o FILE``. Without ``--server`` it reads this machine's runtimes
(the interpreter's version asked of it, the docker base image's id from the engine); with ``--server`` it asks
that service (``--api-key``, default ``EVALUATOR_HOST_API_KEY``). An unknown id, an ambiguous prefix or a
runtime not built is a usage error (exit 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from evaluator_host.cli.inputs import UsageError
from evaluator_host.cli.operate.images import _packages, _when, pins_text
from evaluator_host.definitions import languages
from evaluator_host.errors import EvaluatorHostError

if TYPE_CHECKING:
    from evaluator_host.builds.build_once import BuildOnce
    from evaluator_host.sandbox.inventory import RuntimeInfo
    from evaluator_host.settings import Settings

__all__ = ["LOCK_FORMATS", "add_parser", "builders", "run_runtimes"]

# ``lock --format``'s choices besides json: the keys of ``builds.lockfile.FORMATS``, named here so that building
# the parser does not import the builds (tests/cli/test_startup.py holds the two equal)
LOCK_FORMATS = ("requirements", "package-lock", "cyclonedx")


def builders(settings: Settings, backend: str) -> dict[str, BuildOnce]:
    """The builders whose runtimes ``backend`` (process | docker | all) names; ``all``: the
    process backend's, and docker's when an engine answers with the base image."""
    from evaluator_host.sandbox.process.runtimes import RuntimeBuilder

    found: dict[str, BuildOnce] = {}
    if backend in ("process", "all"):
        found["process"] = RuntimeBuilder(settings)
    if backend in ("docker", "all"):
        from evaluator_host.sandbox.docker.engine import Engine, unusable_reason
        from evaluator_host.sandbox.docker.images import DockerRuntimeBuilder

        reason = unusable_reason(settings)
        if reason is None:
            found["docker"] = DockerRuntimeBuilder(settings, Engine(settings))
        elif backend == "docker":
            raise UsageError(f"the docker backend is not usable: {reason}")
    return found


def _row(info: RuntimeInfo) -> tuple[str, ...]:
    """One row under 80 columns: id, pins (as fit), lock size, size, last use (or "in use")."""
    return (
        info.id,
        _packages(info.packages, 20, info.language),
        str(len(info.lock)),
        f"{info.size_bytes / 1e6:.0f} MB",
        "in use" if info.in_use else _when(info.last_used)[:10],
    )


def _details(backend: str, info: RuntimeInfo, log_tail: str) -> list[str]:
    lines = [
        f"runtime    {info.id}",
        f"backend    {backend} ({info.location})",
        f"language   {info.language}",
        f"packages   {pins_text(info.language, info.packages)}",
        f"size       {info.size_bytes / 1e6:.1f} MB",
        f"built      {_when(info.created_at)}" + (f" in {info.build_seconds:.1f} s" if info.build_seconds else ""),
        f"last used  {_when(info.last_used)}",
        f"in use     {'yes (a live worker holds it)' if info.in_use else 'no'}",
        f"lock       {len(info.lock)} packages",
        *[f"  {entry}" for entry in info.lock],
    ]
    if log_tail:
        lines += ["build log (end)", *[f"  {line}" for line in log_tail.splitlines()[-10:]]]
    return lines


def _local_lock(settings: Settings, found: list[tuple[str, BuildOnce, RuntimeInfo]], wanted: str, form: str) -> str:
    """The lock of this machine's one runtime whose id starts with ``wanted``, rendered as ``form``."""
    from evaluator_host.api import interpreters
    from evaluator_host.builds import lockfile
    from evaluator_host.builds.catalog import ready_view

    match = [(n, i) for n, _, i in found if i.id.startswith(wanted)]
    if len(match) != 1:
        raise UsageError(f"{len(match) or 'no'} runtimes match {wanted!r} (see `evaluator-host runtimes list`)")
    backend, info = match[0]
    family = languages.family_of(info.language).name
    version = interpreters.discover(settings, backend).get(family, "unknown")
    base = _base_image_id(settings) if backend == "docker" else None
    view = ready_view(info)
    lock = lockfile.runtime_lock(view, {"name": family, "version": version}, base)
    if form == "json":
        return lock.model_dump_json(indent=2) + "\n"
    try:
        return lockfile.render(lock, form, view.created_at)[1]
    except EvaluatorHostError as exc:
        raise UsageError(exc.message) from exc


def _base_image_id(settings: Settings) -> str | None:
    """The docker base image's content-addressed id, None when the engine cannot say."""
    from evaluator_host.sandbox.docker.engine import Engine

    try:
        return str(Engine(settings).client().images.get(settings.base_image).id)
    except Exception:  # the lock is still worth writing without it, as the API's answer is
        return None


def _one_backend_each(found: list[tuple[str, BuildOnce, RuntimeInfo]]) -> list[tuple[str, BuildOnce, RuntimeInfo]]:
    """Each runtime once: a docker store folder (``docker_runtime_store``) is a folder of the process backend's
    layout in the same data dir, so the process builder lists it too; it is the docker builder's (its workers bind
    it, its prune removes it), and listed, matched and pruned as such only (CI 49: "2 runtimes match")."""
    docker_folders = {info.location for name, _, info in found if name == "docker"}
    return [(name, b, info) for name, b, info in found if name == "docker" or info.location not in docker_folders]


_WHOLE_ID = re.compile(r"[a-z]+-[0-9a-f]{20}")  # builds/build_once.py's runtime_id: family, 20 hex digits


def _remote_lock(args: argparse.Namespace) -> str:
    """The lock as the service at ``--server`` answers it."""
    from evaluator_host.cli.remote import described, service_client, usage_errors
    from evaluator_host.client import NotFoundError

    key = args.api_key or os.environ.get("EVALUATOR_HOST_API_KEY")
    with service_client(args.server, key) as client, usage_errors():
        rid = args.id
        if not _WHOLE_ID.fullmatch(rid):  # an id's beginning, as for this machine's runtimes: among those it lists
            listed = [r.id for r in client.list_runtimes().data if r.id.startswith(rid)]
            rid = listed[0] if len(listed) == 1 else rid
        try:
            if args.format == "json":
                return client.runtime_lock(rid).model_dump_json(indent=2) + "\n"
            return str(client.runtime_lock_file(rid, args.format))
        except NotFoundError as exc:
            raise UsageError(
                f"{described(exc)} (a beginning of an id finds only the runtimes the service lists, its evaluators'; "
                "name any other by its whole id: a result's runtime.id, a job's runtime_id)"
            ) from exc


def _write(output: str | None, text: str) -> None:
    if output:
        Path(output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def run_runtimes(args: argparse.Namespace, settings: Settings | None = None) -> int:
    """The ``runtimes`` command; engine or cache errors become one line and exit 2."""
    from evaluator_host.sandbox.inventory import prune

    if args.action == "lock" and args.server:
        if not args.id:
            raise UsageError("lock: which runtime? (see GET /v1/runtimes)")
        _write(args.output, _remote_lock(args))
        return 0
    from rich.console import Console  # rich: when the command runs, not for building the parser
    from rich.table import Table

    from evaluator_host.settings import Settings

    settings = settings or Settings()
    console = Console()
    try:
        found = _one_backend_each(
            [(name, b, info) for name, b in builders(settings, args.backend).items() for info in b.inventory()]
        )
        if args.action == "prune":
            for name, builder in builders(settings, args.backend).items():
                mine = [info for backend, _, info in found if backend == name]
                outcomes = prune(
                    mine, builder.remove, unused_days=args.unused_days, only=args.runtime or (), everything=args.all
                )
                for outcome in outcomes:
                    console.print(f"{outcome.action} {outcome.id} ({name})", highlight=False)
                if not outcomes:
                    console.print(f"{name}: nothing to prune ({len(mine)} runtimes, none unused that long)")
            return 0
    except EvaluatorHostError as exc:
        raise UsageError(f"{type(exc).__name__}: {exc.message}") from exc
    if args.action == "lock":
        if not args.id:
            raise UsageError("lock: which runtime? (see `evaluator-host runtimes list`)")
        _write(args.output, _local_lock(settings, found, args.id, args.format))
        return 0
    if args.action == "show":
        match = [(n, b, i) for n, b, i in found if args.id and i.id.startswith(args.id)]
        if len(match) != 1:
            raise UsageError(f"{len(match) or 'no'} runtimes match {args.id!r} (see `evaluator-host runtimes list`)")
        name, builder, info = match[0]
        if args.json:
            sys.stdout.write(json.dumps({"backend": name, **dataclasses.asdict(info)}, separators=(",", ":")) + "\n")
        else:
            sys.stdout.write("\n".join(_details(name, info, builder.build_log(info.id)[-4096:])) + "\n")
        return 0
    if args.json:
        for name, _, info in found:
            sys.stdout.write(json.dumps({"backend": name, **dataclasses.asdict(info)}, separators=(",", ":")) + "\n")
        return 0
    for backend in sorted({name for name, _, _ in found}):
        table = Table(box=None, pad_edge=False, title=f"{backend} backend", title_justify="left")
        for column in ("runtime", "packages", "lock", "size", "last used"):
            table.add_column(column, no_wrap=True, justify="right" if column in ("lock", "size") else "left")
        for info in sorted((i for n, _, i in found if n == backend), key=lambda i: i.id):
            table.add_row(*_row(info))
        console.print(table)
    console.print(f"[dim]{len(found)} runtimes; details and the full lock: evaluator-host runtimes show ID[/dim]")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``runtimes`` and its options."""
    runtimes = sub.add_parser("runtimes", help="list, show, lock or prune the built runtimes (both backends)")
    runtimes.add_argument("action", choices=["list", "show", "lock", "prune"])
    runtimes.add_argument("id", nargs="?", help="show, lock: the runtime id (a unique prefix will do)")
    runtimes.add_argument(
        "--backend", choices=["all", "process", "docker"], default="all", help="whose runtimes (default: both)"
    )
    runtimes.add_argument("--unused-days", type=float, default=30.0, help="prune: not used for this many days")
    runtimes.add_argument("--all", action="store_true", help="prune: every runtime not in use")
    runtimes.add_argument("--runtime", action="append", help="prune: this runtime id (repeatable)")
    runtimes.add_argument("--json", action="store_true", help="list, show: one JSON object per runtime")
    runtimes.add_argument(
        "--format",
        choices=["json", *LOCK_FORMATS],
        default="json",
        help="lock: json (default), requirements (requirements.txt), package-lock (package-lock.json), cyclonedx",
    )
    runtimes.add_argument("-o", "--output", metavar="FILE", help="lock: write to FILE instead of stdout")
    runtimes.add_argument("--server", help="lock: ask this service (URL) instead of reading this machine's runtimes")
    runtimes.add_argument("--api-key", help="lock --server: bearer key (default: EVALUATOR_HOST_API_KEY)")
    runtimes.set_defaults(func=run_runtimes)
