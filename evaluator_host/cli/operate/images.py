"""``evaluator-host images list | show ID | build | prune``: the docker backend's cached runtime images.

``build`` first makes sure the base image exists (built when missing:
:func:`~evaluator_host.sandbox.docker.base_image.build_base`), then builds the ``--language``/``--packages``
runtime; ``build --base`` (re)builds only the base, which is what ``make images`` runs.

``list`` is one short row per image (fits 80 columns: the lock is only counted); ``show ID``
prints one image's every detail, its full lock included; ``--json`` gives the raw records.
"""

from __future__ import annotations

import argparse
import asyncio
import calendar
import dataclasses
import json
import sys
import time
from typing import TYPE_CHECKING

from evaluator_host.cli.inputs import UsageError, parse_json
from evaluator_host.definitions import languages
from evaluator_host.errors import EvaluatorHostError

if TYPE_CHECKING:
    from evaluator_host.sandbox.docker.images import ImageInfo
    from evaluator_host.settings import Settings

__all__ = ["compact_rows", "detail_lines", "run_images"]

_PACKAGES_WIDTH = 24


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp)) if stamp else "never"


def pin_text(language: str, name: str, version: str) -> str:
    """One pin as its installer writes it: ``name==1.2.3`` (pip), ``name@1.2.3`` (npm: JavaScript,
    TypeScript, their shared ``node`` family)."""
    return languages.family_of(language).pin_text(name, version)


def pins_text(language: str, packages: dict[str, str]) -> str:
    """Every pin, space-separated (``-`` for none)."""
    return " ".join(pin_text(language, k, v) for k, v in packages.items()) or "-"


def _packages(packages: dict[str, str], width: int = _PACKAGES_WIDTH, language: str = "python") -> str:
    """The pins in at most ``width`` characters: as many as fit, then ``+N``."""
    if not packages:
        return "-"
    shown: list[str] = []
    for index, (name, version) in enumerate(packages.items()):
        pin = pin_text(language, name, version)
        rest = len(packages) - index - 1
        tail = f" +{rest}" if rest else ""
        if shown and len(" ".join([*shown, pin])) + len(tail) > width:
            return " ".join(shown) + f" +{len(packages) - index}"
        shown.append(pin)
    text = " ".join(shown)
    return text if len(text) <= width else text[: width - 1] + "…"


def compact_rows(images: list[ImageInfo]) -> list[tuple[str, ...]]:
    """One short row per image (under 80 columns): id (it starts with the family), packages,
    lock size, size, day of last use."""
    return [
        (
            info.runtime_id,
            _packages(info.packages, language=info.language),
            str(len(info.lock)),
            f"{info.size_bytes / 1e6:.0f} MB",
            _when(info.last_used)[:10],
        )
        for info in images
    ]


def detail_lines(info: ImageInfo) -> list[str]:
    """Everything about one image, one fact a line, then its lock one package a line."""
    lines = [
        f"runtime    {info.runtime_id}",
        f"image      {info.image_id}",
        f"language   {info.language}",
        f"packages   {pins_text(info.language, info.packages)}",
        f"size       {info.size_bytes / 1e6:.0f} MB",
        f"created    {info.created}",
        f"last used  {_when(info.last_used)}",
        f"lock       {len(info.lock)} packages",
    ]
    return lines + [f"  {entry}" for entry in info.lock]


def run_images(args: argparse.Namespace) -> int:
    """The ``images`` command; EvaluatorHostError / ValueError become one line and exit 2."""
    from rich.console import Console  # rich: when the command runs, not for building the parser
    from rich.table import Table

    from evaluator_host.definitions.packages import normalize_pins
    from evaluator_host.sandbox.docker.engine import Engine
    from evaluator_host.sandbox.docker.images import DockerRuntimeBuilder
    from evaluator_host.settings import Settings

    settings = Settings()
    console = Console()
    if args.action == "build" and (args.base or not _base_exists(settings)):
        from evaluator_host.sandbox.docker.base_image import build_base

        code = build_base(args.tag or settings.base_image, args.from_image)
        if code or args.base:
            return code
    try:
        builder = DockerRuntimeBuilder(settings, Engine(settings))
        if args.action == "build":
            pins = normalize_pins(args.language, parse_json(args.packages, "--packages"))
            runtime = asyncio.run(builder.ensure(args.language, pins))
            console.print(f"{runtime.id} ({'built' if builder.builds else 'cached'}): {', '.join(runtime.lock)}")
            return 0
        images = builder.list_images()
        if args.action == "prune":
            horizon = time.time() - args.unused_days * 86400
            for info in images:
                if args.runtime and info.runtime_id not in args.runtime:
                    continue
                # never used: its age is its creation's (as runtimes prune counts it), never "infinitely old"
                if args.all or args.runtime or last_activity(info) < horizon:
                    removed = builder.remove(info.runtime_id)
                    console.print(f"{'removed' if removed else 'in use, kept'} {info.runtime_id}")
            return 0
    except (EvaluatorHostError, ValueError) as exc:
        message = exc.message if isinstance(exc, EvaluatorHostError) else str(exc)
        raise UsageError(f"{type(exc).__name__}: {message}") from exc
    if args.action == "show":
        if not args.id:
            raise UsageError("images show needs a runtime id (see `evaluator-host images list`)")
        found = [info for info in images if info.runtime_id.startswith(args.id)]
        if len(found) != 1:
            raise UsageError(f"{len(found) or 'no'} runtime images match {args.id!r}")
        if args.json:
            sys.stdout.write(json.dumps(dataclasses.asdict(found[0]), separators=(",", ":")) + "\n")
        else:
            sys.stdout.write("\n".join(detail_lines(found[0])) + "\n")
        return 0
    if args.json:
        for info in images:
            sys.stdout.write(json.dumps(dataclasses.asdict(info), separators=(",", ":")) + "\n")
        return 0
    table = Table(box=None, pad_edge=False)
    table.add_column("runtime", no_wrap=True)
    for column in ("packages", "lock", "size", "last used"):
        table.add_column(column, no_wrap=True, justify="left" if column == "packages" else "right")
    for row in compact_rows(images):
        table.add_row(*row)
    console.print(table)
    console.print("[dim]details and the full lock: evaluator-host images show RUNTIME[/dim]")
    return 0


def last_activity(info: ImageInfo) -> float:
    """When an image was last used, or, never used, built (the engine's ISO creation time; now when
    unreadable, so such an image is kept): what ``images prune --unused-days`` compares."""
    try:
        created: float = calendar.timegm(time.strptime(info.created[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        created = time.time()
    return max(info.last_used or 0.0, created)


def _base_exists(settings: Settings) -> bool:
    """Whether the base image is there (an unreachable engine answers True: the build then says why)."""
    import docker
    from docker.errors import DockerException, ImageNotFound

    try:
        client = docker.from_env(timeout=10)
    except DockerException:
        return True
    try:
        client.images.get(settings.base_image)
        return True
    except ImageNotFound:
        return False
    except DockerException:
        return True
    finally:
        client.close()
