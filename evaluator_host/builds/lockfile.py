"""A built runtime's full lock, as ``GET /v1/runtimes/{id}/lock`` answers it: JSON, ``requirements.txt``,
``package-lock.json`` or a CycloneDX 1.6 SBOM (made with ``cyclonedx-python-lib``).

Contract: :func:`locked` is the one reading of what a build recorded (``RuntimeView.lock``: ``name==version``
for pip, ``name@version`` for npm; ``RuntimeView.hashes``: each lock line's archive hashes, ``sha256:<hex>``
for Python with the installed wheel's first, npm's ``integrity`` ``sha512-<base64>`` for Node), so a change
of what builds record changes only it. :func:`runtime_lock` adds the interpreter's version and the base
image's id (docker; the process backend runs the host's interpreter: no image), and the renderers write the
same packages in each format: ``requirements.txt`` with every ``--hash=sha256:`` line of each package when
every package has one (pip's hash mode is all or nothing: a runtime built before hashes were recorded gets
none), ``package-lock.json`` with each ``integrity``, the SBOM with the installed wheel's SHA-256 (Python) or
the tarball's SHA-512 (Node, hex). :func:`render` is the one choice of a format: ``requirements`` is a Python
runtime's and ``package-lock`` a Node runtime's only (pip would fetch a Node package's name from PyPI; an npm
integrity is not a sha256): the other family's answers :class:`BadRequest`. The SBOM is a function of the
lock alone — its serial number a UUID5 of the lock's JSON, its references named, its timestamp the runtime's
build (none when unknown) — so two fetches of one runtime's SBOM are byte-identical.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from evaluator_host.builds.models import LockedPackage, RuntimeLock, RuntimeView
from evaluator_host.definitions import languages
from evaluator_host.errors import BadRequest

if TYPE_CHECKING:  # cyclonedx-python-lib is imported when an SBOM is asked for (sbom_json), not with the routes
    from cyclonedx.model import HashType

__all__ = [
    "FORMATS",
    "base_image_id",
    "locked",
    "package_lock_json",
    "render",
    "requirements_txt",
    "runtime_lock",
    "sbom_json",
]

_PIP = re.compile(r"^([A-Za-z0-9._-]+)==(\S+)")
_SHA256 = re.compile(r"^sha256:([0-9a-f]{64})$")
_NPM = re.compile(r"^(@?[^@\s]+)@(\S+)$")
_LINES = {"requirements": _PIP, "package-lock": _NPM}  # a lock line, by the family's lock format


def locked(view: RuntimeView) -> list[LockedPackage]:
    """Every package the build of ``view`` installed, with its version (and hash, when recorded)."""
    packages: list[LockedPackage] = []
    family = languages.family_of(view.language)
    for line in view.lock:
        match = _LINES[family.lock_format].match(line.strip())
        if match:
            hashes = list(view.hashes.get(line, []))
            first = _SHA256.match(hashes[0]) if hashes and family.lock_hash == "sha256" else None
            sha = first.group(1) if first else None
            packages.append(LockedPackage(name=match.group(1), version=match.group(2), sha256=sha, hashes=hashes))
    return sorted(packages, key=lambda p: p.name.lower())


def runtime_lock(view: RuntimeView, interpreter: dict[str, str], base_image: str | None) -> RuntimeLock:
    """The lock of ``view`` with the interpreter (``{"name", "version"}``) and the base image's id."""
    return RuntimeLock(
        runtime_id=view.id,
        language=view.language,
        interpreter=interpreter,
        base_image=base_image,
        packages=locked(view),
    )


def requirements_txt(lock: RuntimeLock) -> str:
    """pip's ``requirements.txt``: every package pinned, with ``--hash`` when every one has a hash."""
    hashed = bool(lock.packages) and all(_sha256s(p) for p in lock.packages)
    head = [
        f"# runtime {lock.runtime_id}: {lock.interpreter.get('name', '')} {lock.interpreter.get('version', '')}",
        f"# base image: {lock.base_image or 'none (the host interpreter)'}",
    ]
    lines = [
        f"{p.name}=={p.version}" + ("".join(f" --hash=sha256:{h}" for h in _sha256s(p)) if hashed else "")
        for p in lock.packages
    ]
    return "\n".join(head + lines) + "\n"


def _sha256s(package: LockedPackage) -> list[str]:
    return [m.group(1) for m in map(_SHA256.match, package.hashes) if m]


def _sha512_hex(package: LockedPackage) -> str | None:
    """The hex of npm's ``sha512-<base64>`` integrity (CycloneDX hashes are hex), None without one."""
    for integrity in package.hashes:
        if integrity.startswith("sha512-"):
            try:
                return base64.b64decode(integrity[len("sha512-") :], validate=True).hex()
            except (binascii.Error, ValueError):
                return None
    return None


