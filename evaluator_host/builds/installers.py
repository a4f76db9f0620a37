"""Installers: how a family's exact pins become a package set — one script per installer, every backend.

An installer writes its files (the pins and a build script) into a build folder and names
the command that runs the script. The script installs into the runtime's packages folder
and prints, after :data:`LOCK_MARK`, what was installed; :meth:`Installer.lock` reads that
into ``name==version`` / ``name@version`` lines. The process backend runs the script in its build
sandbox (in the rlimits mode: on the host) in a partial runtime directory; the docker backend runs
the same script in a build box (``tool`` and ``options`` say how each reaches pip or npm and its
settings). Which installer
a family uses is its manifest's ``installer`` (``pip`` | ``npm``).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol
from urllib.parse import urlsplit

from evaluator_host.builds import suggest, uv
from evaluator_host.builds.build_once import trim_install_log
from evaluator_host.builds.build_sandbox import FORWARDER
from evaluator_host.builds.npm import NPM_INSTALL_FLAGS, npm_command, npm_integrity, npm_lock, npm_package_json
from evaluator_host.builds.pip_script import GUARD, PIP_SCRIPT
from evaluator_host.definitions.languages import Family
from evaluator_host.errors import BuildError

__all__ = [
    "HASH_MARK",
    "LOCK_MARK",
    "REFUSED_MARK",
    "Context",
    "Install",
    "Installer",
    "Uv",
    "build_failed",
    "check_npm_lock",
    "for_family",
    "installer_environment",
    "lock_hashes",
    "refusal",
    "shown",
]

LOCK_MARK = "----evaluator-host-lock----"
HASH_MARK = "----evaluator-host-hashes----"  # + JSON {"name==version": ["sha256:…"]}: archive hashes (uv)
REFUSED_MARK = "----evaluator-host-refused----"  # + JSON {name, url, by}: a requirement the install refused


@dataclass(frozen=True)
class Context:
    """How an install reaches its package manager in one place: the host, or a build box."""

    tool: list[str]
    options: list[str]
    environment: dict[str, str]
    scratch: str | None = None  # where the install may write temporary files (default: the build folder)
    cleanup: tuple[str, ...] = ()  # what else to remove afterwards (left behind in an image otherwise)
    relay: str | None = None  # the build relay's socket, in the sandbox: start the forwarder to it first
    allow_direct: tuple[str, ...] = ()  # hosts a direct-URL requirement may name (build_allow_hosts)
    constraint: str | None = None  # the operator's pip constraints file, applied when resolving
    python: str = "python3"  # the interpreter that starts the forwarder (npm; pip runs it in-process)
    uv: str | None = None  # uv's path where the install runs (None: no uv there, pip installs)
    cache: str | None = None  # uv's shared cache where the install runs (None: a private one in scratch)
    link: str = "copy"  # how uv puts files from its cache into packages_dir (symlink | copy)
    target_python: str = "python3"  # the interpreter the packages are for (uv --python)
    manifest: str | None = None  # where uv's tree of links is described for the host (store installs)


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
    """Resolve first, install second, both by the family's interpreter (``tool``) running pip in-process.

    1. ``pip install --dry-run --ignore-installed --report``: the full lock. pip is guarded first
       (:data:`GUARD`): a requirement naming a direct URL, a VCS link or a local path is refused
       *before* pip prepares it (preparing a direct-URL sdist runs its build backend); the report is
       checked again (``is_direct``, ``vcs_info``, ``dir_info``). A refusal prints :data:`REFUSED_MARK`
       and the requirement, which :func:`build_failed` turns into a clear error.
    2. ``pip install --no-deps --require-hashes --target <packages_dir>`` of exactly that lock (the
       hashes the index published, or pip computed from the file it fetched).

    Then the lock is listed as ``pip list --format=freeze`` would, without a second interpreter start.
    With ``context.relay`` the in-sandbox forwarder to the build relay starts first."""

    def prepare(
        self, pins: dict[str, str], *, build_dir: str, packages_dir: str, context: Context, sources: bool = False
    ) -> Install:
        """See :class:`Installer`."""
        common = [
            "--no-input",
            "--disable-pip-version-check",
            "--no-warn-script-location",
            # wheels only: fetching and unpacking a wheel runs no package code; building an sdist
            # runs the package's own build backend (in the build sandbox)
            *([] if sources else ["--only-binary=:all:"]),
            *context.options,
        ]
        resolve = ["install", "--dry-run", "--ignore-installed", *common]
        if context.constraint:
            resolve += ["-c", context.constraint]
        install = ["install", "--no-deps", "--require-hashes", *common, "--target", packages_dir]
        script = PIP_SCRIPT.format(
            forwarder=FORWARDER if context.relay else "",
            relay=context.relay,
            allow=sorted(context.allow_direct),
            refused=REFUSED_MARK,
            guard=GUARD,
            resolve=resolve,
            install=install,
            requirements=f"{build_dir}/requirements.txt",
            lock_mark=LOCK_MARK,
            packages_dir=packages_dir,
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
        """The service's own interpreter and its pip (the host's pip configuration applies): the
        process backend's rlimits mode, where there is no build sandbox (source builds are off)."""
        return Context([sys.executable], [], {})

    def in_box(self) -> Context:
        """The base image's python3 with the host's pip settings (no credentials) in /build/pip.conf."""
        return Context(
            ["python3"],
            [],
            {"PIP_CONFIG_FILE": "/build/pip.conf", "PIP_BREAK_SYSTEM_PACKAGES": "1", "HOME": "/tmp", "TMPDIR": "/tmp"},
            "/tmp",
        )


