"""Runtimes: one per (language, base interpreter, exact pins), built once and shared.

On the process backend a Python runtime is a directory ``runtimes/<id>/`` holding
``site/`` (``pip install --target``, using the host's pip configuration: indexes,
proxy, CA) and ``manifest.json`` with the pins and the full resolved lock. The
worker adds ``site/`` to an interpreter started with ``-I -S``, so only the pinned
packages (and the standard library) are importable.

Found or built through :class:`~evaluator_host.sandbox.build_once.BuildOnce`.
"""

from __future__ import annotations

import fcntl
import functools
import glob
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import BinaryIO

from evaluator_host import languages
from evaluator_host.errors import BuildError
from evaluator_host.sandbox import installers
from evaluator_host.sandbox.base import Runtime
from evaluator_host.sandbox.build_once import BuildOnce, runtime_id
from evaluator_host.sandbox.inventory import RuntimeInfo
from evaluator_host.settings import Settings
from evaluator_host.storage import INSTALLER_MARKS, on_full_disk, storage_full

__all__ = ["RuntimeBuilder"]


class RuntimeBuilder(BuildOnce):
    """Process-backend runtimes: ``site/`` directories under ``cache_dir/runtimes``."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings.resolved_cache_dir / "runtimes", settings.max_concurrent_builds)
        self.settings = settings
        self.sweep_partials()

    def sweep_partials(self) -> int:
        """Remove what builds and prunes that died with their process (a killed service) left: partial
        and half-removed directories.

        The cache may be shared by several processes, so a partial is removed only when no one holds
        its runtime's build lock (a live build holds it until its rename). Returns how many went.
        """
        removed = 0
        for leftover in [*self.root.glob(".*.partial-*"), *self.root.glob(".*.removed-*")]:
            marker = ".partial-" if ".partial-" in leftover.name else ".removed-"
            rid = leftover.name[1:].rsplit(marker, 1)[0]
            with open(self.root / f"{rid}.lock", "a") as lock_file:
                try:
                    fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # being built right now
                shutil.rmtree(leftover, ignore_errors=True)
                removed += 1
        return removed

    @functools.cache  # noqa: B019 - one builder per service, a handful of languages
    def base_identity(self, language: str) -> str:
        """What the runtime hash covers besides the pins: the family's interpreter binary (path,
        size and mtime, so an upgraded interpreter in place gets new runtimes)."""
        executable = languages.get(language).family.host_executable(self.settings.python_executable)
        info = os.stat(executable)
        return f"{executable}|{info.st_size}|{int(info.st_mtime)}"

    def runtime_for(self, language: str, pins: dict[str, str]) -> str:
        """The runtime id of ``pins`` for ``language`` (no build)."""
        return runtime_id(language, self.base_identity(language), pins)

    def bare_location(self) -> str | None:
        """No packages: the interpreter's standard library only."""
        return None

    def live_logs(self, rid: str) -> list[Path]:
        """The install's standard output, then its standard error, while it runs."""
        return [self.root / f".{rid}.building.log", self.root / f".{rid}.building.err"]

    def present(self, runtime: Runtime) -> bool:
        """Whether the runtime's directory is still there (a prune may have removed it)."""
        return runtime.location is None or os.path.isdir(runtime.location)

    def find(self, rid: str, language: str, pins: dict[str, str]) -> Runtime | None:
        """The runtime directory a finished build left (its manifest is written last)."""
        final = self.root / rid
        manifest = final / "manifest.json"
        if not manifest.exists():
            return None
        return Runtime(rid, language, pins, str(final), json.loads(manifest.read_text()).get("lock", []))

    def build(self, rid: str, language: str, pins: dict[str, str]) -> Runtime:
        """Run the family's install script into a partial directory, renamed into place when complete;
        a full disk is :class:`StorageFull`, with the partial directory removed like any failure."""
        partial = self.root / f".{rid}.partial-{uuid.uuid4().hex[:8]}"
        build = Path(tempfile.mkdtemp(prefix="evaluator-host-build-"))
        try:
            with on_full_disk(f"building runtime {rid}"):
                return self._build_into(partial, build, rid, language, pins)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
            shutil.rmtree(build, ignore_errors=True)

    def _build_into(self, partial: Path, build: Path, rid: str, language: str, pins: dict[str, str]) -> Runtime:
        started = time.monotonic()
        family = languages.get(language).family
        installer = installers.for_family(family)
        partial.mkdir(parents=True)
        ca_bundle = str(self.settings.ca_bundle) if self.settings.ca_bundle else None
        install = installer.prepare(
            pins,
            build_dir=str(build),
            packages_dir=str(partial / family.packages_dir),
            context=installer.on_host(ca_bundle),
            sources=self.settings.allow_sdist_builds,
        )
        for name, text in install.files.items():
            (build / name).write_text(text)
        output, log = self._run(install, rid, family, pins)
        lock = installer.lock(output.split(installers.LOCK_MARK, 1)[1])
        os.chmod(partial, 0o755)
        manifest = {
            "id": rid,
            "language": language,
            "packages": pins,
            "lock": lock,
            "base": self.base_identity(language),
            "build_seconds": round(time.monotonic() - started, 2),
            "created_at": time.time(),
        }
        (partial / "manifest.json").write_text(json.dumps(manifest, indent=2))
        (partial / "build.log").write_text(log)
        partial.rename(self.root / rid)
        return Runtime(rid, language, pins, str(self.root / rid), lock)

    # -- management (API, CLI) -----------------------------------------------------------
    def inventory(self, only: str | None = None) -> list[RuntimeInfo]:
        """Every runtime directory a finished build left (any base interpreter); ``only``: that id's."""
        found = []
        pattern = "*/manifest.json" if only is None else f"{glob.escape(only)}/manifest.json"
        for manifest in sorted(self.root.glob(pattern)):
            if manifest.parent.name.startswith("."):
                continue
            try:
                data = json.loads(manifest.read_text())
            except (OSError, ValueError):
                continue
            rid = manifest.parent.name
            found.append(
                RuntimeInfo(
                    id=rid,
                    language=languages.get(data.get("language", languages.DEFAULT)).family.name,
                    packages=dict(data.get("packages", {})),
                    lock=list(data.get("lock", [])),
                    size_bytes=_size(manifest.parent),
                    created_at=data.get("created_at"),
                    last_used=self.last_used(rid),
                    build_seconds=data.get("build_seconds"),
                    in_use=self.in_use(rid),
                    location=str(manifest.parent),
                )
            )
        return found

    def build_log(self, rid: str) -> str:
        """The whole log of the build that made ``rid`` ('' when there is none)."""
        try:
            return (self.root / rid / "build.log").read_text(errors="replace")
        except OSError:
            return ""

    def remove(self, rid: str) -> bool:
        """Remove runtime ``rid``; False (and nothing removed) while a live worker holds its lease
        or a build of it runs. The directory is renamed away first, so no worker ever starts on a
        half-removed one."""
        with self.exclusive(rid) as held:
            if not held:
                return False
            trash = self.root / f".{rid}.removed-{uuid.uuid4().hex[:8]}"
            try:
                (self.root / rid).rename(trash)
            except FileNotFoundError:
                pass
            self.forget_marks(rid)
        shutil.rmtree(trash, ignore_errors=True)
        return True

    def _run(
        self, install: installers.Install, rid: str, family: languages.Family, pins: dict[str, str]
    ) -> tuple[str, str]:
        """Run an install: its standard output and its whole log; ``BuildError`` when it fails
        or outlives ``build_timeout_s``."""
        limit = self.settings.build_timeout_s
        out_path, err_path = self.live_logs(rid)  # read by GET /v1/runtimes/{id} while it runs
        with open(out_path, "w+b") as out, open(err_path, "w+b") as err:
            try:
                returncode = subprocess.run(
                    install.command,
                    stdout=out,
                    stderr=err,
                    timeout=limit,
                    env={**installers.installer_environment(dict(os.environ)), **install.environment},
                ).returncode
            except subprocess.TimeoutExpired as exc:
                message = f"installing {installers.shown(family, pins)} took longer than {limit:.0f} s"
                raise BuildError(message, runtime_id=rid, output="") from exc
            stdout, stderr = (_read(handle) for handle in (out, err))
        if returncode != 0 or installers.LOCK_MARK not in stdout:
            if any(mark in stderr + stdout for mark in INSTALLER_MARKS) or _disk_full(self.root):
                raise storage_full(f"building runtime {rid}")  # (a full disk may also have eaten the output)
            sources = self.settings.allow_sdist_builds
            raise installers.build_failed(family, pins, rid, stderr or stdout, sources)
        return stdout, stdout + stderr


def _read(handle: BinaryIO) -> str:
    handle.seek(0)
    return handle.read().decode("utf-8", "replace")


def _size(directory: Path) -> int:
    """Bytes of the files under ``directory`` (not following links)."""
    total = 0
    for parent, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.lstat(os.path.join(parent, name)).st_size
            except OSError:
                pass
    return total


def _disk_full(path: Path) -> bool:
    """Whether the disk of ``path`` has less than 1 MiB free (a failed install's output, written to the
    same disk, may then be empty: the installer's own words about it are lost)."""
    try:
        return shutil.disk_usage(path).free < 1 << 20
    except OSError:
        return False
