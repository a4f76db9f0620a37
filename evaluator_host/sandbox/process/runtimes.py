"""Runtimes: one per (language, base interpreter, exact pins), built once and shared.

On the process backend a Python runtime is a directory ``runtimes/<id>/`` holding ``site/`` (uv's
install, hard links into the package store: :mod:`evaluator_host.builds.store`; a copy when it
needed an sdist build or pip) and ``manifest.json`` with the pins and the full resolved lock. The
worker adds ``site/`` to an interpreter started with ``-I -S``, so only the pinned packages (and the
standard library) are importable.

A Python install can run package code (resolving or building an sdist), so it runs in a **build
sandbox** whenever the machine has namespaces (:mod:`evaluator_host.sandbox.process.installs`: a
private read-only root, only the partial runtime writable, an unprivileged build uid, seccomp, and a
network namespace whose one way out is the build relay to the configured indexes). Without
namespaces (the rlimits mode) there is no build sandbox: wheels only, whatever
``allow_sdist_builds`` says, and direct-URL requirements are refused before any of their code runs.

npm installs (``--ignore-scripts``: no package code) run in the same build sandbox, because npm
itself fetches what a package.json names (a git or tarball URL on any host) and reads npmrc files:
there the pinned Node wheel is bound read-only at ``/sandbox/node-home``, npm reads only a generated
npmrc (the host's registries, no tokens), writes the whole partial runtime (``package.json``,
``node_modules``), and reaches npm's registries only. In the rlimits mode npm runs on the host.

Before it is renamed into place a finished runtime is handed to root (:func:`hand_over`): the build
uid, every later build's, owns none of it and can write none of it.

Found or built through :class:`~evaluator_host.builds.build_once.BuildOnce`.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import glob
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from evaluator_host.builds import build_relay, build_sandbox, installers, store, uv
from evaluator_host.builds.build_once import BuildOnce, runtime_id
from evaluator_host.builds.npm import host_npm_config
from evaluator_host.definitions import languages
from evaluator_host.errors import BuildError
from evaluator_host.sandbox.base import Runtime
from evaluator_host.sandbox.inventory import RuntimeInfo
from evaluator_host.sandbox.process.bytecode import Bytecode
from evaluator_host.sandbox.process.installs import STORE_IN_SANDBOX, InstallSite, hand_over
from evaluator_host.sandbox.process.isolation import Isolation, probe
from evaluator_host.settings import Settings
from evaluator_host.storage import on_full_disk

__all__ = ["RuntimeBuilder", "hand_over"]

log = logging.getLogger(__name__)


class RuntimeBuilder(BuildOnce):
    """Process-backend runtimes: ``site/`` directories under ``cache_dir/runtimes``."""

    def __init__(self, settings: Settings, isolation: Isolation | None = None) -> None:
        super().__init__(
            settings.resolved_cache_dir / "runtimes", settings.max_concurrent_builds, settings.max_builds_per_workspace
        )
        self.settings = settings
        self._isolation = isolation
        self.bytecode = Bytecode(settings)
        self.sweep_partials()
        build_relay.sweep_stale()  # (what services killed on this machine left of their relays)

    @property
    def isolation(self) -> Isolation:
        """The machine's isolation (the backend's, else probed once)."""
        if self._isolation is None:
            self._isolation = probe(self.settings.process_isolation, self.settings.sandbox_uid_base)
        return self._isolation

    def use_isolation(self, isolation: Isolation) -> None:
        """Build in the sandbox ``isolation`` allows (the backend's probe)."""
        self._isolation = isolation

    @functools.cached_property
    def pip_config(self) -> dict[str, str]:
        """The host's pip index settings builds get (read once)."""
        return build_sandbox.host_pip_config()

    @property
    def sandboxed(self) -> bool:
        """Whether Python installs run in the build sandbox (needs namespaces)."""
        return self.isolation.mode != "rlimits"

    @property
    def sources(self) -> bool:
        """Whether sdists may be built: the setting, and only in the build sandbox."""
        return self.settings.allow_sdist_builds and self.sandboxed

    def sweep_partials(self) -> int:
        """Remove what builds and prunes that died with their process (a killed service) left: partial
        and half-removed directories.

        The cache may be shared by several processes, so a partial is removed only when no one holds
        its runtime's build lock (a live build holds it until its rename). Returns how many went.
        """
        removed = 0
        for leftover in [*self.root.glob(".*.partial-*"), *self.root.glob(".*.removed-*")]:
            marker = ".partial-" if ".partial-" in leftover.name else ".removed-"
            rid = leftover.name[1:].rsplit(marker, 1)[0]
            with open(self.root / f"{rid}.lock", "a") as lock_file:
                try:
                    fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # being built right now
                shutil.rmtree(leftover, ignore_errors=True)
                removed += 1
        return removed

    @functools.cache  # noqa: B019 - one builder per service, a handful of languages
    def base_identity(self, language: str) -> str:
        """What the runtime hash covers besides the pins: the family's interpreter binary (path,
        size and mtime, so an upgraded interpreter in place gets new runtimes)."""
        executable = languages.get(language).family.host_executable(self.settings.python_executable)
        info = os.stat(executable)
        return f"{executable}|{info.st_size}|{int(info.st_mtime)}"

    def runtime_for(self, language: str | languages.Language, pins: dict[str, str]) -> str:
        """The runtime id of ``pins`` for ``language`` (a name or the registry's entry; no build)."""
        lang = languages.resolve(language)
        return runtime_id(lang, self.base_identity(lang.name), pins)

    def bare_location(self) -> str | None:
        """No packages: the interpreter's standard library only."""
        return None

    def live_logs(self, rid: str) -> list[Path]:
        """The install's standard output, then its standard error, while it runs."""
        return [self.root / f".{rid}.building.log", self.root / f".{rid}.building.err"]

    def present(self, runtime: Runtime) -> bool:
        """Whether the runtime's directory is still there (a prune may have removed it)."""
        return runtime.location is None or os.path.isdir(runtime.location)

    def find(self, rid: str, language: str, pins: dict[str, str]) -> Runtime | None:
        """The runtime directory a finished build left (its manifest is written last)."""
        final = self.root / rid
        manifest = final / "manifest.json"
        if not manifest.exists():
            return None
        return Runtime(rid, language, pins, str(final), json.loads(manifest.read_text()).get("lock", []))

    def build(self, rid: str, language: str, pins: dict[str, str]) -> Runtime:
        """Run the family's install script into a partial directory, renamed into place when complete;
        a full disk is :class:`StorageFull`, with the partial directory removed like any failure."""
        partial = self.root / f".{rid}.partial-{uuid.uuid4().hex[:8]}"
        build = Path(tempfile.mkdtemp(prefix="evaluator-host-build-"))
        try:
            with on_full_disk(f"building runtime {rid}"):
                return self._build_into(partial, build, rid, language, pins)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
            shutil.rmtree(build, ignore_errors=True)

    def _build_into(self, partial: Path, build: Path, rid: str, language: str, pins: dict[str, str]) -> Runtime:
        started = time.monotonic()
        family = languages.get(language).family
        installer = installers.for_family(family)
        partial.mkdir(parents=True)
        site = self._site(family)
        share = family.installer == "pip" and site.can_share
        try:
            output, log = self._install(site, build, partial, family, pins, rid, share)
        except BuildError as failed:
            if not (share and self.sources and uv.NEEDS_SOURCES in f"{failed}\n{failed.output}"):
                raise
            # a pin published only as source: built again where package code may run, without the store
            log_note = f"{uv.NEEDS_SOURCES}: installing again with source builds, without the shared store\n"
            (build / "sources").mkdir()
            share = False
            output, log = self._install(site, build / "sources", partial, family, pins, rid, share)
            log = log_note + log
        if family.installer == "npm":
            allowed = build_sandbox.allowed_hosts({}, self.npm_config, self.settings.build_allow_hosts)
            installers.check_npm_lock(family, pins, rid, output, allowed)
        lock = installer.lock(output.split(installers.LOCK_MARK, 1)[1])
        hashes = installers.lock_hashes(family, output)
        entries, sources = self._link_from_store(build, partial, family, site, rid, pins) if share else (set(), {})
        os.chmod(partial, 0o755)
        manifest = {
            "id": rid,
            "language": language,
            "packages": pins,
            "lock": lock,
            "hashes": {line: hashes[line] for line in lock if line in hashes},
            "base": self.base_identity(language),
            "build_seconds": round(time.monotonic() - started, 2),
            "created_at": time.time(),
        }
        (partial / "manifest.json").write_text(json.dumps(manifest, indent=2))
        (partial / "build.log").write_text(log)
        try:
            hand_over(partial)
        except OSError as exc:  # (as root, only a file system that refuses root fails here)
            reason = f"the finished runtime could not be handed over to the service: {exc}"
            message = f"installing {installers.shown(family, pins)} failed:\n{reason}"
            raise BuildError(message, runtime_id=rid, output=reason) from exc
        for entry in entries:  # the store entries it shares: root's too (a later build writes none of them)
            if entry.stat().st_uid != 0:  # (one handed over before holds nothing else: its folders are root's)
                hand_over(entry)
        if entries:  # then (root's, nothing of the build runs) the bytecode compiled already, linked beside
            self.bytecode.link_compiled(partial / family.packages_dir, sources, site.store)
        partial.rename(self.root / rid)
        if entries:  # the rest after the first result, in the background at the lowest priority
            self.bytecode.compile_later(self.root / rid / family.packages_dir, entries, sources, site.store)
        return Runtime(rid, language, pins, str(self.root / rid), lock)

    def _install(
        self,
        site: InstallSite,
        build: Path,
        partial: Path,
        family: languages.Family,
        pins: dict[str, str],
        rid: str,
        share: bool,
    ) -> tuple[str, str]:
        """Run the install of ``pins`` (``share``: uv, wheels only, linking into the shared store;
        in the build sandbox when there are namespaces): its output and its whole log."""
        installer = installers.for_family(family)
        ca_bundle = str(self.settings.ca_bundle) if self.settings.ca_bundle else None
        relay: build_relay.BuildRelay | None = None
        if self.sandboxed:
            if family.installer == "pip":
                # an index with credentials: named plainly in the sandbox, reached with them through the relay
                in_sandbox, upstreams = build_relay.relay_credentials(self.pip_config)
                allowed = build_sandbox.allowed_hosts(in_sandbox, {}, self.settings.build_allow_hosts)
            else:  # npm: its registries only (tokens are never passed on)
                upstreams, allowed = {}, build_sandbox.registry_hosts(self.npm_config, self.settings.build_allow_hosts)
            relay = build_relay.BuildRelay(allowed, upstreams, ca_bundle)
            install, config = site.sandbox_config(build, partial, family, pins, relay, share)
        else:
            context = installer.on_host(ca_bundle)
            packages_dir = str(partial / family.packages_dir)
            if family.installer == "pip":
                context = installers.Context(
                    context.tool,
                    context.options,
                    {**context.environment, **uv.uv_environment(self.pip_config, ca_bundle)},
                    allow_direct=self._allow_direct(),
                    uv=context.uv,
                    target_python=self.settings.python_executable,
                )
                if share:
                    site.store.mkdir(exist_ok=True)
                    manifest = str(build / "links.json")
                    context = dataclasses.replace(context, cache=str(site.store), link="symlink", manifest=manifest)
                    packages_dir = str(build / "links")
            install = installer.prepare(
                pins,
                build_dir=str(build),
                packages_dir=packages_dir,
                context=context,
                sources=self.sources and not share,
            )
            config = None
            for name, text in install.files.items():
                (build / name).write_text(text)
        try:
            return site.run(install, rid, family, pins, self.live_logs(rid), config, watched=(build, partial))
        except BuildError as failed:
            if relay is None or not relay.refused:
                raise
            # what the sandbox asked of a host that is not a configured index (an npm git or tarball
            # dependency, say): named, so the answer says why rather than only the installer's words
            refused = "; ".join(dict.fromkeys(relay.refused))
            reason = f"{failed.output}\nthe build relay refused: {refused}"
            raise BuildError(
                f"{failed}\nthe build relay refused: {refused}",
                runtime_id=rid,
                output=reason,
                suggestions=failed.suggestions,
            ) from failed
        finally:
            if relay is not None:
                relay.close()

    def _link_from_store(
        self, build: Path, partial: Path, family: languages.Family, site: InstallSite, rid: str, pins: dict[str, str]
    ) -> tuple[set[Path], store.Sources]:
        """After uv installed a tree of links into the shared store: the runtime's packages folder made of
        hard links to the store (:func:`store.link_tree`); the store entries it uses, and where each of
        its folders links from (for the bytecode: :class:`Bytecode`)."""
        manifest = build / "scratch" / "links.json" if self.sandboxed else build / "links.json"
        seen_as = STORE_IN_SANDBOX if self.sandboxed else str(site.store)
        try:
            links, files = store.read_manifest(manifest)
            copies = manifest.with_name(manifest.name + ".files")
            return store.link_tree(links, files, copies, partial / family.packages_dir, site.store, seen_as)
        except (store.StoreError, OSError) as exc:
            reason = f"the installed packages could not be linked from the package store: {exc}"
            message = f"installing {installers.shown(family, pins)} failed:\n{reason}"
            raise BuildError(message, runtime_id=rid, output=reason) from exc

    def answered(self, rid: str) -> None:
        """A worker of runtime ``rid`` answered its first batch: its background bytecode compile may start
        (:meth:`Bytecode.answered`)."""
        self.bytecode.answered(self.root / rid)

    def close(self) -> None:
        """The service stops: its background bytecode compiles with it (:meth:`Bytecode.close`)."""
        self.bytecode.close()

    def wait_compiled(self, timeout_s: float | None = None) -> bool:
        """Wait for the background bytecode compiles started so far (:class:`Bytecode`); whether none
        is left running."""
        return self.bytecode.wait(timeout_s)

    @functools.cached_property
    def npm_config(self) -> dict[str, str]:
        """The host's npm registry settings (read once)."""
        return host_npm_config()

    def _allow_direct(self) -> tuple[str, ...]:
        """The hosts a direct-URL requirement may name (``build_allow_hosts`` without ports)."""
        return build_sandbox.direct_hosts(self.settings.build_allow_hosts)

    def _site(self, family: languages.Family) -> InstallSite:
        """What a build of ``family`` runs its install with (the isolation as it is now; only its own
        installer's host settings, each read once)."""
        npm = family.installer == "npm"
        return InstallSite(
            self.settings,
            self.isolation,
            self.build_uid(),
            self.pip_config if self.sandboxed and not npm else {},  # (read for the build sandbox only)
            self.npm_config if npm else {},
            self.sources,
            self._allow_direct(),
            self.root,
        )

    def build_uid(self) -> int | None:
        """The unprivileged uid installs run as (None: no uid change is possible here)."""
        return build_sandbox.build_uid(self.settings.sandbox_uid_base) if self.isolation.uid_drop else None

    # -- management (API, CLI) -----------------------------------------------------------
    def inventory(self, only: str | None = None) -> list[RuntimeInfo]:
        """Every runtime directory a finished build left (any base interpreter); ``only``: that id's."""
        found = []
        pattern = "*/manifest.json" if only is None else f"{glob.escape(only)}/manifest.json"
        for manifest in sorted(self.root.glob(pattern)):
            if manifest.parent.name.startswith("."):
                continue
            try:
                data = json.loads(manifest.read_text())
            except (OSError, ValueError):
                continue
            rid = manifest.parent.name
            found.append(
                RuntimeInfo(
                    id=rid,
                    language=languages.get(data.get("language", languages.DEFAULT)).family.name,
                    packages=dict(data.get("packages", {})),
                    lock=list(data.get("lock", [])),
                    hashes=dict(data.get("hashes") or {}),
                    size_bytes=store.apparent_size(manifest.parent),
                    created_at=data.get("created_at"),
                    last_used=self.last_used(rid),
                    build_seconds=data.get("build_seconds"),
                    in_use=self.in_use(rid),
                    location=str(manifest.parent),
                )
            )
        return found

    def build_log(self, rid: str) -> str:
        """The whole log of the build that made ``rid`` ('' when there is none)."""
        try:
            return (self.root / rid / "build.log").read_text(errors="replace")
        except OSError:
            return ""

    def remove(self, rid: str) -> bool:
        """Remove runtime ``rid``; False (and nothing removed) while a live worker holds its lease
        or a build of it runs. The directory is renamed away first, so no worker ever starts on a
        half-removed one."""
        with self.exclusive(rid) as held:
            if not held:
                return False
            trash = self.root / f".{rid}.removed-{uuid.uuid4().hex[:8]}"
            try:
                (self.root / rid).rename(trash)
            except FileNotFoundError:
                pass
            self.forget_marks(rid)
        shutil.rmtree(trash, ignore_errors=True)
        return True