def package_lock_json(lock: RuntimeLock) -> str:
    """npm's ``package-lock.json`` (lockfileVersion 3) of the runtime's packages."""
    packages: dict[str, dict[str, object]] = {
        "": {"name": lock.runtime_id, "dependencies": {p.name: p.version for p in lock.packages}}
    }
    for p in lock.packages:
        packages[f"node_modules/{p.name}"] = {"version": p.version, **({"integrity": p.hashes[0]} if p.hashes else {})}
    body = {"name": lock.runtime_id, "lockfileVersion": 3, "requires": True, "packages": packages}
    return json.dumps(body, indent=2) + "\n"


def sbom_json(lock: RuntimeLock, built_at: datetime | None = None) -> str:
    """A CycloneDX 1.6 JSON SBOM: the runtime as the described component, each package a library with its
    purl (``pkg:pypi`` / ``pkg:npm``) and its hash when recorded (the wheel's SHA-256, the tarball's SHA-512);
    the same bytes for the same lock and ``built_at`` (the module's contract)."""
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    kind = languages.family_of(lock.language).purl_type
    serial = uuid.uuid5(uuid.NAMESPACE_URL, "evaluator-host:runtime-lock:" + lock.model_dump_json())
    bom = Bom(serial_number=serial, metadata=BomMetaData(timestamp=built_at))
    bom.metadata.timestamp = built_at  # type: ignore[assignment]  # (its type says datetime; it writes None as absent, not "now")
    bom.metadata.component = Component(
        name=f"evaluator-host-runtime-{lock.runtime_id}",
        type=ComponentType.PLATFORM,
        version=lock.interpreter.get("version"),
        description=f"{lock.interpreter.get('name', '')} runtime; base image {lock.base_image or 'none'}",
        bom_ref=f"runtime:{lock.runtime_id}",
    )
    components: list[Component] = []
    for p in lock.packages:
        scope, _, name = p.name.rpartition("/") if p.name.startswith("@") else ("", "", p.name)
        components.append(
            Component(
                name=p.name,
                version=p.version,
                type=ComponentType.LIBRARY,
                purl=PackageURL(type=kind, namespace=scope or None, name=name, version=p.version),
                hashes=_sbom_hashes(p),
                bom_ref=f"{kind}:{p.name}@{p.version}",
            )
        )
    for component in components:
        bom.components.add(component)
    bom.register_dependency(bom.metadata.component, components)  # the runtime holds every package
    return str(JsonV1Dot6(bom).output_as_string(indent=2))


# format → (media type; renderer of (lock, built_at)); a family's own format is its ``lock_format`` (the registry's),
# the others (the SBOM) are every family's
FORMATS: dict[str, tuple[str, Callable[[RuntimeLock, datetime | None], str]]] = {
    "requirements": ("text/plain; charset=utf-8", lambda lock, _: requirements_txt(lock)),
    "package-lock": ("application/json", lambda lock, _: package_lock_json(lock)),
    "cyclonedx": ("application/vnd.cyclonedx+json; version=1.6", sbom_json),
}


def _family_of_format(form: str) -> str | None:
    """The family whose lock format ``form`` is, or None (a format of every family)."""
    return next((f.name for f in languages.families() if f.lock_format == form), None)


def render(lock: RuntimeLock, form: str, built_at: datetime | None = None) -> tuple[str, str]:
    """``lock`` as ``form`` (a key of :data:`FORMATS`): (media type, text); :class:`BadRequest` for the other
    family's format (``requirements`` of a Node runtime, ``package-lock`` of a Python one)."""
    media, write = FORMATS[form]
    family = _family_of_format(form)
    mine = languages.family_of(lock.language).name
    if family is not None and family != mine:
        fits = [name for name in FORMATS if _family_of_format(name) in (None, mine)]
        raise BadRequest(
            f"format {form!r} is a {family} lock and runtime {lock.runtime_id!r} is a {lock.language} runtime: "
            f"ask for json, {' or '.join(fits)}"
        )
    return media, write(lock, built_at)


def _sbom_hashes(package: LockedPackage) -> list[HashType]:
    from cyclonedx.model import HashAlgorithm, HashType

    if package.sha256:
        return [HashType(alg=HashAlgorithm.SHA_256, content=package.sha256)]
    sha512 = _sha512_hex(package)
    return [HashType(alg=HashAlgorithm.SHA_512, content=sha512)] if sha512 else []


async def base_image_id(backend: object, image: str) -> str | None:
    """The id (``sha256:…``, content-addressed) of the base image ``image`` on a docker backend; None on a
    backend without images (the process backend runs the host's interpreter) or when it cannot be read."""
    engine = getattr(backend, "engine", None)
    if getattr(backend, "name", "") != "docker" or engine is None:
        return None

    def read(client: Any) -> str:
        return str(client.images.get(image).id)

    try:
        found: str = await engine.call(read)
    except Exception:  # an engine restarting: the lock is still worth answering
        return None
    return found
