"""``/docs`` offline: Swagger UI's assets served from the ``swagger-ui-bundle`` package.

FastAPI's default page loads Swagger UI from a CDN, so it is blank without internet. The
packaged Swagger UI (4.x) reads OpenAPI 3.0 only, while FastAPI writes 3.1; the page therefore
loads ``/docs/openapi.json``, the same document with its 3.1 forms (``type: null`` in
``anyOf``, ``examples`` lists, ``const``, numeric exclusive bounds) written the 3.0 way.
``/openapi.json`` stays the 3.1 original.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

from memory_service.api.errors import ApiError

DOCS = "/docs"
ASSETS = f"{DOCS}/assets"
DOCS_OPENAPI = f"{DOCS}/openapi.json"
_FILES = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon-32x32.png": "image/png",
}


def assets_dir() -> Path:
    import swagger_ui_bundle

    return Path(swagger_ui_bundle.swagger_ui_path)


def as_openapi_30(node: Any) -> Any:
    """A copy of an OpenAPI 3.1 document (or part) in the 3.0 forms Swagger UI 4 reads."""
    if isinstance(node, list):
        return [as_openapi_30(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: as_openapi_30(value) for key, value in node.items()}
    for key in ("anyOf", "oneOf"):
        options = out.get(key)
        if isinstance(options, list) and {"type": "null"} in options:
            rest = [o for o in options if o != {"type": "null"}]
            out["nullable"] = True
            if len(rest) == 1:
                del out[key]
                only = rest[0]
                if "$ref" in only:
                    out["allOf"] = [only]
                else:
                    out = {**only, **out}
            else:
                out[key] = rest
    kind = out.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        out["nullable"] = out.get("nullable", False) or len(kinds) < len(kind)
        out["type"] = kinds[0] if len(kinds) == 1 else kinds
    if isinstance(out.get("examples"), list):  # a schema's list; 3.0 has one ``example``
        examples = out.pop("examples")
        if examples:
            out["example"] = examples[0]
    if "const" in out:
        out["enum"] = [out.pop("const")]
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(out.get(bound), int | float) and not isinstance(out.get(bound), bool):
            out[plain], out[bound] = out[bound], True
    return out


def install_docs(app: FastAPI) -> None:
    """``/docs``, its assets and its 3.0 document (create the app with ``docs_url=None``)."""
    title = f"{app.title} - API docs"

    @app.get(DOCS, include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=DOCS_OPENAPI,
            title=title,
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
        )

    @app.get(DOCS_OPENAPI, include_in_schema=False)
    def docs_openapi() -> JSONResponse:
        document = as_openapi_30(app.openapi())
        document["openapi"] = "3.0.3"
        return JSONResponse(document)

    @app.get(f"{ASSETS}/{{name}}", include_in_schema=False)
    def docs_asset(name: str) -> FileResponse:
        if name not in _FILES:
            raise ApiError(404, "not_found", f"no docs asset {name!r}")
        return FileResponse(assets_dir() / name, media_type=_FILES[name])
