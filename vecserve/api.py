"""The HTTP service: vectors and neighbours from one process that holds each matrix once.

:func:`create_app` assembles the FastAPI app; nothing connects at import time. Its
lifespan attaches to Redis (``settings.redis_url``, else the embedded server) and yields
one :class:`~vecserve.service.deps.AppContext` as lifespan state. Handlers are short and call the
library: :mod:`vecserve.store` for vectors, :mod:`vecserve.search.snapshot` for whole-matrix
queries (built from Redis once per model generation and memory-mapped from local disk),
:mod:`vecserve.search.ann` for opt-in approximate search.

=======================================  ===============================================
endpoint                                 answers
=======================================  ===============================================
``GET|POST /vectors``                    vectors as JSON, raw float32 or ``.npy``
``GET /similarity``                      cosine of two words (gensim ``similarity``)
``POST /n_similarity``                   cosine of two word-set means
``GET|POST /most_similar``               gensim ``most_similar`` / ``_cosmul``
``POST /most_similar/batch``             many queries, one matrix multiply; each its answer
                                         or its own error
``GET|POST /doesnt_match``               the odd word out
``GET /analogy``                         a is to b as c is to ?
``GET /models``, ``GET /models/{name}``  registry metadata, index and ANN status
``GET /healthz``, ``/readyz``            process up; store reachable + default model
``GET /metrics``                         Prometheus text format
``GET /``, ``GET /static/{name}``        the explorer page (no API key needed)
``GET /docs``, ``GET /redoc``            the OpenAPI document's pages, offline
=======================================  ===============================================

This module is the factory only: the routes live in routers by area
(:mod:`~vecserve.service.routes_vectors`, :mod:`~vecserve.service.routes_similarity`,
:mod:`~vecserve.service.routes_service`, :mod:`~vecserve.service.embed`, the explorer and
the docs pages), and ``GET /vectors`` and ``GET /most_similar?approx=true`` are answered
first by :mod:`~vecserve.service.fastpath`'s plain ASGI routes, which skip dependency
solving (the FastAPI routes stay for the OpenAPI schema and answer anything unusual);
the answers are the same.

Every error is a JSON body ``{"error": <class>, "detail": <message>}``: unknown model or
word 404, malformed input 422, a query that cannot be answered 400, Redis down 503 with
``Retry-After``, never a stack trace. The query planning (exact or approximate, the IVF
shortcut, fastText subword items) is :mod:`vecserve.search.planner`'s; the service only
speaks HTTP. An internal error is a 500, never a 400. In a batch, a query's own error
(unknown word, empty query) is reported in its slot and the others are answered.

``/openapi.json`` is the contract: what the service refuses, it declares (the settings'
limits are written into it by :func:`~vecserve.service.schemas.declare_limits`), and a
request it calls valid is answered.

>>> app = create_app(Settings(redis_url="redis://localhost:6379/0"))   # doctest: +SKIP
>>> with TestClient(app) as client:                                     # doctest: +SKIP
...     client.get("/vectors", params={"words": "king,queen", "model": "W2V"}).json()
"""

from __future__ import annotations

import contextlib
import logging

from fastapi import FastAPI

from .connect import connect
from .search.ann import AnnManager, AnnParams
from .service import embed, fastpath, routes_service, routes_similarity, routes_vectors
from .service.auth import ApiKeyMiddleware, declare_bearer, load_keys
from .service.coalesce import Coalescer
from .service.deps import AppContext, ModelCache, StoreHandle
from .service.docs import add_docs_routes
from .service.explorer import add_explorer_routes
from .service.fastpath import MostSimilarFastRoute, VectorsFastRoute
from .service.indexes import SearchState
from .service.metrics import Metrics, MetricsMiddleware
from .service.responses import JSON, NPY, OCTET, BodyLimitMiddleware, install_error_handlers
from .service.schemas import declare_limits
from .service.settings import Settings

__all__ = ["JSON", "NPY", "OCTET", "MostSimilarFastRoute", "VectorsFastRoute", "create_app"]

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The vecserve FastAPI app.

    Parameters
    ----------
    settings : Settings, optional
        Default: :class:`Settings` read from ``VECSERVE_*`` environment variables.

    Examples
    --------
    >>> app = create_app(Settings(default_model="W2V"))
    >>> app.title
    'vecserve'
    """
    settings = settings if settings is not None else Settings()
    metrics = Metrics(directory=settings.metrics_dir)
    keys = load_keys(
        settings.api_keys.get_secret_value() if settings.api_keys else None,
        settings.api_keys_file,
    )

    app = FastAPI(
        title="vecserve",
        version=_version(),
        description="Word vectors served out of Redis: vectors, similarity, most_similar.",
        lifespan=_lifespan(settings, metrics),
        docs_url=None,  # served by add_docs_routes, from vecserve's own files
        redoc_url=None,
    )
    install_error_handlers(app, settings, metrics)
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    metrics_keys = load_keys(
        settings.metrics_keys.get_secret_value() if settings.metrics_keys else None, None
    )
    if keys or metrics_keys:  # outermost: a refused request costs nothing else
        app.add_middleware(ApiKeyMiddleware, keys=keys, metrics_keys=metrics_keys)
    app.include_router(routes_vectors.router)
    app.include_router(routes_similarity.router)
    app.include_router(routes_service.router)
    add_explorer_routes(app)
    add_docs_routes(app)
    app.include_router(embed.router)
    fastpath.install(app)
    plain_openapi = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = declare_limits(plain_openapi(), settings)
            app.openapi_schema = declare_bearer(schema) if keys else schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def _lifespan(settings: Settings, metrics: Metrics):
    """The app's lifespan: connect, one :class:`AppContext` as lifespan state, preload."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        with contextlib.ExitStack() as stack:
            conn = stack.enter_context(connect(settings.redis_url, data_dir=settings.data_dir))
            url = conn.url
            ctx = AppContext(
                settings=settings,
                stores=StoreHandle(url, timeout=settings.redis_timeout),
                metrics=metrics,
                models=ModelCache(
                    ttl=settings.model_ttl, metrics=metrics, vector_cache=settings.vector_cache
                ),
            )
            ctx.search = SearchState(
                ctx.stores.get,
                metrics=metrics,
                cache_dir=settings.cache_dir,
                ann=AnnManager(
                    enabled=settings.ann,
                    params=AnnParams(recall=settings.ann_recall),
                    on_ready=lambda model, ann: metrics.set(
                        "vecserve_ann_recall_at_10", ann.recall_at_10, model=model
                    ),
                ),
                coalescer=Coalescer(settings.max_batch) if settings.coalesce else None,
            )
            stack.callback(ctx.close)
            metrics.on_collect(ctx.collect_metrics)
            if settings.preload and settings.default_model:
                ctx.search.preload(settings.default_model, ctx.model)
            yield {"ctx": ctx}

    return lifespan


def _version() -> str:
    from . import __version__

    return __version__
