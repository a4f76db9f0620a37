"""The web playground: ``GET /`` serves the page, ``/assets/*`` its bundle, same origin as ``/v1``.

The bundle (CodeMirror 6 and the app in ``web/src``) is built by ``make install`` into
``web/dist`` (not committed; nothing is fetched from a CDN, so the page works offline); a wheel carries
it as package data (:mod:`evaluator_host.shared.bundled` finds either). The
page itself holds no data: it calls ``/v1`` like any client, with the API key the user types
when keys are configured, so serving it needs no key. A service whose bundle was not built
answers ``/`` with a page saying how to build it. These routes are GETs, which the evaluate
fast path never looks at (it takes POSTs to two paths), so they cost the hot routes nothing.
"""

from __future__ import annotations

import mimetypes
import re

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, Response

from evaluator_host.api.query import any_query
from evaluator_host.shared.bundled import WEB_DIST

__all__ = ["WEB_DIST", "install"]

# The page loads only its own files; CodeMirror injects <style> elements, hence style-src 'unsafe-inline'.
_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}
_NOT_BUILT = """<!doctype html><html lang="en"><meta charset="utf-8"><title>evaluator-host</title>
<body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 4rem auto">
<h1>evaluator-host</h1><p>The web playground is not built. Run <code>make install</code> (it builds
<code>web/dist</code> from the npm packages pinned in <code>web/package-lock.json</code>), then reload.</p>
<p>The API answers meanwhile: <a href="/docs">/docs</a>.</p></body></html>"""

_ASSET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,100}")  # a file of web/dist/assets: no path, no dotfiles

router = APIRouter(include_in_schema=False)


@router.get("/")
@any_query
async def page() -> Response:
    """The playground's page (503 with build instructions when the bundle is missing)."""
    index = WEB_DIST / "index.html"
    if not index.is_file():
        return HTMLResponse(_NOT_BUILT, status_code=503, headers=_HEADERS)
    return FileResponse(index, media_type="text/html; charset=utf-8", headers=_HEADERS)


@router.get("/assets/{name}")
@any_query
async def asset(name: str, request: Request) -> Response:
    """A file of the bundle; its gzip twin (written by the build) to clients that accept gzip."""
    path = WEB_DIST / "assets" / name
    if not _ASSET.fullmatch(name) or name.endswith(".gz") or not path.is_file():
        return Response(status_code=404)
    media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    headers = {"cache-control": "no-cache", "x-content-type-options": "nosniff", "vary": "accept-encoding"}
    packed = path.with_name(name + ".gz")
    if "gzip" in request.headers.get("accept-encoding", "") and packed.is_file():
        return FileResponse(packed, media_type=media_type, headers={**headers, "content-encoding": "gzip"})
    return FileResponse(path, media_type=media_type, headers=headers)


def install(app: FastAPI) -> None:
    """Serve the page at ``/`` and the bundle under ``/assets``."""
    app.include_router(router)
