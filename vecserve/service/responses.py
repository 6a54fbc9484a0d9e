"""How the API writes answers and errors: media types, vector bodies, error JSON, limits.

Every error leaves the service as ``{"error": <class>, "detail": <message>, ...}``:
:func:`install_error_handlers` maps vecserve's exceptions (ModelNotFound and TokenNotFound
404, InvalidModelName and BadQuery 422, QueryRejected 400, StoreUnavailable 503 with
``Retry-After``, an error reply of the server 503 naming it (``OutOfMemory``,
``ReadOnlyServer``, ...: ``reply`` holds its code), ModelDamaged 500: a lost row is never
a 404 "not in the vocabulary") and turns anything unexpected into a 500 without a stack trace. Redis
URLs in messages have their credentials masked.

Vector bodies (:func:`vectors_response`): JSON via orjson (float32 in shortest form, so
``float32(parsed) == stored``), or raw little-endian float32 rows (``application/
octet-stream``) or a ``.npy`` file (``application/x-npy``), with the shape and the missing
words in ``X-Vecserve-*`` headers (words percent-encoded, comma-separated).

>>> negotiate("application/json;q=0.5, application/octet-stream", None)
'application/octet-stream'
"""

from __future__ import annotations

import contextlib
import io
import logging
from urllib.parse import quote

import numpy as np
import orjson
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Mount

from ..errors import (
    BadQuery,
    InvalidModelName,
    ModelDamaged,
    ModelNotFound,
    PermissionDenied,
    QueryRejected,
    RequestTooLarge,
    ServerRefused,
    StoreUnavailable,
    TokenNotFound,
    VecserveError,
)
from ..store import ModelInfo
from ..store.layout import redact_url
from .metrics import Metrics
from .settings import Settings

__all__ = [
    "JSON",
    "NPY",
    "OCTET",
    "BodyLimitMiddleware",
    "error_response",
    "install_error_handlers",
    "json_response",
    "missing_error",
    "negotiate",
    "query_error",
    "rows_response",
    "vectors_response",
]

log = logging.getLogger(__name__)

OCTET = "application/octet-stream"
NPY = "application/x-npy"
JSON = "application/json"
_FORMATS = {"json": JSON, "binary": OCTET, "npy": NPY}


def json_response(obj, *, status: int = 200, headers: dict | None = None) -> Response:
    body = orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)
    return Response(body, status_code=status, media_type=JSON, headers=headers)


def error_response(status: int, error: str, detail: str, *, headers=None, **extra) -> Response:
    body = {"error": error, "detail": detail, **extra}
    return json_response(body, status=status, headers=headers)


def query_error(exc: Exception) -> dict:
    """The JSON of one query's own error (an unknown word 404, an item that is not one
    404/422, a query gensim refuses 400): ``{"error", "detail", "status", ...}``, the body
    and status a single call answers; in a batch, the failed query's slot.

    >>> query_error(QueryRejected("cannot compute mean with no input"))
    {'error': 'ValueError', 'detail': 'cannot compute mean with no input', 'status': 400}
    """
    if isinstance(exc, TokenNotFound):
        extra = {"token": exc.token, "model": exc.model, "missing": exc.missing}
        return {"error": "TokenNotFound", "detail": str(exc), "status": 404, **extra}
    if isinstance(exc, QueryRejected):  # gensim raises ValueError for these
        return {"error": "ValueError", "detail": str(exc), "status": 400}
    if isinstance(exc, BadQuery):
        return {"error": "BadQuery", "detail": str(exc), "status": 422}
    raise TypeError(f"{type(exc).__name__} is not a query's own error")


def _query_error_response(exc: Exception) -> Response:
    body = query_error(exc)
    return json_response(body, status=body.pop("status"))


