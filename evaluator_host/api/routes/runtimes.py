"""``/v1/runtimes``: build a package set ahead of time, follow its build, list what is built.

Runtimes are a cache shared by every workspace (a language and exact pins of public packages, no
user code): any key may build one or read one by id (the id is a digest of the language and the
pins). A workspace's key lists only its own — the ones it asked for and the ones its evaluators run
on — so no workspace can enumerate what the others use; the operator key lists them all.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status
from fastapi.responses import PlainTextResponse

from evaluator_host.api import interpreters
from evaluator_host.api.deps import PrincipalDep, ServicesDep
from evaluator_host.api.paging import MAX_LIMIT, page
from evaluator_host.builds import lockfile
from evaluator_host.builds.models import RuntimeCreate, RuntimeList, RuntimeLock, RuntimeView
from evaluator_host.definitions import languages
from evaluator_host.errors import ConflictError

router = APIRouter(prefix="/runtimes", tags=["runtimes"])


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=RuntimeView,
    responses={200: {"model": RuntimeView, "description": "Built already (or being built by another request)."}},
)
async def create(body: RuntimeCreate, services: ServicesDep, response: Response, who: PrincipalDep) -> RuntimeView:
    """Build ``packages`` for ``language`` in the background: 202 with ``Location`` (poll it for the
    status, the elapsed time and the log's end); 200 when it is built or being built already. The
    runtime is then in the list of the key's workspace."""
    view, started = await services.runtimes.create(body.language, body.packages, who.workspace_id)
    if who.workspace_id is not None:
        await services.workspaces.note_runtime(who.workspace_id, view.id)
    response.status_code = status.HTTP_202_ACCEPTED if started else status.HTTP_200_OK
    response.headers["Location"] = f"/v1/runtimes/{view.id}"
    return view


@router.get("", response_model=RuntimeList)
async def list_runtimes(
    services: ServicesDep,
    who: PrincipalDep,
    limit: Annotated[int | None, Query(ge=1, le=MAX_LIMIT, description="At most this many (default: all).")] = None,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page.")] = None,
) -> RuntimeList:
    """The workspace's runtimes (built, building, failed lately; every one for the operator key), by id:
    those its key asked for with ``POST`` and those its evaluators run on."""
    own = None if who.workspace_id is None else await services.workspaces.runtimes_of(who.workspace_id)
    every = await services.runtimes.list_all(only=own)
    data, after = page(every, lambda r: (r.id,), descending=False, limit=limit, cursor=cursor)
    return RuntimeList(data=data, count=len(data), next_cursor=after)


@router.get("/{runtime_id}", response_model=RuntimeView)
async def get(runtime_id: str, services: ServicesDep, _who: PrincipalDep) -> RuntimeView:
    """One runtime: status, pins, its lock, size, last use, build duration; while building, the
    elapsed time and the end of the build log. Any key may read any runtime by id (a shared cache)."""
    return await services.runtimes.get(runtime_id)


@router.get(
    "/{runtime_id}/lock",
    response_model=RuntimeLock,
    responses={200: {"content": {"text/plain": {}, "application/vnd.cyclonedx+json": {}}}},
)
async def lock(
    runtime_id: str,
    services: ServicesDep,
    _who: PrincipalDep,
    format: Annotated[
        str,
        Query(
            pattern="^(json|requirements|package-lock|cyclonedx)$",
            description="json | requirements | package-lock | cyclonedx (a CycloneDX 1.6 JSON SBOM)",
        ),
    ] = "json",
) -> RuntimeLock | Response:
    """A built runtime's full lock: every package with its version (and hash where the build recorded it), the
    interpreter's version and the base image's id; as JSON, ``requirements.txt`` (Python),
    ``package-lock.json`` (Node) or a CycloneDX SBOM (the same bytes on every fetch). 409 while it is not built;
    400 for the other family's format (``requirements`` of a Node runtime, ``package-lock`` of a Python one)."""
    view = await services.runtimes.get(runtime_id)
    if view.status != "ready":
        raise ConflictError(f"runtime {runtime_id!r} is {view.status}: its lock is known once it is built")
    family = languages.family_of(view.language).name
    versions = interpreters.known(services.backend.name) or {}
    base = await lockfile.base_image_id(services.backend, services.settings.base_image)
    found = lockfile.runtime_lock(view, {"name": family, "version": versions.get(family, "unknown")}, base)
    if format == "json":
        return found
    media, text = lockfile.render(found, format, view.created_at)
    return PlainTextResponse(text, media_type=media)
