"""Installers: how a family's exact pins become a package set — one script per installer, every backend.

An installer writes its files (the pins and a build script) into a build folder and names
the command that runs the script. The script installs into the runtime's packages folder
and prints, after :data:`LOCK_MARK`, what was installed; :meth:`Installer.lock` reads that
into ``name==version`` / ``name@version`` lines. The process backend runs the script on the
host in a partial runtime directory; the docker backend runs the same script in a build box
(``tool`` and ``options`` say how each reaches pip or npm and its settings). Which installer
a family uses is its manifest's ``installer`` (``pip`` | ``npm``).
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol

from evaluator_host.errors import BuildError
from evaluator_host.languages import Family
from evaluator_host.sandbox import suggest
from evaluator_host.sandbox.build_once import (
    NPM_INSTALL_FLAGS,
    npm_command,
    npm_lock,
    npm_package_json,
    trim_install_log,
)

__all__ = [
    "LOCK_MARK",
    "Context",
    "Install",
    "Installer",
    "build_failed",
    "for_family",
    "installer_environment",
    "shown",
]

LOCK_MARK = "----evaluator-host-lock----"


@dataclass(frozen=True)
class Context:
    """How an install reaches its package manager in one place: the host, or a build box."""

    tool: list[str]
    options: list[str]
    environment: dict[str, str]
    scratch: str | None = None  # where the install may write temporary files (default: the build folder)
    cleanup: tuple[str, ...] = ()  # what else to remove afterwards (left behind in an image otherwise)


@dataclass(frozen=True)
class Install:
    """Files to write into the build folder, then the command (and environment) that installs."""

    files: dict[str, str]
    command: list[str]
    environment: dict[str, str]


class Installer(Protocol):
    """One package manager's install script and lock reader."""

    def prepare(
        self, pins: dict[str, str], *, build_dir: str, packages_dir: str, context: Context, sources: bool = False
    ) -> Install:
        """The install of ``pins`` into ``packages_dir``, run in ``context``; ``sources`` allows what
        runs package code at install time (building a Python sdist), off by default."""

    def lock(self, text: str) -> list[str]:
        """Every installed package, from what the script printed after :data:`LOCK_MARK`."""

    def on_host(self, ca_bundle: str | None) -> Context:
        """The service host's package manager (process backend)."""

    def in_box(self) -> Context:
        """The build box's package manager, configured from its read-only ``/build`` folder (docker)."""


class Pip:
    """``pip install --target <packages_dir>`` run in-process by the family's interpreter (``tool``);
    the lock listed as ``pip list --format=freeze`` would, without a second interpreter start."""

    def prepare(
        self, pins: dict[str, str], *, build_dir: str, packages_dir: str, context: Context, sources: bool = False
    ) -> Install:
        """See :class:`Installer`."""
        requirements = f"{build_dir}/requirements.txt"
        argv = [
            "install",
            "--no-input",
            "--disable-pip-version-check",
            "--no-warn-script-location",
            # wheels only: fetching and unpacking a wheel runs no package code; building an sdist
            # runs the package's own build backend (as the installer's user, with its network)
            *([] if sources else ["--only-binary=:all:"]),
            *context.options,
            "--target",
            packages_dir,
            "-r",
            requirements,
        ]
        script = (
            "import importlib.metadata, sys\n"
            "from pip._internal.cli.main import main\n"  # what `python -m pip` calls
            f"code = main({argv!r})\n"
            "if code:\n    sys.exit(code)\n"
            f"print({LOCK_MARK!r})\n"
            f"for d in importlib.metadata.distributions(path=[{packages_dir!r}]):\n"
            "    print(d.metadata['Name'] + '==' + d.version)\n"
        )
        return Install(
            files={"requirements.txt": "".join(f"{n}=={v}\n" for n, v in pins.items()), "build.py": script},
            command=[*context.tool, f"{build_dir}/build.py"],
            environment={"PYTHONDONTWRITEBYTECODE": "1", **context.environment},
        )

    def lock(self, text: str) -> list[str]:
        """See :class:`Installer`."""
        return sorted(line.strip() for line in text.splitlines() if "==" in line)

    def on_host(self, ca_bundle: str | None) -> Context:
        """The service's own interpreter and its pip (the host's pip configuration applies)."""
        return Context([sys.executable], [], {})

    def in_box(self) -> Context:
        """The base image's python3 with the host's pip settings copied to /build/pip.conf."""
        return Context(["python3"], [], {"PIP_CONFIG_FILE": "/build/pip.conf", "PIP_BREAK_SYSTEM_PACKAGES": "1"})


