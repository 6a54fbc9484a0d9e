"""The two hand-written ASGI routes ahead of the FastAPI ones: ``GET /vectors`` and
``GET /most_similar?approx=true``, the service's hot paths.

Each claims the common, valid query (its :meth:`~_FastRoute.matches` parses it, once)
and answers it by calling exactly what the FastAPI handler calls
(:func:`~vecserve.service.routes_vectors.answer_vectors`, :mod:`vecserve.service.similar`);
anything else it does not match, so the app's router goes on to the FastAPI route of the
same path, which stays registered for the OpenAPI document: a 422's body stays the
framework's own, and dependency overrides keep working. :func:`install` puts them first
in an app's router.
"""

from __future__ import annotations

from typing import get_args

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, QueryParams
from starlette.routing import BaseRoute, Match

from ..errors import BadQuery
from ..search.query import Query as SearchQuery
from . import routes_similarity, routes_vectors, similar
from .deps import AppContext, resolve_model_name
from .params import FORMAT, split_words
from .responses import json_response, negotiate
from .routes_vectors import answer_vectors
from .schemas import MissingPolicy

__all__ = ["MostSimilarFastRoute", "VectorsFastRoute", "install"]


class _FastRoute(BaseRoute):
    """A GET route ahead of the FastAPI ``route`` of the same path: it claims
    the common, valid queries (:meth:`matches` parses them, once) and answers them
    itself; for anything else it does not match, so the app's router goes on to the
    FastAPI route, which stays registered for OpenAPI and the docs. ``scope["route"]``
    has the FastAPI route's path, so metrics are identical; errors raised propagate to
    the app's exception handlers as a route's do."""

    _PARSED = "vecserve.fast"  # the scope key of what matches() parsed

    def __init__(self, route: APIRoute):
        self.route = route
        self.path = self.path_format = route.path
        self.include_in_schema = False

    def matches(self, scope) -> tuple[Match, dict]:
        if (
            scope["type"] == "http"
            and scope["method"] == "GET"
            and scope["path"] == self.path
            and not scope.get("root_path")  # mounted under a prefix: the router decides
            and (ctx := self._context(scope)) is not None
        ):
            parsed = self.parse(QueryParams(scope["query_string"]), ctx)
            if parsed is not None:
                child = {"endpoint": self.route.endpoint, "route": self.route}
                return Match.FULL, {**child, "path_params": {}, self._PARSED: (ctx, parsed)}
        return Match.NONE, {}

    def parse(self, params: QueryParams, ctx: AppContext):
        """What this route answers (a tuple), or None: the FastAPI route answers."""
        raise NotImplementedError

    @staticmethod
    def _context(scope) -> AppContext | None:
        """The lifespan's context, or None where the FastAPI route must answer (no
        lifespan state, or dependency overrides in force)."""
        if getattr(scope.get("app"), "dependency_overrides", None):
            return None
        return scope.get("state", {}).get("ctx")


class VectorsFastRoute(_FastRoute):
    """``GET /vectors`` without FastAPI's parameter and dependency solving: its hot path.

    FastAPI spends ~0.15 ms per request resolving this route's four dependencies and
    parameters (measured in process), more than the Redis MGET of a few words. This route
    sits first in the router and answers a plain, valid query by calling exactly what the
    FastAPI handler calls. Everything else goes to the FastAPI route, which
    stays registered for OpenAPI and the docs: a missing or invalid parameter, dependency
    overrides, no lifespan state -- so those answers (422 bodies included) are the
    framework's own.
    """

    def parse(self, params: QueryParams, ctx: AppContext):
        words = params.getlist("words")
        missing = params.get("missing", "omit")
        fmt = params.get("format")
        if not words or missing not in _POLICIES or (fmt is not None and fmt not in _FORMATS):
            return None
        return params.get("model"), words, missing, fmt

    async def handle(self, scope, receive, send) -> None:
        ctx, (model, words, missing, fmt) = scope[self._PARSED]
        name = resolve_model_name(model, ctx.settings)
        media = negotiate(Headers(scope=scope).get("accept"), fmt)
        response = await ctx.run(answer_vectors, ctx, name, split_words(words), missing, media)
        await response(scope, receive, send)


class MostSimilarFastRoute(_FastRoute):
    """``GET /most_similar?approx=true``: approximate queries answered on the event loop.

    A ready ANN index answers in ~1 ms (its scan runs without the GIL); through FastAPI
    the same answer took ~0.4 ms more (parameter and dependency solving, and the hop to
    a pool thread and back: measured over HTTP, BENCHMARKS.md). This route parses a plain
    approximate query (``positive``, ``negative``, ``topn``, ``approx``, ``model``; each
    scalar at most once) into the same :class:`~vecserve.search.query.Query` and, when the model's
    index and its ANN index are open and ready, answers inline; otherwise (an exact
    answer meanwhile, a new generation to map, Redis away) in the thread pool, as the
    FastAPI handler would. Anything else (exact queries, ``restrict_vocab``, ``cosmul``,
    a value that does not parse) goes to the FastAPI route, whose answers, 422 bodies
    included, stay the framework's own.
    """

    _KEYS = frozenset({"positive", "negative", "topn", "approx", "model"})

    def parse(self, params: QueryParams, ctx: AppContext):
        keys = list(params.keys())
        if not set(keys) <= self._KEYS:
            return None
        if any(keys.count(k) > 1 for k in ("topn", "approx", "model")):
            return None
        if params.get("approx", "").lower() not in ("true", "1"):
            return None
        if not params.getlist("positive"):  # required: the FastAPI route answers the 422
            return None
        topn = params.get("topn", "10")
        if not (topn.isascii() and topn.isdigit()):
            return None
        try:
            q = SearchQuery(
                positive=split_words(params.getlist("positive"), "positive"),
                negative=split_words(params.getlist("negative"), "negative"),
                topn=int(topn),
                approx=True,
            )
        except BadQuery:  # the FastAPI route words the 422
            return None
        return params.get("model"), q

    async def handle(self, scope, receive, send) -> None:
        ctx, (model, q) = scope[self._PARSED]
        name = resolve_model_name(model, ctx.settings)
        if ctx.search.coalescer is not None:  # a batch may be under way: wait in a thread
            out = await run_in_threadpool(similar.most_similar, ctx, name, q)
        else:
            info, out = await ctx.run(similar.approx_at_once, ctx, name, q)
            if out is None:
                out = await run_in_threadpool(similar.most_similar, ctx, name, q, info)
        await json_response(out)(scope, receive, send)


_POLICIES = frozenset(get_args(MissingPolicy))
_FORMATS = frozenset(get_args(FORMAT))


def install(app: FastAPI) -> None:
    """Put the fast routes first in ``app``'s router, ahead of the FastAPI routes they
    stand for (``GET /vectors``, ``GET /most_similar``)."""
    for fast, router, path in (
        (VectorsFastRoute, routes_vectors.router, "/vectors"),
        (MostSimilarFastRoute, routes_similarity.router, "/most_similar"),
    ):
        route = next(
            r
            for r in router.routes
            if isinstance(r, APIRoute) and r.path == path and "GET" in r.methods
        )
        app.router.routes.insert(0, fast(route))
