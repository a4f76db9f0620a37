"""Runtime images for the docker backend: one per (language family, base image id, exact pins).

A runtime image is the base image plus one layer holding the pinned packages
(``/opt/evaluator/site`` for Python, ``/opt/evaluator/node/node_modules`` for Node), tagged
``evaluator-host/runtime:<runtime id>`` and labelled with the pins and the full resolved
lock. It is the install run in a build box (:mod:`evaluator_host.sandbox.docker.build_box`), committed.

Builds are serialized per runtime id (asyncio lock + file lock), a failed build
raises :class:`BuildError` with the installer's message and leaves no image; every build's
log is kept in ``cache_dir/images/<id>.build.log``.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker

from evaluator_host.builds import disk_bound, installers, suggest, uv
from evaluator_host.builds.build_once import BuildOnce, runtime_id
from evaluator_host.definitions import languages
from evaluator_host.definitions.languages import Family
from evaluator_host.errors import BackendUnavailable, BuildError
from evaluator_host.sandbox.base import Runtime
from evaluator_host.sandbox.docker import box_disk
from evaluator_host.sandbox.docker.build_box import BuildBox, BuildBoxes
from evaluator_host.sandbox.docker.engine import MANAGED, OWNER, Engine, NotFound
from evaluator_host.sandbox.docker.store_binds import is_folder, store_fits
from evaluator_host.sandbox.inventory import RuntimeInfo
from evaluator_host.sandbox.process.runtimes import RuntimeBuilder
from evaluator_host.settings import Settings

__all__ = ["RUNTIME_REPO", "DockerRuntimeBuilder", "ImageInfo", "is_folder"]

log = logging.getLogger(__name__)

RUNTIME_REPO = "evaluator-host/runtime"
L_RUNTIME = "evaluator-host.runtime-id"
L_LANGUAGE = "evaluator-host.language"
L_PACKAGES = "evaluator-host.packages"
L_LOCK = "evaluator-host.lock"
L_HASHES = "evaluator-host.hashes"  # JSON {lock line: [archive hashes]} (none on images built before)
L_BASE = "evaluator-host.base-image"


@dataclass(frozen=True)
class ImageInfo:
    """A cached runtime image, as ``evaluator-host images list`` shows it."""

    runtime_id: str
    image_id: str
    language: str
    packages: dict[str, str]
    lock: list[str]
    size_bytes: int
    created: str
    last_used: float | None
    hashes: dict[str, list[str]] = field(default_factory=dict)


class DockerRuntimeBuilder(BuildOnce):
    """Runtime images: the base image for no packages, one committed image per package set."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        # locks, build logs, last-use marks
        super().__init__(
            settings.resolved_cache_dir / "images", settings.max_concurrent_builds, settings.max_builds_per_workspace
        )
        self.settings = settings
        self.engine = engine
        self._base_id: str | None = None
        self.boxes = BuildBoxes(settings, engine, self.base_id)
        # store mode: Python runtimes are the process backend's folders, bound into base-image workers
        self.folders = RuntimeBuilder(settings) if settings.docker_runtime_store else None

    # -- identity ------------------------------------------------------------------------
    def base_id(self) -> str:
        """The base image's id (looked up once; ``BackendUnavailable`` when it is missing)."""
        if self._base_id is None:

            def lookup(client: docker.DockerClient) -> str:
                try:
                    return str(client.images.get(self.settings.base_image).id)
                except NotFound:
                    raise BackendUnavailable(
                        f"the base image {self.settings.base_image} is missing: run `evaluator-host images build "
                        "--base` (`make images` in a checkout; or set EVALUATOR_HOST_BASE_IMAGE)",
                        retry_after_s=60,
                    ) from None

            self._base_id = self.engine.run_sync(lookup)
        return self._base_id

    def runtime_for(self, language: str | languages.Language, pins: dict[str, str]) -> str:
        """The runtime id of ``pins`` on this base image (no build)."""
        return runtime_id(language, self.base_id(), pins)

    def tag(self, rid: str) -> str:
        """The image reference of runtime ``rid``."""
        return f"{RUNTIME_REPO}:{rid}"

    # -- BuildOnce -----------------------------------------------------------------------
    def bare_location(self) -> str | None:
        """No packages: the base image itself."""
        return self.base_id()

    def find(self, rid: str, language: str, pins: dict[str, str]) -> Runtime | None:
        """The image tagged for ``rid``, if any service built it (in store mode, its folder first)."""
        if self._in_store(language):
            assert self.folders is not None
            found = self.folders.find(rid, language, pins)
            if found is not None:
                return found
        return self.engine.run_sync(self._existing, rid, language)

    def _in_store(self, language: str) -> bool:
        """Whether ``language``'s runtimes are store folders here (``docker_runtime_store``, Python, and the
        host's build sandbox available)."""
        if self.folders is None or languages.get(language).family.installer != "pip":
            return False
        return self.folders.sandboxed and self._store_fits

    @functools.cached_property
    def _store_fits(self) -> bool:
        """Whether a folder built for the host's interpreter runs on the base image's (asked once)."""
        return store_fits(self.settings, self.engine, self.base_id())

    def _existing(self, client: docker.DockerClient, rid: str, language: str) -> Runtime | None:
        try:
            image = client.images.get(self.tag(rid))
        except NotFound:
            return None
        labels = image.labels or {}
        if labels.get(OWNER, self.engine.owner) != self.engine.owner:
            self._adopt(rid)  # another data dir's image, used here: this data dir's runtime too from now on
        packages, lock = json.loads(labels.get(L_PACKAGES, "{}")), json.loads(labels.get(L_LOCK, "[]"))
        return Runtime(rid, language, packages, str(image.id), lock)

    # -- build ---------------------------------------------------------------------------
    def close(self) -> None:
        """Stop store mode's compiles, finish background work and remove the spare build box (blocking)."""
        if self.folders is not None:
            self.folders.close()
        self.boxes.close()

    def build(self, rid: str, language: str, pins: dict[str, str]) -> Runtime:
        """Install ``pins`` in a build box and commit it (see the module docstring); in store mode, the
        process backend's build of a folder of links into the package store."""
        if self._in_store(language):
            assert self.folders is not None
            # the folder builder's lock too: another service's start-up sweep then leaves our partial alone
            with open(self.folders.root / f"{rid}.lock", "a") as held:
                fcntl.flock(held, fcntl.LOCK_EX)
                return self.folders.build(rid, language, pins)
        family = languages.get(language).family
        shown = installers.shown(family, pins)
        started = time.monotonic()
        box = self.boxes.take()
        try:
            output, code = self._install(box, family, pins, rid)
            if code and box.store and self.settings.allow_sdist_builds and uv.NEEDS_SOURCES in output:
                # a pin published only as source: again, where package code may run, without the shared cache
                self.boxes.release(box)
                box = self.boxes.open_without_store()
                again, code = self._install(box, family, pins, rid)
                output = f"{uv.NEEDS_SOURCES}: installing again with source builds, without the shared cache\n{again}"
            installed = time.monotonic()
            runtime = None
            if code == 0 and installers.LOCK_MARK in output:
                try:
                    self.boxes.hand_over(box)  # nothing of the image stays the build uid's
                except RuntimeError as exc:
                    raise BuildError(f"installing {shown} failed:\n{exc}", runtime_id=rid, output=str(exc)) from exc
                runtime = self.engine.run_sync(self._commit, box, rid, family, pins, output)
                log.info(
                    "built runtime %s: install %.2f s, commit %.2f s",
                    rid,
                    installed - started,
                    time.monotonic() - installed,
                )
        finally:
            self.boxes.release(box)
        (self.root / f"{rid}.build.log").write_text(
            f"# {shown} (exit {code}, {time.monotonic() - started:.1f} s)\n{output}"
        )
        if runtime is None:
            raise installers.build_failed(
                family,
                pins,
                rid,
                output,
                self.settings.allow_sdist_builds,
                # the host's pip reads the same indexes the boxes get (it runs no package code)
                versions_of=lambda name: suggest.pip_versions(sys.executable, name),
            )
        return runtime

    def _install(self, box: BuildBox, family: Family, pins: dict[str, str], rid: str) -> tuple[str, int]:
        """The install in ``box``; a ``BuildError`` naming the bound when it wrote past ``build_max_disk_mb``."""
        try:
            return self.boxes.install(box, family, pins, self.live_logs(rid)[0])
        except box_disk.Exceeded as exc:
            limit = self.settings.build_max_disk_mb
            raise disk_bound.exceeded(installers.shown(family, pins), rid, limit, exc.used) from exc

    def _commit(
        self, client: docker.DockerClient, box: BuildBox, rid: str, family: Family, pins: dict[str, str], output: str
    ) -> Runtime:
        """Commit ``box`` as the runtime image of ``rid``, labelled with the pins and the lock."""
        api = client.api
        lock = installers.for_family(family).lock(output.split(installers.LOCK_MARK)[-1])
        hashes = installers.lock_hashes(family, output)
        labels = {
            MANAGED: "1",
            OWNER: self.engine.owner,  # the data dir that built it (its inventory lists it)
            L_RUNTIME: rid,
            L_LANGUAGE: family.name,
            L_PACKAGES: json.dumps(pins, sort_keys=True),
            L_LOCK: json.dumps(lock),
            L_HASHES: json.dumps({line: hashes[line] for line in lock if line in hashes}),
            L_BASE: self.base_id(),
        }
        image = api.commit(
            box.container_id,
            repository=RUNTIME_REPO,
            tag=rid,
            pause=False,  # the box only runs `sleep` now: nothing to freeze
            conf={"Labels": labels, "Cmd": ["python3"], "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"]},
        )
        return Runtime(rid, family.name, pins, str(image["Id"]), lock)

    # -- management (CLI) ----------------------------------------------------------------

    def _adopt(self, rid: str) -> None:
        """Mark runtime ``rid``'s image, built by another data dir's service, as used by this one's."""
        with contextlib.suppress(OSError):
            (self.root / f"{rid}.adopted").touch()

    def _mine(self, labels: dict[str, str]) -> bool:
        """Whether a runtime image is this data dir's: built here (its owner label), found and used here (adopted),
        or built before images carried an owner. Another data dir's service on the same engine has its own."""
        owner = labels.get(OWNER)
        return owner is None or owner == self.engine.owner or (self.root / f"{labels[L_RUNTIME]}.adopted").exists()

    def list_images(self) -> list[ImageInfo]:
        """Every cached runtime image of this data dir (any base; :meth:`_mine`)."""

        def listing(client: docker.DockerClient) -> list[dict[str, Any]]:
            # the engine's summaries, one request: ``images.list`` inspects each image after listing, and an image
            # another service removes in between failed the whole listing with a 404 (two services, one engine)
            return list(client.api.images(filters={"label": f"{L_RUNTIME}"}))

        infos = []
        for image in self.engine.run_sync(listing):
            labels = image.get("Labels") or {}
            if not self._mine(labels):
                continue
            rid = labels[L_RUNTIME]
            used = self._used_path(rid)
            infos.append(
                ImageInfo(
                    runtime_id=rid,
                    image_id=str(image["Id"])[:19],  # sha256: and 12 digits, as the SDK's short_id
                    language=labels.get(L_LANGUAGE, "?"),
                    packages=json.loads(labels.get(L_PACKAGES, "{}")),
                    lock=json.loads(labels.get(L_LOCK, "[]")),
                    size_bytes=int(image.get("Size", 0)),
                    created=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(image.get("Created", 0)))),
                    last_used=used.stat().st_mtime if used.exists() else None,
                    hashes=json.loads(labels.get(L_HASHES, "{}")),
                )
            )
        return sorted(infos, key=lambda i: (i.language, i.runtime_id))

    def inventory(self, only: str | None = None) -> list[RuntimeInfo]:
        """Every cached runtime image as a :class:`RuntimeInfo` (``only``: that id's); in use while any
        container of it exists."""

        def used_images(client: docker.DockerClient) -> set[str]:
            containers = client.api.containers(all=True, filters={"label": MANAGED})
            return {str(c.get("ImageID", "")) for c in containers}

        in_use = self.engine.run_sync(used_images)
        found = []
        for info in self.list_images():
            if only is not None and info.runtime_id != only:
                continue
            record = self.build_record(info.runtime_id)
            created = record.get("finished_at")
            seconds = record.get("seconds")
            found.append(
                RuntimeInfo(
                    id=info.runtime_id,
                    language=info.language,
                    packages=info.packages,
                    lock=info.lock,
                    hashes=info.hashes,
                    size_bytes=info.size_bytes,
                    created_at=float(created) if isinstance(created, int | float) else _parse_created(info.created),
                    last_used=info.last_used,
                    build_seconds=float(seconds) if isinstance(seconds, int | float) else None,
                    in_use=any(image.startswith(f"sha256:{info.image_id.split(':')[-1]}") for image in in_use),
                    location=info.image_id,
                )
            )
        if self.folders is not None:  # store mode: the sets' folders too (this base image's ids, not the process
            # backend's folders beside them in the same data dir)
            found += [i for i in self.folders.inventory(only) if self._store_folder(i)]
        return found

    def _store_folder(self, info: RuntimeInfo) -> bool:
        """Whether a runtime folder is one of this builder's (a set of a family whose folders store mode binds, its
        id on this base image)."""
        family = languages.family_of(info.language)
        return family.installer == "pip" and info.id == self.runtime_for(family.name, info.packages)

    def live_logs(self, rid: str) -> list[Path]:
        """A build's live output (a store folder's build while it writes one)."""
        if self.folders is not None and (found := self.folders.live_logs(rid))[0].exists():
            return found
        return super().live_logs(rid)

    def present(self, runtime: Runtime) -> bool:
        """A store folder is there while its directory is (an image: True, as before)."""
        if self.folders is not None and is_folder(runtime.location):
            return self.folders.present(runtime)
        return True

    def lease(self, rid: str) -> int:
        """Hold ``rid`` while a container uses it (store folders: the folder builder's lease, which a prune
        of the folder waits out; images: the engine refuses to remove an image in use)."""
        if self.folders is not None:
            return self.folders.lease(rid)
        return super().lease(rid)

    def build_log(self, rid: str) -> str:
        """The whole log of the build that made ``rid`` ('' when there is none)."""
        if self.folders is not None and (found := self.folders.build_log(rid)):
            return found  # (a store folder's)
        try:
            return (self.root / f"{rid}.build.log").read_text(errors="replace")
        except OSError:
            return ""

    def answered(self, rid: str) -> None:
        """A worker of ``rid`` answered its first batch: a store folder's bytecode compile may start now."""
        if self.folders is not None:
            self.folders.answered(rid)

    def forget_location(self, location: str | None) -> None:
        """Forget the runtime whose image is ``location`` (it was removed from the engine)."""
        for rid, runtime in list(self._cache.items()):
            if runtime.location == location:
                self.forget(rid)

    def remove(self, rid: str) -> bool:
        """Remove runtime image ``rid`` (its marks go with it; a failed build's log stays when there
        was no image); False when a container still uses it."""
        if self.folders is not None and (self.folders.root / rid).is_dir():
            return self.folders.remove(rid)

        def remove(client: docker.DockerClient) -> str:
            try:
                client.images.remove(self.tag(rid))
            except NotFound:
                return "absent"
            except docker.errors.APIError as exc:
                if exc.status_code == 409:
                    return "in use"
                raise
            return "removed"

        outcome = self.engine.run_sync(remove)
        if outcome == "removed":
            self.forget_marks(rid)
        elif outcome == "absent":
            self.forget(rid)
            self._used_path(rid).unlink(missing_ok=True)
        return outcome != "in use"


def _parse_created(created: str) -> float | None:
    """The engine's ``Created`` (ISO 8601, seconds kept) as a timestamp."""
    try:
        return time.mktime(time.strptime(created[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    except ValueError:
        return None
