"""What the API's handlers depend on: the app context and ``Annotated`` aliases for it.

The lifespan of :func:`vecserve.api.create_app` builds one :class:`AppContext` per process
and yields it as lifespan state; handlers receive its parts through the aliases below
(``SettingsDep``, ``ContextDep``, ``ModelName``), so a test can override any
of them with ``app.dependency_overrides``.

Model metadata is cached for ``settings.model_ttl`` seconds (:class:`ModelCache`); a
reader that finds words missing re-checks the registry before believing it, so a model
reloaded under a new generation is picked up at once, never mixed with the old one.

>>> from typing import get_args
>>> get_args(SettingsDep)[0].__name__
'Settings'
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

import numpy as np
from fastapi import Depends, HTTPException, Query, Request
from starlette.concurrency import run_in_threadpool

from ..cache import Rows, VectorCache, cached_lookup, topology, tracking_nodes
from ..errors import StoreUnavailable
from ..store import ModelInfo, Store, validate_model_name
from ..store.layout import encode_tokens
from ..subwords import in_vocabulary
from .metrics import Metrics
from .settings import Settings

__all__ = [
    "AppContext",
    "ContextDep",
    "ModelCache",
    "ModelName",
    "SettingsDep",
    "StoreHandle",
    "fetch_rows",
    "fetch_vectors",
]

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
    """Registry entries (:class:`ModelInfo`) cached for ``ttl`` seconds per model name."""

    def __init__(self, *, ttl: float, metrics: Metrics):
        self.ttl = ttl
        self.metrics = metrics
        self._entries: dict[str, tuple[float, ModelInfo]] = {}

    def get(self, store: Store, name: str, *, fresh: bool = False) -> tuple[ModelInfo, bool]:
        """``(info, from_cache)``; raises ModelNotFound (-> 404) when there is no such model."""
        now = time.monotonic()
        hit = None if fresh else self._entries.get(name)
        if hit is not None and now - hit[0] < self.ttl:
            self.metrics.inc("vecserve_cache_hits_total", cache="model")
            return hit[1], True
        self.metrics.inc("vecserve_cache_misses_total", cache="model")
        try:
            info = store.get_model(name)
        except KeyError:
            self._entries.pop(name, None)
            raise
        self._entries[name] = (now, info)
        return info, False

    def remember(self, info: ModelInfo) -> None:
        """Cache ``info`` (a newer entry a read just saw) as fresh."""
        self._entries[info.name] = (time.monotonic(), info)

    def forget(self, name: str | None = None) -> None:
        if name is None:
            self._entries.clear()
        else:
            self._entries.pop(name, None)


@dataclass
class AppContext:
    """Everything one API process shares between requests (the lifespan state)."""

    settings: Settings
    stores: StoreHandle
    metrics: Metrics
    models: ModelCache
    search: Any = None  # the snapshots and ANN indexes: vecserve.service.indexes.SearchState
    _inline_ok: bool = False
    _vector_caches: dict[str, VectorCache] = field(default_factory=dict)
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
        return self.models.get(self.stores.get(), name, fresh=fresh)[0]

    def vector_cache(self, info: ModelInfo) -> VectorCache | None:
        """The vector cache of model ``info.name`` (made on first use), or None when off.

        ``info`` proves the model exists: a cache (one tracking connection and thread per
        Redis primary) is only ever made for a committed model, so unknown names cost
        nothing. It follows re-loads by itself (see :mod:`vecserve.cache`).
        """
        size = self.settings.vector_cache
        if not size:
            return None
        cache = self._vector_caches.get(info.name)
        if cache is None:
            store = self.stores.get()
            with self._lock:
                cache = self._vector_caches.get(info.name)
                if cache is None:
                    cache = self._vector_caches[info.name] = VectorCache(
                        size,
                        nodes=tracking_nodes(store.client),
                        topology=topology(store.client),
                        read_registry=lambda: store.registry_entry(info.name),
                        admit_on_repeat=True,
                    )
        return cache

    def vector_cache_stats(self) -> dict[str, dict]:
        """:meth:`VectorCache.stats` of every model's cache in this process."""
        return {name: cache.stats() for name, cache in list(self._vector_caches.items())}

    def collect_metrics(self, metrics: Metrics) -> None:
        """Gauges of this process's state, set before each render (a ``Metrics`` collector)."""
        for name, cache in list(self._vector_caches.items()):
            metrics.set("vecserve_vector_cache_entries", len(cache), model=name)

    def close(self) -> None:
        for cache in self._vector_caches.values():
            cache.close()
        self._vector_caches.clear()
        if self.search is not None:
            self.search.close()
        self.stores.close()