class Uv:
    """One ``uv pip install`` of exactly the pins (:mod:`evaluator_host.builds.uv`), reporting progress;
    a context without uv (``context.uv`` None: no uv binary for this platform) is pip's."""

    def prepare(
        self, pins: dict[str, str], *, build_dir: str, packages_dir: str, context: Context, sources: bool = False
    ) -> Install:
        """See :class:`Installer`."""
        if context.uv is None:
            return _PIP.prepare(pins, build_dir=build_dir, packages_dir=packages_dir, context=context, sources=sources)
        script = uv.uv_script(
            uv=context.uv,
            python=context.target_python,
            cache=context.cache or f"{context.scratch or build_dir}/uv-cache",
            requirements=f"{build_dir}/requirements.txt",
            packages_dir=packages_dir,
            link=context.link,
            sources=sources,
            constraint=context.constraint,
            forwarder=FORWARDER,
            relay=context.relay,
            lock_mark=LOCK_MARK,
            hash_mark=HASH_MARK,
            private=context.cache is None,
            manifest=context.manifest,
        )
        return Install(
            files={"requirements.txt": "".join(f"{n}=={v}\n" for n, v in pins.items()), "build.py": script},
            command=[*context.tool, f"{build_dir}/build.py"],
            environment={"PYTHONDONTWRITEBYTECODE": "1", **context.environment},
        )

    def lock(self, text: str) -> list[str]:
        """See :class:`Installer`."""
        return _PIP.lock(text)

    def on_host(self, ca_bundle: str | None) -> Context:
        """The service's uv on the host (the rlimits mode: no build sandbox; wheels only)."""
        return dataclasses.replace(_PIP.on_host(ca_bundle), uv=uv.uv_binary())

    def in_box(self) -> Context:
        """The uv bound read-only at ``/build-tools/uv`` in the build box, its cache at ``/uv-cache``."""
        return dataclasses.replace(_PIP.in_box(), uv=UV_IN_BOX, cache=UV_CACHE_IN_BOX)


