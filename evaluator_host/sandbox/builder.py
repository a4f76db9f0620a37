"""Runtimes: one per (language, base interpreter, exact pins), built once and shared.

On the process backend a Python runtime is a directory ``runtimes/<id>/`` holding
``site/`` (``pip install --target``, using the host's pip configuration: indexes,
proxy, CA) and ``manifest.json`` with the pins and the full resolved lock. The
worker adds ``site/`` to an interpreter started with ``-I -S``, so only the pinned
packages (and the standard library) are importable.

:class:`BuildOnce` is the rule every backend's builder shares: builds are serialized per
runtime id (in-process lock plus a file lock for several service processes), a runtime
already on disk (or in the engine) is found instead of rebuilt, and a failed build raises
:class:`BuildError` with the installer's message and leaves nothing in the cache.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

from evaluator_host.errors import BuildError, SandboxError
from evaluator_host.packages import runtime_id
from evaluator_host.sandbox.backend import Runtime
from evaluator_host.settings import Settings

__all__ = ["BuildOnce", "Runtime", "RuntimeBuilder", "trim_install_log"]

_TRIM = 4000


def trim_install_log(text: str) -> str:
    """The part of an installer's output a user needs: its errors and why fetches failed."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("ERROR", "npm ERR", "npm error")) or "Could not fetch URL" in ln]
    picked = "\n".join(errors or lines[-20:])
    return picked[-_TRIM:]


class BuildOnce:
    """Pins → runtimes, each distinct set built once; subclasses say how to find and build one."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.builds = 0
        self._locks: dict[str, asyncio.Lock] = {}
        self._cache: dict[str, Runtime] = {}

    def runtime_for(self, language: str, pins: dict[str, str]) -> str:
        """The runtime id of ``pins`` (no build)."""
        raise NotImplementedError

    def bare_location(self) -> str | None:
        """Where a runtime with no packages lives (nothing to build)."""
        raise NotImplementedError

    def find(self, rid: str, language: str, pins: dict[str, str]) -> Runtime | None:
        """A runtime built earlier (by any service process), or None; blocking."""
        raise NotImplementedError

    def build(self, rid: str, language: str, pins: dict[str, str]) -> Runtime:
        """Install ``pins`` into a new runtime; blocking; ``BuildError`` leaving nothing behind."""
        raise NotImplementedError

    async def ensure(self, language: str, pins: dict[str, str]) -> Runtime:
        """Return the runtime for ``pins``, building it on first use."""
        rid = self.runtime_for(language, pins)
        cached = self._cache.get(rid)
        if cached is not None:
            return cached
        if not pins:
            runtime = Runtime(rid, language, {}, self.bare_location())
            self._cache[rid] = runtime
            return runtime
        if language != "python":
            raise SandboxError(f"packages for {language} are not supported by this backend yet")
        lock = self._locks.setdefault(rid, asyncio.Lock())
        async with lock:
            if rid not in self._cache:
                self._cache[rid] = await asyncio.to_thread(self._ensure_locked, rid, language, pins)
        return self._cache[rid]

    def _ensure_locked(self, rid: str, language: str, pins: dict[str, str]) -> Runtime:
        with open(self.root / f"{rid}.lock", "w") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            found = self.find(rid, language, pins)
            if found is not None:
                return found
            runtime = self.build(rid, language, pins)
            self.builds += 1
            return runtime


class RuntimeBuilder(BuildOnce):
    """Process-backend runtimes: ``site/`` directories under ``data_dir/runtimes``."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings.data_dir / "runtimes")
        self.settings = settings

    def base_identity(self, language: str) -> str:
        """What the runtime hash covers besides the pins: the interpreter."""
        if language == "python":
            return f"{self.settings.python_executable}|{platform.python_version()}"
        return f"node|{language}"

    def runtime_for(self, language: str, pins: dict[str, str]) -> str:
        """The runtime id of ``pins`` for ``language`` (no build)."""
        return runtime_id(language, self.base_identity(language), pins)

    def bare_location(self) -> str | None:
        """No packages: the interpreter's standard library only."""
        return None

    def find(self, rid: str, language: str, pins: dict[str, str]) -> Runtime | None:
        """The runtime directory a finished build left (its manifest is written last)."""
        final = self.root / rid
        manifest = final / "manifest.json"
        if not manifest.exists():
            return None
        return Runtime(rid, language, pins, str(final), json.loads(manifest.read_text()).get("lock", []))

    def build(self, rid: str, language: str, pins: dict[str, str]) -> Runtime:
        """``pip install --target`` into a partial directory, renamed into place when complete."""
        final = self.root / rid
        partial = self.root / f".{rid}.partial-{uuid.uuid4().hex[:8]}"
        site = partial / "site"
        requirements = [f"{name}=={version}" for name, version in pins.items()]
        pip = [sys.executable, "-m", "pip"]
        started = time.monotonic()
        try:
            site.mkdir(parents=True)
            proc = subprocess.run(
                [
                    *pip,
                    "install",
                    "--no-input",
                    "--disable-pip-version-check",
                    "--no-warn-script-location",
                    "--target",
                    str(site),
                    *requirements,
                ],
                capture_output=True,
                text=True,
                timeout=self.settings.build_timeout_s,
                env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            )
            if proc.returncode != 0:
                raise BuildError(
                    f"installing {', '.join(requirements)} failed:\n{trim_install_log(proc.stderr or proc.stdout)}",
                    runtime_id=rid,
                    output=trim_install_log(proc.stderr or proc.stdout),
                )
            freeze = subprocess.run(
                [*pip, "list", "--path", str(site), "--format=freeze"], capture_output=True, text=True, timeout=120
            )
            lock = sorted(ln for ln in freeze.stdout.splitlines() if "==" in ln)
            os.chmod(partial, 0o755)
            (partial / "manifest.json").write_text(
                json.dumps(
                    {
                        "id": rid,
                        "language": language,
                        "packages": pins,
                        "lock": lock,
                        "base": self.base_identity(language),
                        "build_seconds": round(time.monotonic() - started, 2),
                        "created_at": time.time(),
                    },
                    indent=2,
                )
            )
            (partial / "build.log").write_text(proc.stdout + proc.stderr)
            partial.rename(final)
            return Runtime(rid, language, pins, str(final), lock)
        except subprocess.TimeoutExpired as exc:
            raise BuildError(
                f"installing {', '.join(requirements)} took longer than {self.settings.build_timeout_s:.0f} s",
                runtime_id=rid,
                output="",
            ) from exc
        finally:
            shutil.rmtree(partial, ignore_errors=True)
