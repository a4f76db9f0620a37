""" "Did you mean": what to pin instead, read from what pip, uv or npm said when an install failed.

(uv says ``there is no version of x==1.0``, ``x was not found in the package registry`` or
``x==1.0 has no usable wheels`` and names no versions: those are asked of the indexes.)

pip names the versions a package has when the pinned one does not exist (``from versions:
1.26.3, 1.26.4, …``) and ``none`` when the name is unknown to every configured index; npm says
``No matching version found for x@1.0`` (its versions are then asked from the registry with
``npm view x versions``) or ``404 Not Found`` for an unknown name. From those: the nearest
existing version (the one sharing most leading components, the highest below the pin, else the
lowest above) and the latest; for an unknown Python name that is an import name of another
package (``sklearn``), that package. Nothing is guessed beyond what the installers report.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable

from evaluator_host.definitions.package_names import pypi_name_of

__all__ = ["nearest_version", "npm_versions", "pip_sdist_only", "pip_versions", "suggestions"]

_PIP_MISSING = re.compile(
    r"Could not find a version that satisfies the requirement ([A-Za-z0-9._-]+)==(\S+) \(from versions: ([^)]*)\)"
)
# uv's words for the same: a version the indexes lack, a name none has, a pin with only sources (builds off)
_UV_NO_VERSION = re.compile(r"there is no version of ([A-Za-z0-9._-]+)==([^\s,]+?),? and you require")
_UV_NOT_FOUND = re.compile(r"Because ([A-Za-z0-9._-]+) was not found in the package registry")
_UV_NO_WHEELS = re.compile(r"Because ([A-Za-z0-9._-]+)==([^\s,]+?) has no usable wheels")
_UV_PYTHON = re.compile(
    r"current Python version \(([^)]+)\) does not satisfy Python(\S+?) and ([A-Za-z0-9._-]+)==([^\s,]+?) depends on"
)
_NPM_NO_VERSION = re.compile(r"No matching version found for (@?[^@\s]+)@([^\s]+?)\.?\s*$", re.M)
_NPM_NO_NAME = re.compile(r"404 Not Found - GET \S+/(@?[^/\s]+(?:%2[fF][^/\s]+|/[^/\s]+)?)\s*$", re.M)
_NPM_VIEW_TIMEOUT_S = 20

VersionsOf = Callable[[str], list[str]]


def _key(version: str) -> tuple[int, ...] | None:
    """Numeric release components (``1.26.4`` → (1, 26, 4)); None for a pre-release or local version."""
    parts = version.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def nearest_version(wanted: str, versions: list[str]) -> tuple[str | None, str | None]:
    """The existing version nearest ``wanted`` and the latest release (None when there are none)."""
    releases = sorted((k, v) for v in versions if (k := _key(v)) is not None)
    if not releases:
        return None, None
    latest = releases[-1][1]
    target = _key(wanted) or ()

    def shared(key: tuple[int, ...]) -> int:
        count = 0
        for a, b in zip(key, target, strict=False):
            if a != b:
                break
            count += 1
        return count

    best = max(shared(k) for k, _ in releases)
    close = [(k, v) for k, v in releases if shared(k) == best]
    below = [v for k, v in close if k <= target]
    return (below[-1] if below else close[0][1]), latest


def npm_versions(npm: list[str], name: str) -> list[str]:
    """The versions npm reports for ``name`` (``npm view NAME versions --json``); [] when it cannot say."""
    try:
        out = subprocess.run(
            [*npm, "view", name, "versions", "--json"], capture_output=True, text=True, timeout=_NPM_VIEW_TIMEOUT_S
        ).stdout
        found = json.loads(out or "[]")
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    return [found] if isinstance(found, str) else [str(v) for v in found] if isinstance(found, list) else []


def pip_versions(python: str, name: str) -> list[str]:
    """Every version the configured indexes have of ``name``, sources included (``pip index versions``,
    which reads the index pages and runs no package code); [] when pip cannot say."""
    try:
        out = subprocess.run(
            [python, "-m", "pip", "index", "versions", "--pre", "--disable-pip-version-check", name],
            capture_output=True,
            text=True,
            timeout=_NPM_VIEW_TIMEOUT_S,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    match = re.search(r"^Available versions: (.*)$", out, re.M)
    return [v.strip() for v in match.group(1).split(",")] if match else []


def pip_sdist_only(output: str, versions_of: VersionsOf | None) -> list[tuple[str, str]]:
    """The pins pip reported missing (installing wheels only) that the index does have, as source: the
    reason is then "no wheel", not a wrong version."""
    found = []
    for name, wanted, listed in _PIP_MISSING.findall(output):
        if wanted in [v.strip() for v in listed.split(",")]:
            continue
        if versions_of is not None and wanted in versions_of(name):
            found.append((name, wanted))
    for name, wanted in _UV_NO_WHEELS.findall(output):  # (uv: wheels only is --no-build)
        if versions_of is not None and wanted in versions_of(name) and (name, wanted) not in found:
            found.append((name, wanted))
    return found


def _version_hint(name: str, wanted: str, versions: list[str], sep: str) -> str | None:
    nearest, latest = nearest_version(wanted, versions)
    if nearest is None:
        return None
    hint = f"did you mean {name}{sep}{nearest}?"
    return hint + (f" (the latest is {latest})" if latest and latest != nearest else "")


def suggestions(
    installer: str, output: str, npm_versions_of: VersionsOf | None = None, pip_versions_of: VersionsOf | None = None
) -> list[str]:
    """One "did you mean" line per pin the installer's ``output`` shows to be missing.

    ``installer`` is the family's (``pip`` | ``npm``: pip's words, or uv's when uv installed);
    ``npm_versions_of(name)`` asks npm for a package's versions, ``pip_versions_of(name)`` the Python
    indexes (uv names no versions; by default neither is asked).
    """
    found: list[str] = []
    if installer == "pip":
        for name, wanted in _UV_NO_VERSION.findall(output):
            versions = pip_versions_of(name) if pip_versions_of else []
            hint = _version_hint(name, wanted, versions, "==") if versions else None
            if hint and hint not in found:
                found.append(hint)
        for name in _UV_NOT_FOUND.findall(output):
            other = pypi_name_of(name)
            hint = (
                f"did you mean {other}? ({name} is what the code imports; the package is {other})"
                if other
                else f"no installable {name!r} on the configured indexes: check the spelling"
            )
            if hint not in found:
                found.append(hint)
        for current, needed, name, wanted in _UV_PYTHON.findall(output):
            hint = (
                f"{name}=={wanted} needs Python{needed} (its Requires-Python); this sandbox runs Python {current}: "
                f"pin a version of {name} that supports Python {current}"
            )
            # pip lists only the versions whose Requires-Python this interpreter meets
            versions = pip_versions_of(name) if pip_versions_of else []
            nearer = _version_hint(name, wanted, versions, "==") if versions else None
            hint = f"{hint} ({nearer})" if nearer else hint
            if hint not in found:
                found.append(hint)
        for name, wanted, listed in _PIP_MISSING.findall(output):
            versions = [v.strip() for v in listed.split(",") if v.strip() and v.strip() != "none"]
            if versions:
                hint = _version_hint(name, wanted, versions, "==")
            else:
                other = pypi_name_of(name)
                hint = (
                    f"did you mean {other}? ({name} is what the code imports; the package is {other})"
                    if other
                    else f"pip found no installable {name!r} on the configured indexes: check the spelling"
                )
            if hint and hint not in found:
                found.append(hint)
    elif installer == "npm":
        for name, wanted in _NPM_NO_VERSION.findall(output):
            versions = npm_versions_of(name) if npm_versions_of else []
            hint = _version_hint(name, wanted, versions, "@") if versions else None
            found.append(hint or f"npm has no version {wanted} of {name}")
        for name in _NPM_NO_NAME.findall(output):
            found.append(
                f"no package named {name.replace('%2f', '/').replace('%2F', '/')!r} in the npm registry: "
                "check the spelling"
            )
    return found
