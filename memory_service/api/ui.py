"""``/ui``: the memory inspector, a static page and its script served from the package.

Every asset is a file of ``memory_service/api/ui_assets/`` (package data), so the page works
offline. It holds no endpoint of its own: the script calls the JSON API with the key typed
into the page (kept in the tab's ``sessionStorage``). Each response carries a
Content-Security-Policy without ``'unsafe-inline'``: no inline script or style runs, and the
script builds the page with ``textContent``, never HTML from data.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import Response

from memory_service.api.errors import ApiError

UI = "/ui"
UI_ASSETS = f"{UI}/assets"
_PAGE = "index.html"
_ASSETS = {
    "inspector.js": "text/javascript; charset=utf-8",
    "inspector.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def asset_bytes(name: str) -> bytes:
    return files("memory_service.api").joinpath("ui_assets", name).read_bytes()


def _served(name: str, media_type: str) -> Response:
    return Response(asset_bytes(name), media_type=media_type, headers=SECURITY_HEADERS)


def install_ui(app: FastAPI) -> None:
    """``/ui`` (and ``/ui/``) and its assets, outside the OpenAPI document."""

    @app.get(UI, include_in_schema=False)
    @app.get(f"{UI}/", include_in_schema=False)
    def inspector() -> Response:
        return _served(_PAGE, "text/html; charset=utf-8")

    @app.get(f"{UI_ASSETS}/{{name}}", include_in_schema=False)
    def inspector_asset(name: str) -> Response:
        if name not in _ASSETS:
            raise ApiError(404, "not_found", f"no inspector asset {name!r}")
        return _served(name, _ASSETS[name])
