"""What the API's handlers depend on: the app context and ``Annotated`` aliases for it.

The lifespan of :func:`vecserve.api.create_app` builds one :class:`AppContext` per process
and yields it as lifespan state; handlers receive its parts through the aliases below
(``SettingsDep``, ``ContextDep``, ``ModelName``), so a test can override any
of them with ``app.dependency_overrides``.

Every read goes through one :class:`vecserve.reader.Reader` per model (the same core
RedisKeyedVectors uses; :class:`ModelCache` holds them): the registry entry serves
metadata for ``settings.model_ttl`` seconds, while every read of rows carries the entry,
so a model reloaded under a new generation is picked up at once, never mixed with the
old one. :func:`fetch_vectors` is the service's one call for rows.

>>> from typing import get_args
>>> get_args(SettingsDep)[0].__name__
'Settings'
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

import numpy as np
from fastapi import Depends, HTTPException, Query, Request
from starlette.concurrency import run_in_threadpool

from ..cache import VectorCache
from ..errors import ModelNotFound, StoreUnavailable
from ..reader import Lookup, Reader
from ..store import ModelInfo, Store, validate_model_name
from ..text.embed import Embedding, embed_steps
from .metrics import Metrics
from .schemas import MODEL_NAME
from .settings import Settings

__all__ = [
    "AppContext",
    "ContextDep",
    "ModelCache",
    "ModelName",
    "ModelQuery",
    "ModelRows",
    "SettingsDep",
    "StoreHandle",
    "embed_texts",
    "fetch_rows",
    "fetch_vectors",
    "model_of",
]

Rows = tuple[ModelInfo, np.ndarray, np.ndarray]  # (entry, float32 rows, found mask)

log = logging.getLogger(__name__)
T = TypeVar("T")


class StoreHandle:
    """A :class:`Store` connected on first use, so the API starts while Redis is down.

    ``get()`` raises :class:`~vecserve.errors.StoreUnavailable` (-> 503) until Redis answers.
    ``timeout`` bounds every command, so a hung server cannot hold the worker threads.
    """

    def __init__(self, url: str, *, timeout: float | None = None, store: Store | None = None):
        self.url = url
        self.timeout = timeout
        self._store = store
        self._lock = threading.Lock()

    def get(self) -> Store:
        store = self._store
        if store is not None:
            return store
        with self._lock:
            if self._store is None:
                self._store = Store.from_url(self.url, socket_timeout=self.timeout)
            return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


class ModelCache:
    """This process's :class:`~vecserve.reader.Reader` of each model: its registry entry
    (``ttl`` seconds for metadata) and vector cache (``vector_cache`` entries, admitted
    on a word's second miss). Readers exist only for models that exist."""

    def __init__(self, *, ttl: float, metrics: Metrics, vector_cache: int = 0):
        self.ttl = ttl
        self.metrics = metrics
        self.vector_cache = vector_cache
        self._readers: dict[str, Reader] = {}
        self._lock = threading.Lock()

    def _on_registry(self, hit: bool) -> None:
        kind = "vecserve_cache_hits_total" if hit else "vecserve_cache_misses_total"
        self.metrics.inc(kind, cache="model")

    def reader(self, store: Store, name: str) -> Reader:
        reader = self._readers.get(name)
        if reader is None or reader.store is not store:
            with self._lock:
                reader = self._readers.get(name)
                if reader is None or reader.store is not store:
                    reader = self._readers[name] = Reader(
                        store,
                        name,
                        ttl=self.ttl,
                        cache_size=self.vector_cache,
                        admit_on_repeat=True,
                        on_registry=self._on_registry,
                    )
        return reader

    def run(self, store: Store, name: str, steps_of: Callable[[Reader], Any]):
        """Drive ``steps_of(reader)`` on ``store``; an unknown model leaves no reader."""
        reader = self.reader(store, name)
        try:
            return store.run(steps_of(reader))
        except ModelNotFound:
            with self._lock:
                if self._readers.get(name) is reader and reader.last_info is None:
                    del self._readers[name]
                    reader.close()
            raise

    def get(self, store: Store, name: str, *, fresh: bool = False) -> ModelInfo:
        """The registry entry; ModelNotFound (-> 404) when there is no such model."""
        return self.run(store, name, lambda r: r.info_steps(fresh=fresh))

    def caches(self) -> dict[str, VectorCache]:
        return {n: r._cache for n, r in list(self._readers.items()) if r._cache is not None}

    def close(self) -> None:
        with self._lock:
            readers, self._readers = list(self._readers.values()), {}
        for reader in readers:
            reader.close()


@dataclass
class AppContext:
    """Everything one API process shares between requests (the lifespan state)."""

    settings: Settings
    stores: StoreHandle
    metrics: Metrics
    models: ModelCache
    search: Any = None  # the snapshots and ANN indexes: vecserve.service.indexes.SearchState
    _inline_ok: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    async def run(self, fn: Callable[..., T], /, *args) -> T:
        """Run a short store-bound call (a /vectors lookup) for an ``async`` handler.

        While Redis answers, the call runs inline on the event loop: an MGET takes ~0.1 ms,
        less than the hop to a pool thread, and 16 pool threads contending for the GIL
        with the loop cost 40-60% of /vectors throughput and most of its p99 (measured).
        After a StoreUnavailable the calls go through the thread pool until one succeeds,
        so a dead or hung Redis can stall the loop once at most (``redis_timeout``).
        """
        if self._inline_ok:
            try:
                return fn(*args)
            except StoreUnavailable:
                self._inline_ok = False
                raise
        result = await run_in_threadpool(fn, *args)
        self._inline_ok = True
        return result

    def model(self, name: str, *, fresh: bool = False) -> ModelInfo:
        return self.models.get(self.stores.get(), name, fresh=fresh)

    def reader(self, name: str) -> Reader:
        """The reader core of model ``name`` in this process (see :mod:`vecserve.reader`)."""
        return self.models.reader(self.stores.get(), name)

    def vector_cache_stats(self) -> dict[str, dict]:
        """:meth:`VectorCache.stats` of every model's cache in this process."""
        return {name: cache.stats() for name, cache in self.models.caches().items()}

    def collect_metrics(self, metrics: Metrics) -> None:
        """Gauges of this process's state, set before each render (a ``Metrics`` collector)."""
        for name, cache in self.models.caches().items():
            metrics.set("vecserve_vector_cache_entries", len(cache), model=name)
            metrics.set("vecserve_vector_keys_lost", cache.lost_keys, model=name)

    def close(self) -> None:
        self.models.close()
        if self.search is not None:
            self.search.close()
        self.stores.close()


def lookup(ctx: AppContext, name: str, words: list[str]) -> Lookup:
    """:meth:`Reader.lookup_steps <vecserve.reader.Reader.lookup_steps>` of ``words`` in
    model ``name``: rows of ONE generation, cache first, fastText words built from their
    n-grams; the vector cache's hits and misses counted."""
    got = ctx.models.run(ctx.stores.get(), name, lambda r: r.lookup_steps(words))
    if ctx.settings.vector_cache:
        ctx.metrics.inc("vecserve_cache_hits_total", got.hits, cache="vectors")
        ctx.metrics.inc("vecserve_cache_misses_total", len(words) - got.hits, cache="vectors")
    return got


def fetch_rows(ctx: AppContext, name: str, words: list[str]) -> Rows:
    """``(info, rows, found)`` of ``words``: float32 rows of ONE generation of ``name``
    (zeros where not found; a fastText model finds every word)."""
    got = lookup(ctx, name, words)
    return got.info, got.rows, got.found


def fetch_vectors(
    ctx: AppContext, name: str, words: list[str]
) -> tuple[ModelInfo, np.ndarray, np.ndarray, list[str]]:
    """``(info, rows, found, built)``: :func:`fetch_rows`, and ``built``: the words of a
    fastText model whose vectors were built from their n-grams, in order."""
    got = lookup(ctx, name, words)
    return got.info, got.rows, got.found, got.built


def embed_texts(ctx: AppContext, name: str, texts: list[str], options: dict) -> Embedding:
    """:func:`~vecserve.text.embed.embed_steps` of ``texts`` in model ``name`` (its text
    rule, one read of the batch's distinct tokens), counted in ``/metrics``."""
    got = ctx.models.run(
        ctx.stores.get(), name, lambda reader: embed_steps(reader, texts, **options)
    )
    ctx.metrics.inc("vecserve_texts_embedded_total", len(texts))
    ctx.metrics.inc("vecserve_text_tokens_total", int(got.used.sum()))
    return got


@dataclass(frozen=True)
class ModelRows:
    """Model ``name``'s rows as the query planner reads them (its
    :class:`~vecserve.search.planner.RowSource`): through :func:`lookup`, the service's
    reader core, so the cache and the generation rules are the service's."""

    ctx: AppContext
    name: str

    def subword_rows(self, words: list[str]) -> tuple[int, np.ndarray]:
        got = lookup(self.ctx, self.name, words)
        return got.info.generation, got.rows

    def text_rows(self, texts: list[str]) -> tuple[int, np.ndarray, np.ndarray]:
        got = embed_texts(self.ctx, self.name, texts, {})
        return got.info.generation, got.vectors, got.used


async def get_context(request: Request) -> AppContext:
    ctx = getattr(request.state, "ctx", None)
    if ctx is None:  # pragma: no cover - only without the lifespan
        raise StoreUnavailable("the service is starting or stopping")
    return ctx


# Dependencies that do no I/O are ``async def``: FastAPI runs sync ones in the thread pool,
# one thread hop each, which costs more than the whole /vectors lookup.
ContextDep = Annotated[AppContext, Depends(get_context)]


async def get_settings(ctx: ContextDep) -> Settings:
    return ctx.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


def resolve_model_name(name: str | None, settings: Settings) -> str:
    """``name`` or the configured default; 422 if neither, InvalidModelName if malformed."""
    name = name or settings.default_model
    if not name:
        raise HTTPException(422, "no model given: pass model=NAME (no default model is configured)")
    return validate_model_name(name)


async def get_model_name(
    settings: SettingsDep,
    model: Annotated[
        str | None,
        Query(
            description="Model name; default: the service's configured default model.",
            json_schema_extra=MODEL_NAME,
        ),
    ] = None,
) -> str:
    return resolve_model_name(model, settings)


ModelName = Annotated[str, Depends(get_model_name)]
#: a POST's ``model`` parameter, beside its body's ``model`` (:func:`model_of`)
ModelQuery = Annotated[
    str | None,
    Query(
        description="Model name; default: the service's default model.",
        json_schema_extra=MODEL_NAME,
    ),
]


def model_of(body_model: str | None, query_model: str | None, settings: Settings) -> str:
    """The model a POST asks: its body's ``model``, else the ``model`` parameter, else the
    default; a name given in either place is checked (InvalidModelName), used or not."""
    if query_model:
        validate_model_name(query_model)
    return resolve_model_name(body_model or query_model, settings)
