"""The API's documentation pages, ``GET /docs`` (Swagger UI) and ``GET /redoc`` (ReDoc),
served with every file they need from vecserve itself: they work offline and reach no
other host.

The pages are vecserve's own HTML; Swagger UI's and ReDoc's built files come from the
``fastapi-offline`` package (MIT; it ships swagger-ui-dist's ``swagger-ui-bundle.js`` and
``swagger-ui.css``, Apache-2.0, and ReDoc's ``redoc.standalone.js``, MIT), installed with
``vecserve[api]``, and are served under ``/static/docs/``. Swagger UI is started by
``static/docs.js`` (no inline script), with its validator badge off (it would call
validator.swagger.io). Both pages carry a Content-Security-Policy that names no other
host: scripts, styles, fonts and the OpenAPI document come from the service; the two
libraries' inline styles and ReDoc's search worker (a ``blob:``) are allowed. (ReDoc's
sidebar asks for Redocly's logo on its CDN: the policy refuses it, and ReDoc then hides
the image.)

URLs in the pages are relative (``openapi.json``, ``static/docs/...``), so the pages also
work when the service is mounted under a prefix.

>>> sorted(ASSETS)
['docs.js', 'favicon.png', 'redoc.standalone.js', 'swagger-ui-bundle.js', 'swagger-ui.css']
"""

from __future__ import annotations

import functools
from importlib import resources

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response

from ..errors import VecserveError

__all__ = ["ASSETS", "DOCS_CSP", "add_docs_routes"]

#: name -> (package holding it, media type)
ASSETS = {
    "swagger-ui-bundle.js": ("fastapi_offline", "text/javascript; charset=utf-8"),
    "swagger-ui.css": ("fastapi_offline", "text/css; charset=utf-8"),
    "redoc.standalone.js": ("fastapi_offline", "text/javascript; charset=utf-8"),
    "favicon.png": ("fastapi_offline", "image/png"),
    "docs.js": ("vecserve.service", "text/javascript; charset=utf-8"),
}

DOCS_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
    "worker-src 'self' blob:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)

_HEADERS = {
    "Content-Security-Policy": DOCS_CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

_SWAGGER = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>{title} - Swagger UI</title>
  <link rel="icon" href="static/docs/favicon.png">
  <link rel="stylesheet" href="static/docs/swagger-ui.css">
</head>
<body>
  <div id="swagger-ui" data-openapi-url="{openapi}"></div>
  <script src="static/docs/swagger-ui-bundle.js"></script>
  <script src="static/docs/docs.js"></script>
</body>
</html>
"""

_REDOC = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>{title} - ReDoc</title>
  <link rel="icon" href="static/docs/favicon.png">
</head>
<body>
  <redoc spec-url="{openapi}"></redoc>
  <script src="static/docs/redoc.standalone.js"></script>
</body>
</html>
"""


@functools.cache
def _asset(name: str) -> bytes:
    package, _ = ASSETS[name]
    where = resources.files(package)
    path = where.joinpath("static", name)
    try:
        return path.read_bytes()
    except (OSError, ModuleNotFoundError) as exc:  # a broken install: no package data
        raise VecserveError(
            f"the API docs' file {name} is missing ({exc}); install vecserve[api]"
        ) from exc


def add_docs_routes(app: FastAPI) -> None:
    """``GET /docs``, ``GET /redoc`` and ``GET /static/docs/{name}`` (their files; 404
    for any other name). ``app`` is made with ``docs_url=None, redoc_url=None``."""
    openapi = (app.openapi_url or "/openapi.json").lstrip("/")

    @app.get("/docs", include_in_schema=False)
    def swagger_page():
        html = _SWAGGER.format(title=app.title, openapi=openapi)
        return HTMLResponse(html, headers=_HEADERS)

    @app.get("/redoc", include_in_schema=False)
    def redoc_page():
        html = _REDOC.format(title=app.title, openapi=openapi)
        return HTMLResponse(html, headers=_HEADERS)

    @app.get("/static/docs/{name}", include_in_schema=False)
    def docs_asset(name: str):
        if name not in ASSETS:
            return Response(status_code=404)
        headers = {**_HEADERS, "Cache-Control": "public, max-age=86400"}
        return Response(_asset(name), media_type=ASSETS[name][1], headers=headers)
