"""``/docs``: Swagger UI served from this service, never from a CDN, so it works offline.

The assets come from the ``swagger-ui-bundle-v2`` package (Swagger UI 5, which reads OpenAPI
3.1), installed with the service and served under ``/docs/assets``; the page names no other
host (no CDN, no favicon from elsewhere, no online validator badge). ReDoc is not offered:
it has no packaged offline build, and one documentation page is enough.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

__all__ = ["ASSETS", "install"]

ASSETS = "/docs/assets"

# Module-level endpoints that read their app from the request: FastAPI keeps the endpoints it classified in a
# process-wide cache (fastapi.dependencies.models, up to 4,096 callables), so an endpoint closing over its app
# kept every app ever made in the process alive (a test suite's ~1 MB an app; an embedder's apps too).
router = APIRouter(include_in_schema=False)


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    app = request.app
    return get_swagger_ui_html(
        openapi_url=app.openapi_url or "/openapi.json",
        title=f"{app.title} — API",
        swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
        oauth2_redirect_url="/docs/oauth2-redirect",
        swagger_ui_parameters={"validatorUrl": None},  # default: a badge fetched from validator.swagger.io
    )


@router.get("/docs/oauth2-redirect")
async def oauth2_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


def install(app: FastAPI) -> None:
    """Serve ``/docs`` (and its OAuth2 redirect page) with local assets."""
    app.mount(ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="swagger-ui")
    app.include_router(router)