class Npm:
    """``npm install --ignore-scripts`` of exactly the pins into ``<packages_dir>/..``; the lock from
    the package-lock.json it writes. The npm cache is a folder of the build, removed afterwards."""

    def prepare(
        self, pins: dict[str, str], *, build_dir: str, packages_dir: str, context: Context, sources: bool = False
    ) -> Install:
        """See :class:`Installer`."""
        prefix = shlex.quote(str(PurePosixPath(packages_dir).parent))
        build, cache = shlex.quote(build_dir), shlex.quote(f"{context.scratch or build_dir}/.npm-cache")
        leftovers = " ".join(shlex.quote(p) for p in (f"{context.scratch or build_dir}/.npm-cache", *context.cleanup))
        flags = " ".join(shlex.quote(f) for f in [*NPM_INSTALL_FLAGS, *context.options])
        script = (
            "set -e\n"
            f"mkdir -p {prefix} && cp {build}/package.json {prefix}/ && cd {prefix}\n"
            f'"$@" install {flags} --cache {cache} || {{ rc=$?; rm -rf {cache}; exit $rc; }}\n'
            f"rm -rf {leftovers}\n"
            f"echo {LOCK_MARK}\ncat package-lock.json\n"
        )
        return Install(
            files={"package.json": json.dumps(npm_package_json(pins), indent=2) + "\n", "build.sh": script},
            command=["sh", f"{build_dir}/build.sh", *context.tool],
            environment={"NODE_OPTIONS": "", "npm_config_update_notifier": "false", **context.environment},
        )

    def lock(self, text: str) -> list[str]:
        """See :class:`Installer`."""
        return npm_lock(text)

    def on_host(self, ca_bundle: str | None) -> Context:
        """The pinned Node wheel's npm, trusting the CA bundle setting."""
        return Context(npm_command(), [f"--cafile={ca_bundle}"] if ca_bundle else [], {})

    def in_box(self) -> Context:
        """The base image's npm with the host's registry settings copied to /build/npmrc."""
        return Context(
            ["npm"],
            ["--userconfig", "/build/npmrc"],
            {"HOME": "/tmp"},
            "/tmp",
            ("/root/.npm", "/tmp/node-compile-cache"),
        )


_INSTALLERS: dict[str, Installer] = {"pip": Pip(), "npm": Npm()}


def for_family(family: Family) -> Installer:
    """The installer a family's manifest names."""
    return _INSTALLERS[family.installer]


def shown(family: Family, pins: dict[str, str]) -> str:
    """The pins as a user writes them: ``six==1.16.0, requests==2.32.3``."""
    return ", ".join(family.pin_text(name, version) for name, version in pins.items())


_WHEELS_ONLY_HINT = (
    "\n(package builds from source are off: only wheels are installed, since building an sdist runs the "
    "package's own code at install time. Pin a version published as a wheel for this platform, or an "
    "operator may set EVALUATOR_HOST_ALLOW_SDIST_BUILDS=true: see docs/security.md)"
)


def build_failed(family: Family, pins: dict[str, str], rid: str, output: str, sources: bool = True) -> BuildError:
    """The error of a failed install: the installer's own words (trimmed to what matters), a
    "did you mean" for each pin the installer reports missing (:mod:`~evaluator_host.sandbox.suggest`),
    and a hint when only wheels were allowed and none matched (unless a pin simply does not exist)."""
    reason = trim_install_log(output.split(LOCK_MARK)[0])
    hints = suggest.suggestions(family.installer, output, lambda name: suggest.npm_versions(npm_command(), name))
    other_version = any(hint.startswith("did you mean") for hint in hints)  # the pin, not the wheel, is wrong
    if not sources and not other_version and ("No matching distribution" in reason or "only-binary" in reason):
        reason += _WHEELS_ONLY_HINT
    message = f"installing {shown(family, pins)} failed:\n{reason}" + "".join(f"\n{hint}" for hint in hints)
    return BuildError(message, runtime_id=rid, output=reason, suggestions=hints)


def installer_environment(environ: dict[str, str]) -> dict[str, str]:
    """What of the service's environment an install on the host may see: the package managers' own
    settings and proxies, never the rest (the service's secrets, API keys, database URL)."""
    keep = ("PATH", "HOME", "LANG", "TMPDIR", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE")
    proxies = ("http_proxy", "https_proxy", "no_proxy", "all_proxy")
    return {
        k: v
        for k, v in environ.items()
        if k in keep or k.startswith(("PIP_", "npm_config_", "NPM_CONFIG_", "LC_")) or k.lower() in proxies
    }
