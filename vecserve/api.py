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

``GET /vectors`` is answered by :class:`VectorsFastRoute`, a plain route ahead of the
FastAPI routes that skips dependency solving (the FastAPI route stays for the OpenAPI
schema and answers anything unusual); the answers are the same.

Every error is a JSON body ``{"error": <class>, "detail": <message>}``: unknown model or
word 404, malformed input 422, a query that cannot be answered 400, Redis down 503 with
``Retry-After``, never a stack trace. The query planning (exact or approximate, the IVF
shortcut, fastText subword items) is :mod:`vecserve.search.planner`'s; this module only
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
from pathlib import PurePath
from typing import Annotated, Literal, get_args

import numpy as np
from fastapi import FastAPI, Path, Query, Request
from fastapi.responses import PlainTextResponse, Response
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, QueryParams
from starlette.routing import BaseRoute, Match

from .connect import connect
from .errors import BadQuery, ModelNotFound
from .search.ann import AnnManager, AnnParams
from .search.planner import Answer, Limits, Planner
from .search.query import Query as SearchQuery
from .search.snapshot import SimilarityIndex
from .service.auth import ApiKeyMiddleware, declare_bearer, load_keys
from .service.coalesce import Coalescer
from .service.deps import (
    AppContext,
    ContextDep,
    ModelCache,
    ModelName,
    ModelQuery,
    ModelRows,
    SettingsDep,
    StoreHandle,
    fetch_vectors,
    model_of,
    resolve_model_name,
)
from .service.docs import add_docs_routes
from .service.embed import router as embed_router
from .service.explorer import add_explorer_routes
from .service.indexes import SearchState
from .service.metrics import Metrics, MetricsMiddleware
from .service.responses import (
    JSON,
    NPY,
    OCTET,
    BodyLimitMiddleware,
    error_response,
    install_error_handlers,
    json_response,
    missing_error,
    negotiate,
    query_error,
    vectors_response,
)
from .service.schemas import (
    MODEL_PATH,
    WORDS_ITEM,
    AnalogyResponse,
    BatchRequest,
    BatchResponse,
    DoesntMatchRequest,
    DoesntMatchResponse,
    ErrorBody,
    MissingPolicy,
    MostSimilarRequest,
    MostSimilarResponse,
    NSimilarityRequest,
    SimilarityResponse,
    VectorsRequest,
    VectorsResponse,
    declare_limits,
)
from .service.settings import Settings

__all__ = ["JSON", "NPY", "OCTET", "MostSimilarFastRoute", "VectorsFastRoute", "create_app"]

log = logging.getLogger(__name__)

_ERRORS = {404: {"model": ErrorBody}, 422: {"model": ErrorBody}, 503: {"model": ErrorBody}}


# -- request helpers -----------------------------------------------------------------------


def _check_words(words: list[str], settings: Settings) -> list[str]:
    if not words:
        raise BadQuery("no words given")
    if len(words) > settings.max_words:
        raise BadQuery(f"{len(words)} words in one request; the limit is {settings.max_words}")
    for w in words:
        try:
            w.encode("utf-8")
        except UnicodeEncodeError:
            raise BadQuery(f"word {w!r:.60} is not valid UTF-8 text") from None
    return words


def _split(values: list[str] | None, name: str = "words") -> list[str]:
    """``?words=a,b&words=c`` -> ``['a', 'b', 'c']`` (empty words between commas dropped);
    a repeat of the parameter with no word at all (``?words=a&words=,``) is refused."""
    out = []
    for v in values or ():
        words = [w for w in v.split(",") if w]
        if not words:
            raise BadQuery(f"{name}={v!r:.40} holds no word")
        out += words
    return out


