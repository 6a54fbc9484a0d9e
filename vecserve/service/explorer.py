"""The explorer page: ``GET /`` and its static files, shipped inside the package.

The page (``static/index.html``, ``app.js``, ``style.css``, ``icon.svg``) is plain HTML,
an ES module and CSS: no build step, no CDN. It talks only to the service's own JSON
endpoints, and its ``Content-Security-Policy`` forbids the browser any other host. The
page and its files need no API key (:data:`vecserve.service.auth.OPEN_PATHS`); the JSON
calls it makes still do, and the page asks for one on a ``401``.

>>> sorted(STATIC)
['app.js', 'icon.svg', 'index.html', 'style.css']
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.responses import Response

from ..errors import VecserveError

__all__ = ["CSP", "STATIC", "add_explorer_routes"]

STATIC = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)


def _file(name: str) -> Response:
    try:
        body = resources.files(__package__).joinpath("static", name).read_bytes()
    except OSError as exc:  # a broken install: the package data is missing
        raise VecserveError(f"the explorer page's file {name} is missing: {exc}") from exc
    headers = {
        "Cache-Control": "no-cache",
        "Content-Security-Policy": CSP,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }
    return Response(body, media_type=STATIC[name], headers=headers)


def add_explorer_routes(app: FastAPI) -> None:
    """``GET /`` (the page) and ``GET /static/{name}`` (its files; 404 for anything else)."""

    @app.get("/", include_in_schema=False)
    def explorer_page():
        return _file("index.html")

    @app.get("/static/{name}", include_in_schema=False)
    def explorer_static(name: str):
        if name not in STATIC or name == "index.html":
            return Response(status_code=404)
        return _file(name)