UV_IN_BOX = "/build-tools/uv"
UV_CACHE_IN_BOX = "/uv-cache"


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
        # in a build sandbox: the forwarder to the build relay first (backgrounded once it listens)
        python = shlex.quote(context.python)
        relay = f"{python} {build}/forward.py --daemon {shlex.quote(context.relay)}\n" if context.relay else ""
        script = (
            "set -e\n"
            f"{relay}"
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
        """The pinned Node wheel's npm, trusting the CA bundle setting: the process backend's rlimits
        mode only (no build sandbox there; ``--ignore-scripts``: no package code runs)."""
        return Context(npm_command(), [f"--cafile={ca_bundle}"] if ca_bundle else [], {})

    def in_box(self) -> Context:
        """The base image's npm with the host's registry settings (no tokens) in /build/npmrc."""
        return Context(
            ["npm"],
            ["--userconfig", "/build/npmrc"],
            {"HOME": "/tmp"},
            "/tmp",
            ("/tmp/node-compile-cache",),
        )


_PIP = Pip()
_INSTALLERS: dict[str, Installer] = {"pip": Uv(), "npm": Npm()}


def for_family(family: Family) -> Installer:
    """The installer of a family's manifest ``installer``: ``pip`` families install with uv
    (:class:`Uv`, pip itself only where the context has no uv binary), ``npm`` with npm."""
    return _INSTALLERS[family.installer]


def shown(family: Family, pins: dict[str, str]) -> str:
    """The pins as a user writes them: ``six==1.16.0, requests==2.32.3``."""
    return ", ".join(family.pin_text(name, version) for name, version in pins.items())


_WHEELS_ONLY_HINT = (
    "\n(package builds from source are off: only wheels are installed. {what} Pin a version published as a "
    "wheel for this platform, or an operator may set EVALUATOR_HOST_ALLOW_SDIST_BUILDS=true: see docs/security.md)"
)


def refusal(output: str) -> dict[str, str] | None:
    """The requirement an install refused (a direct URL, VCS link or local path), from its output."""
    for line in output.splitlines():
        if line.startswith(REFUSED_MARK):
            try:
                found = json.loads(line[len(REFUSED_MARK) :])
            except ValueError:
                return {"name": "?", "url": "?", "by": ""}
            return {k: str(found.get(k, "")) for k in ("name", "url", "by")}
    return None


def build_failed(
    family: Family,
    pins: dict[str, str],
    rid: str,
    output: str,
    sources: bool = True,
    versions_of: suggest.VersionsOf | None = None,
) -> BuildError:
    """The error of a failed install: a refused requirement (a direct URL, VCS link or local path) named
    with its URL; else the installer's own words (trimmed to what matters), a "did you mean" for each
    pin the installer reports missing (:mod:`~evaluator_host.builds.suggest`), and — only when
    source builds are off and a pinned version exists but has no wheel (``versions_of``: every
    version the index has, sources included) — the "no wheel" hint instead of a "did you mean"."""
    refused = refusal(output)
    if refused is not None:
        by = f" (required by {refused['by']})" if refused["by"] else ""
        reason = (
            f"refused {refused['name']} @ {refused['url']}{by}: a requirement that names a direct URL, a VCS "
            "link or a local path is never installed (it would bypass the configured index and run its own "
            "build code); an operator may allow a host with EVALUATOR_HOST_BUILD_ALLOW_HOSTS"
        )
        return BuildError(f"installing {shown(family, pins)} failed:\n{reason}", runtime_id=rid, output=reason)
    reason = trim_install_log(output.split(LOCK_MARK)[0])
    if family.installer == "pip":
        sdist_only = [] if sources else suggest.pip_sdist_only(output, versions_of)
        hints = [
            h
            for h in suggest.suggestions("pip", output, pip_versions_of=versions_of)
            if not any(repr(n) in h or f"{n}==" in h for n, _ in sdist_only)
        ]
        if sdist_only:
            what = ", ".join(f"{n}=={v}" for n, v in sdist_only)
            reason += _WHEELS_ONLY_HINT.format(what=f"{what} is published only as source (no wheel).")
    else:
        hints = suggest.suggestions(family.installer, output, lambda name: suggest.npm_versions(npm_command(), name))
    message = f"installing {shown(family, pins)} failed:\n{reason}" + "".join(f"\n{hint}" for hint in hints)
    return BuildError(message, runtime_id=rid, output=reason, suggestions=hints)


def check_npm_lock(family: Family, pins: dict[str, str], rid: str, output: str, allowed: frozenset[str]) -> None:
    """Refuse (:class:`BuildError`) an npm install whose lock has a package ``resolved`` from anywhere but
    a configured registry (``allowed``: ``host:port``): a git, file or tarball URL dependency."""
    try:
        packages = json.loads(output.split(LOCK_MARK, 1)[1]).get("packages", {})
    except (IndexError, ValueError, AttributeError):
        return
    for where, info in packages.items():
        if not where or not isinstance(info, dict) or info.get("link"):
            continue
        url = str(info.get("resolved") or "")
        parts = urlsplit(url)
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            port = 0
        if url and (parts.scheme not in ("http", "https") or f"{parts.hostname}:{port}" not in allowed):
            name = info.get("name") or where.rsplit("node_modules/", 1)[-1]
            reason = (
                f"refused {name} resolved from {url}: only packages from the configured registry are "
                "installed (a git, file or tarball dependency is not)"
            )
            raise BuildError(f"installing {shown(family, pins)} failed:\n{reason}", runtime_id=rid, output=reason)


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


def lock_hashes(family: Family, output: str) -> dict[str, list[str]]:
    """Each installed package's archive hashes by its lock line, from a finished install's ``output``: npm's
    ``integrity`` (``sha512-…``) from the package-lock printed after :data:`LOCK_MARK`; for uv, the JSON
    after :data:`HASH_MARK` (``sha256:…``, the installed wheel's first). {} when the install recorded none
    (pip's fallback script, or a failed look-up): the runtime's lock then simply has no hashes."""
    if family.installer == "npm":
        return npm_integrity(output.split(LOCK_MARK, 1)[-1])
    for line in output.split(LOCK_MARK, 1)[0].splitlines():
        if not line.startswith(HASH_MARK):
            continue
        try:
            found = json.loads(line[len(HASH_MARK) :])
        except ValueError:
            return {}
        if not isinstance(found, dict):
            return {}
        return {
            str(key): [str(h) for h in value]
            for key, value in found.items()
            if isinstance(value, list) and all(isinstance(h, str) for h in value)
        }
    return {}