def fetch_rows(ctx: AppContext, name: str, words: list[str], in_vocab: dict | None = None) -> Rows:
    """``(info, rows, found)`` of ``words``: float32 rows of ONE generation of ``name``.

    Rows of missing words are zeros (``found`` False). With the vector cache on, hot words
    come from this process's memory (:func:`vecserve.cache.cached_lookup`); the rest from
    :meth:`Store.read_rows <vecserve.store.Store.read_rows>`, which reads the registry
    entry with the rows, so a generation flip is noticed on every read, not after
    ``model_ttl``.

    With ``in_vocab`` (a dict), a fastText generation with vocabulary hashes is read with
    :meth:`Store.read_rows_subwords <vecserve.store.Store.read_rows_subwords>`: the missing
    words' vectors are built from their n-grams in the same round trip, so every word is
    found, and ``in_vocab`` records which fetched words the vocabulary has.
    """
    store = ctx.stores.get()
    first, _ = ctx.models.get(store, name)  # 404 before any cache is made for the name

    def fetch(tokens: list[str]) -> Rows:
        info, _ = ctx.models.get(store, name)
        if in_vocab is not None and info.subwords and store.vocab_hashes(info) is not None:
            got, rows, known = store.read_rows_subwords(info, tokens)
            in_vocab.update(zip(tokens, known.tolist(), strict=True))
            read = got, rows, np.ones(len(tokens), dtype=bool)
        else:
            read = store.read_rows(info, tokens)
        if read[0] is not info:  # a re-load committed: remember the new generation
            ctx.models.remember(read[0])
        return read

    def current(generation: int) -> ModelInfo:
        if first.generation == generation:
            return first
        return ctx.models.get(store, name, fresh=True)[0]

    cache = ctx.vector_cache(first)
    info, rows, found, hits = cached_lookup(cache, words, fetch, current)
    if cache is not None:
        ctx.metrics.inc("vecserve_cache_hits_total", hits, cache="vectors")
        ctx.metrics.inc("vecserve_cache_misses_total", len(words) - hits, cache="vectors")
    return info, rows, found


def fetch_vectors(
    ctx: AppContext, name: str, words: list[str]
) -> tuple[ModelInfo, np.ndarray, np.ndarray, list[str]]:
    """``(info, rows, found, built)``: :func:`fetch_rows`, and for fastText models every
    missing word's vector built from its n-grams (``built``: those words, in order).

    A generation with vocabulary hashes takes one round trip for words and n-grams alike,
    and built vectors are cached like stored ones (a generation never changes); which
    cached words were built, the hashes say. Older generations: :func:`fill_subwords`.
    """
    in_vocab: dict[str, bool] = {}
    info, rows, found = fetch_rows(ctx, name, words, in_vocab)
    if not info.subwords:
        return info, rows, found, []
    known = ctx.stores.get().vocab_hashes(info) if found.all() else None
    if known is None:
        return fill_subwords(ctx, words, (info, rows, found))
    hits = [w for w in words if w not in in_vocab]  # from the vector cache
    if hits:
        in_vocab.update(zip(hits, in_vocabulary(known, encode_tokens(hits)).tolist(), strict=True))
    return info, rows, found, [w for w in words if not in_vocab[w]]


def fill_subwords(
    ctx: AppContext, words: list[str], rows: Rows
) -> tuple[ModelInfo, np.ndarray, np.ndarray, list[str]]:
    """fastText models: the vectors of the words `fetch_rows` did not find, built from
    their n-grams (:meth:`Store.read_rows_subwords`); ``(info, rows, found, built)``.

    One more round trip, only when a word is missing. Should a re-load have committed
    in between, every word is read again from the new generation.
    """
    info, mat, found = rows
    if not info.subwords or found.all():
        return info, mat, found, []
    store = ctx.stores.get()
    idx = np.flatnonzero(~found)
    got, sub, _ = store.read_rows_subwords(info, [words[i] for i in idx])
    if got.generation == info.generation:
        mat = np.array(mat, copy=True)
        mat[idx] = sub
        built = [words[i] for i in idx.tolist()]
    else:
        got, mat, in_vocab = store.read_rows_subwords(got, words)
        built = [w for w, ok in zip(words, in_vocab, strict=True) if not ok]
    return got, mat, np.ones(len(words), dtype=bool), built


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
        Query(description="Model name; default: the service's configured default model."),
    ] = None,
) -> str:
    return resolve_model_name(model, settings)


ModelName = Annotated[str, Depends(get_model_name)]