def _vectors(ctx: AppContext, name: str, words: list[str], policy: str, media: str) -> Response:
    words = _check_words(words, ctx.settings)
    info, rows, found, built = fetch_vectors(ctx, name, words)
    n_found = int(found.sum())
    missing_idx = [] if n_found == len(words) else np.flatnonzero(~found).tolist()
    missing = [words[i] for i in missing_idx]
    if missing and policy == "error":
        raise missing_error(name, missing)
    if policy == "omit" and missing:
        words, rows = [w for w, ok in zip(words, found, strict=True) if ok], rows[found]
    ctx.metrics.inc("vecserve_vectors_served_total", n_found)
    if missing:
        ctx.metrics.inc("vecserve_words_missing_total", len(missing))
    return vectors_response(
        info,
        words,
        rows,
        missing=missing,
        missing_idx=missing_idx,
        media=media,
        subwords=built if info.subwords else None,
    )


def _planner(ctx: AppContext, info, index: SimilarityIndex) -> Planner:
    """The planner of generation ``info``'s snapshot; out-of-vocabulary words of a
    fastText model are read through the service's reader (:class:`ModelRows`)."""
    s = ctx.settings
    return Planner(
        index,
        name=info.name,
        ann=ctx.search.ann,
        subwords=info.subwords,
        rows=ModelRows(ctx, info.name),
        limits=Limits(max_words=s.max_words, max_topn=s.max_topn, max_batch=s.max_batch),
    )


def _ready_approx(ctx: AppContext, info, q: SearchQuery) -> bool:
    """Whether ``q`` is answered by the ready ANN index of generation ``info``, already
    open here: a scan of ~1 ms, no snapshot to map or build."""
    ann = ctx.search.ann
    if ann is None or not q.approx or not q.plain:
        return False
    index = ctx.search.loaded_index(info)
    return index is not None and ann.ready(index)


def _approx_at_once(ctx: AppContext, name: str, q: SearchQuery) -> tuple:
    """``(info, answer)``: the answer if a ready ANN index gives it at once (on the event
    loop), else None; ``info``, the registry entry read, either way."""
    info = ctx.model(name)
    return info, _most_similar(ctx, name, q, info) if _ready_approx(ctx, info, q) else None


def _answer_body(answer: Answer) -> dict:
    """One most_similar answer as its JSON body (:class:`MostSimilarResponse`)."""
    out: dict = {
        "model": answer.model,
        "generation": answer.generation,
        "approximate": answer.approximate,
    }
    if answer.subwords is not None:
        out["subwords"] = answer.subwords
    if answer.approximate_status is not None:
        out["approximate_status"] = answer.approximate_status
    if answer.similarities is not None:
        out["similarities"] = answer.similarities
    else:
        out["results"] = answer.results
    return out


def _most_similar(ctx: AppContext, name: str, q: SearchQuery, info=None) -> dict:
    """One most_similar answer (of ``info``, the model's registry entry, if read); with
    others that arrive meanwhile in one batch, when the service coalesces."""
    info = info if info is not None else ctx.model(name)
    index = ctx.search.index(info)
    planner = _planner(ctx, info, index)
    coalescer = ctx.search.coalescer
    if coalescer is not None and planner.gains_from_batch(q):
        return coalescer.submit(name, (planner, q), _most_similar_many)
    return _answer_body(planner.answer(q))


def _most_similar_many(items: list[tuple[Planner, SearchQuery]]) -> list:
    """Coalesced single queries of one model, answered by the first one's planner (its
    generation's snapshot): each its own answer or error."""
    planner = items[0][0]
    answers = planner.answer_many([q for _, q in items])
    return [a if isinstance(a, Exception) else _answer_body(a) for a in answers]


def _most_similar_batch(ctx: AppContext, name: str, body: BatchRequest) -> dict:
    """Exact queries in one matrix multiply per group; approximate ones in one index call.
    A query's own error (unknown word, empty query, ...) fills its slot of ``errors``
    (``results`` null there); the others are answered."""
    s = ctx.settings
    if len(body.queries) > s.max_batch:  # before the snapshot is mapped
        raise BadQuery(f"{len(body.queries)} queries in one batch; the limit is {s.max_batch}")
    for i, q in enumerate(body.queries):  # the schema's limits: the whole request's error
        if q.topn is not None and q.topn > s.max_topn:
            raise BadQuery(f"queries[{i}]: topn={q.topn} is over the limit of {s.max_topn}")
        for field in ("positive", "negative"):
            items = getattr(q, field)
            if isinstance(items, list) and len(items) > s.max_words:
                raise BadQuery(
                    f"queries[{i}]: {len(items)} {field} items; the limit is {s.max_words}"
                )
    info = ctx.model(name)
    index = ctx.search.index(info)
    answers = _planner(ctx, info, index).answer_batch([q.query() for q in body.queries])
    results, approximate, errors = [], [], []
    for a in answers:
        failed = isinstance(a, Exception)
        errors.append(query_error(a) if failed else None)
        approximate.append(False if failed else a.approximate)
        if failed:
            results.append(None)
        else:
            results.append(a.similarities if a.similarities is not None else a.results)
    return {
        "model": info.name,
        "generation": index.generation,
        "results": results,
        "approximate": approximate,
        "errors": errors,
    }


