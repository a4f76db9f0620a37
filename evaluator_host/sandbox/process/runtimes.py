"""Runtimes: one per (language, base interpreter, exact pins), built once and shared.

On the process backend a Python runtime is a directory ``runtimes/<id>/`` holding
``site/`` (``pip install --target``, using the host's pip configuration: indexes,
proxy, CA) and ``manifest.json`` with the pins and the full resolved lock. The
worker adds ``site/`` to an interpreter started with ``-I -S``, so only the pinned
packages (and the standard library) are importable.

Found or built through :class:`~evaluator_host.sandbox.build_once.BuildOnce`.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from evaluator_host.definitions.packages import runtime_id
from evaluator_host.errors import BuildError
from evaluator_host.sandbox.base import Runtime
from evaluator_host.sandbox.build_once import (
    NPM_INSTALL_FLAGS,
    BuildOnce,
    npm_command,
    npm_lock,
    npm_package_json,
    trim_install_log,
)
from evaluator_host.settings import Settings

__all__ = ["RuntimeBuilder"]


class RuntimeBuilder(BuildOnce):
    """Process-backend runtimes: ``site/`` directories under ``cache_dir/runtimes``."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings.resolved_cache_dir / "runtimes")
        self.settings = settings

    def base_identity(self, language: str) -> str:
        """What the runtime hash covers besides the pins: the interpreter."""
        if language == "python":
            return f"{self.settings.python_executable}|{platform.python_version()}"
        from evaluator_host.definitions.js_inspect import node_executable

        return f"node|{node_executable()}"

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
        """Install ``pins`` into a partial directory, renamed into place when complete."""
        partial = self.root / f".{rid}.partial-{uuid.uuid4().hex[:8]}"
        install = self._install_python if language == "python" else self._install_node
        started = time.monotonic()
        try:
            partial.mkdir(parents=True)
            lock, log = install(partial, rid, pins)
            final = self.root / rid
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
            (partial / "build.log").write_text(log)
            partial.rename(final)
            return Runtime(rid, language, pins, str(final), lock)
        finally:
            shutil.rmtree(partial, ignore_errors=True)

    def _run_installer(
        self, argv: list[str], rid: str, shown: list[str], **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        """Run pip or npm; ``BuildError`` with its message when it fails or outlives ``build_timeout_s``."""
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.settings.build_timeout_s, **kwargs)
        except subprocess.TimeoutExpired as exc:
            raise BuildError(
                f"installing {', '.join(shown)} took longer than {self.settings.build_timeout_s:.0f} s",
                runtime_id=rid,
                output="",
            ) from exc
        if proc.returncode != 0:
            reason = trim_install_log(proc.stderr or proc.stdout)
            raise BuildError(f"installing {', '.join(shown)} failed:\n{reason}", runtime_id=rid, output=reason)
        return proc

    def _install_node(self, partial: Path, rid: str, pins: dict[str, str]) -> tuple[list[str], str]:
        """``npm install --ignore-scripts`` of exactly ``pins`` into ``<runtime>/node_modules``."""
        argv = [*npm_command(), "install", *NPM_INSTALL_FLAGS, "--cache", str(partial / ".npm-cache")]
        if self.settings.ca_bundle is not None:
            argv.append(f"--cafile={self.settings.ca_bundle}")
        (partial / "package.json").write_text(json.dumps(npm_package_json(pins), indent=2) + "\n")
        env = {**os.environ, "npm_config_update_notifier": "false", "NODE_OPTIONS": ""}
        proc = self._run_installer(argv, rid, [f"{n}@{v}" for n, v in pins.items()], cwd=partial, env=env)
        shutil.rmtree(partial / ".npm-cache", ignore_errors=True)
        return npm_lock((partial / "package-lock.json").read_text()), proc.stdout + proc.stderr

    def _install_python(self, partial: Path, rid: str, pins: dict[str, str]) -> tuple[list[str], str]:
        """``pip install --target <runtime>/site``; the lock from ``pip list --format=freeze``."""
        site = partial / "site"
        site.mkdir()
        requirements = [f"{name}=={version}" for name, version in pins.items()]
        pip = [sys.executable, "-m", "pip"]
        argv = [*pip, "install", "--no-input", "--disable-pip-version-check", "--no-warn-script-location"]
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        proc = self._run_installer([*argv, "--target", str(site), *requirements], rid, requirements, env=env)
        freeze = subprocess.run(
            [*pip, "list", "--path", str(site), "--format=freeze"], capture_output=True, text=True, timeout=120
        )
        return sorted(ln for ln in freeze.stdout.splitlines() if "==" in ln), proc.stdout + proc.stderr
