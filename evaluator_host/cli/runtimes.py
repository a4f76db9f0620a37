"""``evaluator-host runtimes list | show ID | prune``: the built runtimes of both backends.

Process-backend runtimes are directories under ``cache_dir/runtimes``; docker-backend runtimes
are images (listed when an engine answers). ``prune`` removes those unused for
``--unused-days`` (default 30), every one with ``--all``, or the ones named with ``--runtime``,
and never one in use: a live worker of any service holds a lease on its process runtime (the
``.used`` mark alone would make a long-lived worker's runtime look idle), and the engine refuses
to remove an image a container runs. ``--json`` gives the raw records.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from rich.console import Console
from rich.table import Table

from evaluator_host.builds.build_once import BuildOnce
from evaluator_host.cli.images import _packages, _when, pins_text
from evaluator_host.cli.inputs import UsageError
from evaluator_host.errors import EvaluatorHostError
from evaluator_host.sandbox.inventory import RuntimeInfo, prune
from evaluator_host.settings import Settings

__all__ = ["add_parser", "builders", "run_runtimes"]


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


def run_runtimes(args: argparse.Namespace, settings: Settings | None = None) -> int:
    """The ``runtimes`` command; engine or cache errors become one line and exit 2."""
    settings = settings or Settings()
    console = Console()
    try:
        found = [(name, b, info) for name, b in builders(settings, args.backend).items() for info in b.inventory()]
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
    runtimes = sub.add_parser("runtimes", help="list, show or prune the built runtimes (both backends)")
    runtimes.add_argument("action", choices=["list", "show", "prune"])
    runtimes.add_argument("id", nargs="?", help="show: the runtime id (a unique prefix will do)")
    runtimes.add_argument(
        "--backend", choices=["all", "process", "docker"], default="all", help="whose runtimes (default: both)"
    )
    runtimes.add_argument("--unused-days", type=float, default=30.0, help="prune: not used for this many days")
    runtimes.add_argument("--all", action="store_true", help="prune: every runtime not in use")
    runtimes.add_argument("--runtime", action="append", help="prune: this runtime id (repeatable)")
    runtimes.add_argument("--json", action="store_true", help="list, show: one JSON object per runtime")
    runtimes.set_defaults(func=run_runtimes)