def _small_kv(ctx: AppContext, name: str, words: list[str], *, checked: bool = False):
    """A gensim KeyedVectors of just ``words`` (as stored), for exact-parity small queries
    (``words`` checked against the limits here unless ``checked``)."""
    from gensim.models import KeyedVectors

    if not checked:
        _check_words(words, ctx.settings)
    unique = list(dict.fromkeys(words))
    info, matrix, found, built = fetch_vectors(ctx, name, unique)
    kv = KeyedVectors(info.dim, count=0)
    present = [w for w, ok in zip(unique, found, strict=True) if ok]
    if present:
        kv.add_vectors(present, matrix[found])
    missing = [w for w, ok in zip(unique, found, strict=True) if not ok]
    return info, kv, missing, (built if info.subwords else None)


# -- the app -------------------------------------------------------------------------------


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

    app = FastAPI(
        title="vecserve",
        version=_version(),
        description="Word vectors served out of Redis: vectors, similarity, most_similar.",
        lifespan=lifespan,
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
    _add_vector_routes(app)
    _add_similarity_routes(app)
    _add_service_routes(app, metrics)
    add_explorer_routes(app)
    add_docs_routes(app)
    app.include_router(embed_router)
    plain_openapi = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = declare_limits(plain_openapi(), settings)
            app.openapi_schema = declare_bearer(schema) if keys else schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def _version() -> str:
    from . import __version__

    return __version__


WordsQuery = Annotated[
    list[str],
    Query(
        description="Comma-separated words (repeat the parameter for more).",
        min_length=1,
        json_schema_extra=WORDS_ITEM,
    ),
]
_VECTOR_RESPONSES = {
    200: {
        "description": "JSON by default; raw little-endian float32 rows or .npy on request "
        "(shape and missing words in X-Vecserve-* headers).",
        "content": {OCTET: {}, NPY: {}},
    },
    406: {"model": ErrorBody},
    **_ERRORS,
}


NegativeQuery = Annotated[
    list[str],
    Query(
        description="Comma-separated words to subtract (repeat the parameter for more).",
        json_schema_extra=WORDS_ITEM,
    ),
]

_FORMAT = Literal["json", "binary", "npy"]


def _add_vector_routes(app: FastAPI) -> None:
    @app.get("/vectors", response_model=VectorsResponse, responses=_VECTOR_RESPONSES)
    async def get_vectors(
        request: Request,
        ctx: ContextDep,
        name: ModelName,
        words: WordsQuery,
        missing: MissingPolicy = "omit",
        format: _FORMAT | None = None,
    ):
        """Vectors of words; `Accept: application/octet-stream` or `x-npy` for binary."""
        media = negotiate(request.headers.get("accept"), format)
        return await ctx.run(_vectors, ctx, name, _split(words), missing, media)

    @app.post("/vectors", response_model=VectorsResponse, responses=_VECTOR_RESPONSES)
    async def post_vectors(
        request: Request,
        ctx: ContextDep,
        body: VectorsRequest,
        model: ModelQuery = None,
        format: _FORMAT | None = None,
    ):
        """Vectors of a JSON list of words (any characters, commas included)."""
        name = model_of(body.model, model, ctx.settings)
        media = negotiate(request.headers.get("accept"), format)
        return await ctx.run(_vectors, ctx, name, body.words, body.missing, media)

    route = next(r for r in app.router.routes if r.endpoint is get_vectors)  # type: ignore[attr-defined]
    app.router.routes.insert(0, VectorsFastRoute(route))


class _FastRoute(BaseRoute):
    """A GET route ahead of the FastAPI one (``fallback``) for the same path: it answers
    the common, valid queries itself and hands everything else to ``fallback``, which
    stays registered for OpenAPI and the docs. ``scope["route"]`` is the FastAPI route,
    so metrics are identical; errors raised propagate to the app's exception handlers
    as a route's do."""

    def __init__(self, fallback: APIRoute):
        self.fallback = fallback
        self.path = self.path_format = fallback.path
        self.include_in_schema = False

    def matches(self, scope) -> tuple[Match, dict]:
        if (
            scope["type"] == "http"
            and scope["method"] == "GET"
            and scope["path"] == self.path
            and not scope.get("root_path")  # mounted under a prefix: the router decides
        ):
            route = self.fallback
            return Match.FULL, {"endpoint": route.endpoint, "path_params": {}, "route": route}
        return Match.NONE, {}

    def _context(self, scope) -> AppContext | None:
        """The lifespan's context, or None where the FastAPI route must answer (no
        lifespan state, or dependency overrides in force)."""
        overrides = self.fallback.dependency_overrides_provider
        if getattr(overrides, "dependency_overrides", None):
            return None
        return scope.get("state", {}).get("ctx")


class VectorsFastRoute(_FastRoute):
    """``GET /vectors`` without FastAPI's parameter and dependency solving: its hot path.

    FastAPI spends ~0.15 ms per request resolving this route's four dependencies and
    parameters (measured in process), more than the Redis MGET of a few words. This route
    sits first in the router and answers a plain, valid query by calling exactly what the
    FastAPI handler calls. Everything else goes to the FastAPI route (``fallback``), which
    stays registered for OpenAPI and the docs: a missing or invalid parameter, dependency
    overrides, no lifespan state -- so those answers (422 bodies included) are the
    framework's own. Errors raised here propagate to the app's exception handlers as a
    route's do, and ``scope["route"]`` is the FastAPI route, so metrics are identical.
    """

    async def handle(self, scope, receive, send) -> None:
        params = QueryParams(scope["query_string"])
        words = params.getlist("words")
        missing = params.get("missing", "omit")
        fmt = params.get("format")
        ctx = self._context(scope)
        if (
            ctx is None
            or not words
            or missing not in _POLICIES
            or (fmt is not None and fmt not in _FORMAT_NAMES)
        ):
            await self.fallback.handle(scope, receive, send)
            return
        name = resolve_model_name(params.get("model"), ctx.settings)
        media = negotiate(Headers(scope=scope).get("accept"), fmt)
        response = await ctx.run(_vectors, ctx, name, _split(words), missing, media)
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

    @classmethod
    def _query(cls, params: QueryParams) -> SearchQuery | None:
        keys = list(params.keys())
        if not set(keys) <= cls._KEYS:
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
            return SearchQuery(
                positive=_split(params.getlist("positive"), "positive"),
                negative=_split(params.getlist("negative"), "negative"),
                topn=int(topn),
                approx=True,
            )
        except BadQuery:  # the FastAPI route words the 422
            return None

    async def handle(self, scope, receive, send) -> None:
        params = QueryParams(scope["query_string"])
        ctx = self._context(scope)
        q = self._query(params) if ctx is not None else None
        if q is None:
            await self.fallback.handle(scope, receive, send)
            return
        name = resolve_model_name(params.get("model"), ctx.settings)
        if ctx.search.coalescer is not None:  # a batch may be under way: wait in a thread
            out = await run_in_threadpool(_most_similar, ctx, name, q)
        else:
            info, out = await ctx.run(_approx_at_once, ctx, name, q)
            if out is None:
                out = await run_in_threadpool(_most_similar, ctx, name, q, info)
        await json_response(out)(scope, receive, send)


_POLICIES = frozenset(get_args(MissingPolicy))
_FORMAT_NAMES = frozenset(get_args(_FORMAT))


def _add_similarity_routes(app: FastAPI) -> None:
    responses = {400: {"model": ErrorBody}, **_ERRORS}

    @app.get("/similarity", response_model=SimilarityResponse, responses=responses)
    def similarity(ctx: ContextDep, name: ModelName, w1: str, w2: str):
        """Cosine similarity of two words (gensim's ``similarity``)."""
        info, kv, missing, built = _small_kv(ctx, name, [w1, w2])
        if missing:
            raise missing_error(name, missing)
        out = {
            "model": info.name,
            "generation": info.generation,
            "similarity": float(kv.similarity(w1, w2)),
        }
        if built is not None:
            out["subwords"] = built
        return json_response(out)

    @app.post("/n_similarity", response_model=SimilarityResponse, responses=responses)
    def n_similarity(ctx: ContextDep, body: NSimilarityRequest, model: ModelQuery = None):
        """Cosine of the means of two word lists; missing words are skipped, as gensim does."""
        name = model_of(body.model, model, ctx.settings)
        _check_words(body.ws1, ctx.settings)  # each list within the limit
        _check_words(body.ws2, ctx.settings)
        info, kv, missing, _ = _small_kv(ctx, name, body.ws1 + body.ws2, checked=True)
        if not any(w in kv for w in body.ws1) or not any(w in kv for w in body.ws2):
            raise missing_error(name, missing)
        value = float(kv.n_similarity(body.ws1, body.ws2))
        return json_response(
            {
                "model": info.name,
                "generation": info.generation,
                "similarity": value,
                "missing": missing,
            }
        )

    @app.get("/most_similar", response_model=MostSimilarResponse, responses=responses)
    def most_similar_get(
        ctx: ContextDep,
        name: ModelName,
        positive: WordsQuery,
        negative: NegativeQuery = (),
        topn: Annotated[int, Query(ge=0)] = 10,
        restrict_vocab: Annotated[int | None, Query(ge=0)] = None,
        cosmul: bool = False,
        approx: bool = False,
    ):
        """Words most similar to ``positive`` minus ``negative`` (gensim ``most_similar``);
        a query of ``negative`` words only: ``POST /most_similar``."""
        q = SearchQuery(
            positive=_split(list(positive), "positive"),
            negative=_split(list(negative), "negative"),
            topn=topn,
            restrict_vocab=restrict_vocab,
            cosmul=cosmul,
            approx=approx,
        )
        return json_response(_most_similar(ctx, name, q))

    route = next(r for r in app.router.routes if getattr(r, "endpoint", None) is most_similar_get)
    app.router.routes.insert(0, MostSimilarFastRoute(route))

    @app.post("/most_similar", response_model=MostSimilarResponse, responses=responses)
    def most_similar_post(ctx: ContextDep, body: MostSimilarRequest, model: ModelQuery = None):
        """most_similar with words, positions, vectors and ``[item, weight]`` pairs."""
        name = model_of(body.model, model, ctx.settings)
        return json_response(_most_similar(ctx, name, body.query()))

    @app.post("/most_similar/batch", response_model=BatchResponse, responses=responses)
    def most_similar_batch(ctx: ContextDep, body: BatchRequest, model: ModelQuery = None):
        """Many most_similar queries answered together (one matrix multiply per group;
        ``approx`` queries in one approximate-index search)."""
        name = model_of(body.model, model, ctx.settings)
        return json_response(_most_similar_batch(ctx, name, body))

    def _doesnt_match(ctx: AppContext, name: str, words: list[str]) -> Response:
        info, kv, missing, _ = _small_kv(ctx, name, words)
        if len(kv) == 0:
            raise missing_error(name, missing)
        present = [w for w in words if w in kv]
        word = kv.doesnt_match(present)
        return json_response(
            {"model": info.name, "generation": info.generation, "word": word, "ignored": missing}
        )

    @app.get("/doesnt_match", response_model=DoesntMatchResponse, responses=responses)
    def doesnt_match_get(ctx: ContextDep, name: ModelName, words: WordsQuery):
        """The word that does not go with the others (gensim ``doesnt_match``)."""
        return _doesnt_match(ctx, name, _split(words))

    @app.post("/doesnt_match", response_model=DoesntMatchResponse, responses=responses)
    def doesnt_match_post(ctx: ContextDep, body: DoesntMatchRequest, model: ModelQuery = None):
        """The word that does not go with the others, words in a JSON body."""
        return _doesnt_match(ctx, model_of(body.model, model, ctx.settings), body.words)

    @app.get("/analogy", response_model=AnalogyResponse, responses=responses)
    def analogy(
        ctx: ContextDep,
        name: ModelName,
        a: str,
        b: str,
        c: str,
        topn: Annotated[int, Query(ge=1)] = 1,
        cosmul: bool = False,
        approx: bool = False,
    ):
        """a is to b as c is to ?  (``most_similar(positive=[b, c], negative=[a])``)."""
        q = SearchQuery(positive=[b, c], negative=[a], topn=topn, cosmul=cosmul, approx=approx)
        out = _most_similar(ctx, name, q)
        results = out.get("results") or []
        out["answer"] = results[0][0] if results else None
        return json_response(out)


def _add_service_routes(app: FastAPI, metrics: Metrics) -> None:
    @app.get("/models")
    def list_models(ctx: ContextDep):
        """Every committed model's metadata."""
        models = ctx.stores.get().list_models()
        return json_response({"models": [_model_dict(m, ctx.settings) for m in models]})

    @app.get("/models/{name}", responses=_ERRORS)
    def get_model(
        ctx: ContextDep,
        name: Annotated[str, Path(description="Model name.", json_schema_extra=MODEL_PATH)],
    ):
        """A model's metadata (dim, codec, count, generation, source) and index status."""
        resolve_model_name(name, ctx.settings)
        info = ctx.model(name, fresh=True)
        out = _model_dict(info, ctx.settings)
        out["index"] = ctx.search.index_status(info)
        if out["index"].get("path"):
            out["index"]["path"] = _shown_path(out["index"]["path"], ctx.settings)
        out["ann"] = ctx.search.ann_status(info)
        out["vector_cache"] = ctx.vector_cache_stats().get(info.name)
        return json_response(out)

    @app.get("/healthz")
    async def healthz():
        """The process is up (no dependency is checked)."""
        return {"status": "ok"}

    @app.get("/readyz", responses={503: {"model": ErrorBody}})
    def readyz(ctx: ContextDep, settings: SettingsDep):
        """Ready: the store answers and the default model (if configured) is loaded."""
        ctx.stores.get().ping()
        out = {"status": "ready", "default_model": settings.default_model}
        if settings.default_model:
            try:
                info = ctx.model(settings.default_model)
            except ModelNotFound:
                return error_response(
                    503,
                    "NotReady",
                    f"default model {settings.default_model!r} is not loaded",
                    headers={"Retry-After": str(settings.retry_after)},
                )
            out["generation"] = info.generation
            if settings.preload and not ctx.search.preloaded(info):
                return error_response(
                    503,
                    "NotReady",
                    f"similarity index of {info.name!r} is being built",
                    headers={"Retry-After": str(settings.retry_after)},
                )
        return out

    @app.get("/metrics", response_class=PlainTextResponse)
    def prometheus(ctx: ContextDep):
        """Request counts and latencies per endpoint, cache hits, index build times (all
        workers' when the service runs several)."""
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")


def _model_dict(info, settings: Settings) -> dict:
    from dataclasses import asdict

    data = asdict(info)
    data.pop("prefix", None)
    data.pop("buckets", None)
    if data.get("source"):
        data["source"] = _shown_path(data["source"], settings)
    return data


def _shown_path(path: str, settings: Settings) -> str:
    """``path`` as /models shows it: its last part (``GoogleNews.bin``), the full server
    path only with ``settings.show_paths``.

    >>> _shown_path("/srv/models/GoogleNews.bin", Settings())
    'GoogleNews.bin'
    >>> _shown_path("/srv/models/GoogleNews.bin", Settings(show_paths=True))
    '/srv/models/GoogleNews.bin'
    """
    if settings.show_paths:
        return path
    return PurePath(path).name or path
