"""Exact package pins: parsing and validation.

Accepted input (api.md): an object ``{"name": "1.2.3"}`` or a list of
``"name==1.2.3"`` (Python) / ``"name@1.2.3"`` (npm) strings. Only exact versions
are accepted; ranges, tags, URLs, paths, VCS refs, markers, option injection and
invalid names raise :class:`PackageSpecError` naming the offending entry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from evaluator_host.definitions import languages
from evaluator_host.errors import PackageSpecError

__all__ = ["normalize_pins", "npm_pin", "python_pin"]

_PY_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
_PY_EXTRAS = re.compile(r"^\[[A-Za-z0-9._-]+(?:,[A-Za-z0-9._-]+)*\]$")
_PY_VERSION = re.compile(
    r"^(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*"
    r"(?:[._-]?(?:a|b|c|rc|alpha|beta|pre|preview)[._-]?[0-9]*)?"
    r"(?:[._-]?(?:post|rev|r)[._-]?[0-9]*)?"
    r"(?:[._-]?dev[._-]?[0-9]*)?"
    r"(?:\+[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*)?$",
    re.IGNORECASE,
)
_NPM_NAME = re.compile(r"^(?:@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$")
_NPM_VERSION = re.compile(
    r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)


def python_pin(name: str, version: str, entry: str) -> tuple[str, str]:
    base, bracket, extras = name.partition("[")
    if not _PY_NAME.fullmatch(base) or (bracket and not _PY_EXTRAS.fullmatch("[" + extras)):
        raise PackageSpecError(f"{entry!r}: {name!r} is not a valid PyPI package name", package=entry)
    version = version.strip()
    if version.startswith("=="):
        version = version[2:].strip()
    if not _PY_VERSION.fullmatch(version):
        raise PackageSpecError(
            f'{entry!r}: {version!r} is not an exact version; pin one release, e.g. "1.26.4"',
            package=entry,
        )
    norm = re.sub(r"[-_.]+", "-", base).lower()
    if bracket:
        norm += "[" + ",".join(sorted(e.lower() for e in extras.rstrip("]").split(","))) + "]"
    return norm, version


def npm_pin(name: str, version: str, entry: str) -> tuple[str, str]:
    if len(name) > 214 or not _NPM_NAME.fullmatch(name):
        raise PackageSpecError(f"{entry!r}: {name!r} is not a valid npm package name", package=entry)
    version = version.strip()
    if not _NPM_VERSION.fullmatch(version):
        raise PackageSpecError(
            f'{entry!r}: {version!r} is not an exact version; pin one release, e.g. "4.17.21"',
            package=entry,
        )
    return name, version


def _split_entry(family: languages.Family, entry: str) -> tuple[str, str]:
    split = family.split_pin(entry)
    if split is None:
        example = family.pin_text("name", family.pin_example)
        raise PackageSpecError(f"{entry!r}: expected an exact pin like {example!r}", package=entry)
    return split


def normalize_pins(
    language: str | languages.Language, packages: Mapping[str, str] | Sequence[str] | None
) -> dict[str, str]:
    """Validate ``packages`` and return ``{normalized_name: version}`` sorted by name (``language``: a name or
    the registry's entry)."""
    if not packages:
        return {}
    family = languages.resolve(language).family
    items: list[tuple[str, str, str]] = []
    if isinstance(packages, Mapping):
        for name, version in packages.items():
            if not isinstance(version, str):
                raise PackageSpecError(f"{name!r}: the version must be a string", package=str(name))
            items.append((str(name).strip(), version, f"{name}: {version}"))
    else:
        for entry in packages:
            if not isinstance(entry, str):
                raise PackageSpecError(f"{entry!r}: expected a string pin", package=str(entry))
            name, version = _split_entry(family, entry)
            items.append((name, version, entry))
    out: dict[str, str] = {}
    versions: dict[str, str] = {}  # by name without extras: "requests[socks]" pins "requests" too
    for name, version, entry in items:
        norm, ver = family.validate_pin(name, version, entry)
        if versions.setdefault(norm.partition("[")[0], ver) != ver:
            raise PackageSpecError(f"{entry!r}: pinned twice with different versions", package=entry)
        out[norm] = ver
    return dict(sorted(out.items()))