def install_error_handlers(app: FastAPI, settings: Settings, metrics: Metrics) -> None:
    @app.exception_handler(VecserveError)
    async def vecserveerror_response(request: Request, exc: VecserveError):
        if isinstance(exc, ServerRefused):  # an error reply: OOM, READONLY, LOADING...
            metrics.inc("vecserve_store_errors_total")
            log.error("%s", redact_url(str(exc)))
            return error_response(
                503,
                type(exc).__name__,
                redact_url(str(exc)),
                reply=exc.reply,
                headers={"Retry-After": str(settings.retry_after)},
            )
        if isinstance(exc, StoreUnavailable):
            metrics.inc("vecserve_store_errors_total")
            return error_response(
                503,
                "StoreUnavailable",
                redact_url(str(exc)),
                headers={"Retry-After": str(settings.retry_after)},
            )
        if isinstance(exc, ModelDamaged):  # never a 404: the word IS in the vocabulary
            metrics.inc("vecserve_model_damaged_total", model=exc.model)
            log.error("%s", exc)
            return error_response(
                500,
                "ModelDamaged",
                str(exc),
                model=exc.model,
                generation=exc.generation,
                lost=exc.lost,
                words=exc.words,
            )
        if isinstance(exc, PermissionDenied):  # the service's Redis user lacks a right
            log.error("%s", redact_url(str(exc)))
            return error_response(503, "PermissionDenied", redact_url(str(exc)))
        if isinstance(exc, ModelNotFound):
            return error_response(404, "ModelNotFound", str(exc), model=exc.name)
        if isinstance(exc, TokenNotFound):
            return _query_error_response(exc)
        if isinstance(exc, InvalidModelName):
            return error_response(422, "InvalidModelName", str(exc))
        log.error("%s: %s", type(exc).__name__, exc)
        return error_response(500, type(exc).__name__, redact_url(str(exc)))

    @app.exception_handler(BadQuery)
    async def bad_query(request: Request, exc: BadQuery):
        return _query_error_response(exc)

    @app.exception_handler(QueryRejected)
    async def query_rejected(request: Request, exc: QueryRejected):
        return _query_error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def validationerror_response(request: Request, exc: RequestValidationError):
        errors = [
            {
                "loc": [str(p) for p in e.get("loc", ())],
                "msg": str(e.get("msg", "")),
                "type": str(e.get("type", "")),
            }
            for e in exc.errors()
        ]
        detail = "; ".join(f"{'.'.join(e['loc'])}: {e['msg']}" for e in errors)
        return error_response(422, "ValidationError", detail or "invalid request", errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def httperror_response(request: Request, exc: StarletteHTTPException):
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        headers = exc.headers
        if exc.status_code == 405:  # the router names the first route's methods only
            headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(request))}
        return error_response(exc.status_code, "HTTPError", detail, headers=headers)

    @app.exception_handler(Exception)
    async def internalerror_response(request: Request, exc: Exception):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "InternalError", "internal server error (see the service log)")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app answers on ``request``'s path (a path taken by
    a GET route and a POST route answers 405 with both in ``Allow``), in a fixed order."""
    scope = {**request.scope, "method": "GET"}
    order = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    methods: set[str] = set()
    for route in request.app.router.routes:
        route_methods = getattr(route, "methods", None)
        if route_methods and route.matches(scope)[0] is not Match.NONE:
            methods |= set(route_methods)
        elif route_methods is None and not isinstance(route, Mount):  # an included router
            asked = ({**request.scope, "method": m} for m in order)
            methods |= {a["method"] for a in asked if route.matches(a)[0] is Match.FULL}
    return sorted(methods, key=lambda m: (order.index(m) if m in order else len(order), m))


class BodyLimitMiddleware:
    """Refuse request bodies over ``limit`` bytes with 413 (Content-Length or streamed)."""

    def __init__(self, app, *, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for k, v in scope["headers"]:
            if k == b"content-length" and (not v.isdigit() or int(v) > self.limit):
                await self._refuse(send)
                return
        seen = 0
        started = False

        async def limited_receive():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise RequestTooLarge
            return message

        async def tracking_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except RequestTooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send):
        body = orjson.dumps(
            {"error": "PayloadTooLarge", "detail": f"request body over {self.limit} bytes"}
        )
        headers = [(b"content-type", JSON.encode()), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


# -- request helpers -----------------------------------------------------------------------


def negotiate(accept: str | None, fmt: str | None) -> str:
    """The media type of a /vectors answer: ``format=`` wins, then the Accept header."""
    if fmt is not None:
        return _FORMATS[fmt]
    if not accept:
        return JSON
    best, best_q = None, 0.0
    for part in accept.split(","):
        kind, *params = (p.strip() for p in part.split(";"))
        q = 1.0
        for p in params:
            if p.startswith("q="):
                with contextlib.suppress(ValueError):
                    q = float(p[2:])
        kind = kind.lower()
        match = JSON if kind in ("*/*", "application/*", JSON) else kind
        if match in (JSON, OCTET, NPY) and q > best_q:
            best, best_q = match, q
    if best is None:
        raise HTTPException(406, f"cannot answer {accept!r}: use {JSON}, {OCTET} or {NPY}")
    return best


def missing_error(name: str, missing: list[str]) -> TokenNotFound:
    return TokenNotFound(missing[0], name, missing=missing)


def vectors_response(
    info: ModelInfo,
    words: list[str],
    rows: np.ndarray,
    *,
    missing: list[str],
    missing_idx: list[int],
    media: str,
    subwords: list[str] | None = None,
) -> Response:
    """The /vectors answer: ``words`` and their float32 ``rows`` (zeros where missing).

    ``subwords``: for a fastText model, the words whose vectors were built from n-grams.
    """
    if media == JSON:
        body = {
            "model": info.name,
            "generation": info.generation,
            "dim": info.dim,
            "words": words,
            "vectors": rows,
            "missing": missing,
        }
        if subwords is not None:
            body["subwords"] = subwords
        return json_response(body)
    headers = {
        "X-Vecserve-Missing": ",".join(quote(w, safe="") for w in missing),
        "X-Vecserve-Missing-Index": ",".join(map(str, missing_idx)),
    }
    if subwords is not None:
        headers["X-Vecserve-Subwords"] = ",".join(quote(w, safe="") for w in subwords)
    return rows_response(info, rows.reshape(len(words), info.dim), media, headers)


def rows_response(info: ModelInfo, rows: np.ndarray, media: str, headers: dict) -> Response:
    """float32 ``rows`` of model ``info`` as raw little-endian bytes or an ``.npy`` file
    (``media``), with the model, generation, shape and dtype in ``X-Vecserve-*`` headers
    beside the caller's own ``headers``."""
    raw = rows.astype("<f4", copy=False).tobytes()
    if media == NPY:
        head = io.BytesIO()
        header = {"descr": "<f4", "fortran_order": False, "shape": rows.shape}
        np.lib.format.write_array_header_1_0(head, header)
        raw = head.getvalue() + raw
    shape = {
        "X-Vecserve-Model": info.name,
        "X-Vecserve-Generation": str(info.generation),
        "X-Vecserve-Shape": f"{rows.shape[0]},{rows.shape[1]}",
        "X-Vecserve-Dtype": "<f4",
    }
    return Response(raw, media_type=media, headers={**shape, **headers})
