"""RedisKeyedVectors: gensim's ``KeyedVectors`` API over a model stored in Redis.

Change one line of a worker and keep its numbers::

    kv = KeyedVectors.load_word2vec_format("GoogleNews-vectors-negative300.bin", binary=True)
    kv = RedisKeyedVectors("GOOGLE_W2V", redis_url="redis://redis:6379/0")

How each kind of call is answered:

- **Lookups** (``kv[w]``, ``kv[words]``, ``get_vector``, ``in``, ``similarity``,
  ``n_similarity``, ``distance``, ``distances(w, others)``, ``get_mean_vector``,
  ``most_similar_to_given``, ``rank_by_centrality``, ``doesnt_match``,
  ``vectors_for_all``, ``wmdistance``): the needed vectors are fetched in ONE round trip
  (one ``MGET``, plus the model's registry entry in the same pipeline so a re-load is
  noticed at once; on a cluster one ``MGET`` per hash-tag bucket), then gensim's own
  arithmetic runs on them, so results are bit-identical to gensim's on the same vectors.
- **Metadata** (``len``, ``vector_size``, ``index_to_key``, ``key_to_index``,
  ``get_index``, ``get_vecattr(w, "count")``): from the registry; the vocabulary and
  counts are fetched once per generation, lazily, on first use.
- **Whole-matrix calls** (``most_similar`` in all its forms, ``most_similar_cosmul``,
  ``similar_by_word``/``_key``/``_vector``): if ``similarity_url`` (or
  ``$VECSERVE_SIMILARITY_URL``) is set they are sent to the vecserve HTTP service (the
  contract is in :mod:`vecserve.search.snapshot`), which holds the matrix once for all
  workers. Otherwise, and always for ``closer_than``, ``rank``, ``distances(w)`` and
  the evaluations, a local :class:`~vecserve.search.snapshot.SimilarityIndex` is used: a
  memory-mapped snapshot of the current generation, streamed out of Redis in bounded
  chunks once per generation into ``$VECSERVE_CACHE_DIR`` and shared by every process
  of the machine through the page cache.
- **Evaluation** (``evaluate_word_analogies``, ``evaluate_word_pairs``): gensim's own
  implementation runs on a zero-copy gensim view of the snapshot's first
  ``restrict_vocab`` rows. Both gensim methods only ever read those rows (``ok_vocab`` is
  ``index_to_key[:restrict_vocab]`` and ``most_similar`` is called with the same
  ``restrict_vocab``), so the result is exactly gensim's.

Missing words raise ``KeyError`` (:class:`~vecserve.errors.TokenNotFound`, with gensim's
message) unless ``missing="zeros"`` or ``"skip"`` is chosen for the instance or a call;
:meth:`RedisKeyedVectors.get_vectors` also returns the mask of found words.

Generations and the read path: every call reads through the model's reader core
(:mod:`vecserve.reader`), the same one the HTTP service uses. Every fetch carries the
registry entry in the same round trip; if it changed, the batch is re-read from the new
generation (the MGET runs before the HGET, so an unchanged entry proves the values came
from one live generation). Metadata (``len``, ``vector_size``) trusts the entry for
``model_ttl`` seconds (``$VECSERVE_MODEL_TTL``, default 1.0). With the cache on,
invalidations of the registry key flush it (see :mod:`vecserve.cache`). ``kv.pin()``
gives a view that reads the generation live at that moment through reloads, held by a
lease in Redis (:mod:`vecserve.store.pins`) until the view is closed.

asyncio: :class:`AsyncRedisKeyedVectors` has the same calls, answers, errors and cache,
with ``await`` on each call that does I/O (``await kv.get_vectors(words)``,
``await kv["king"]``, ``await kv.most_similar("king")``). Both classes drive the same
steps (:mod:`vecserve.store.wire`): one over redis-py, the other over ``redis.asyncio``.

Processes and threads: connections, cache and snapshot handles are created lazily in the
process that uses them; a child forked after construction (Celery prefork) drops the
inherited ones without closing their sockets and makes its own. All methods are
thread-safe; cache hits take no lock.

>>> kv = RedisKeyedVectors("GOOGLE_W2V", redis_url="redis://localhost:6379/0")  # doctest: +SKIP
>>> kv[["king", "queen"]].shape                                               # doctest: +SKIP
(2, 300)
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import weakref
from collections.abc import Iterable

import numpy as np

from .connect import connect
from .errors import GenerationChanged
from .lookups import Call, Calls
from .reader import Reader
from .search.snapshot import IndexManager, SimilarityIndex
from .store import Pin, Store
from .store.boundary import DRIVER_ERRORS
from .store.clients import async_client
from .store.pins import keep_alive_async
from .store.wire import AsyncConnections, Steps, arun
from .text import embed as text_embed
from .text.query import text_terms_steps
from .wholematrix import WholeMatrixCalls

__all__ = ["AsyncRedisKeyedVectors", "RedisKeyedVectors"]

log = logging.getLogger(__name__)

REAL = np.float32
STREAM_CHUNK = 20_000

_INSTANCES: weakref.WeakSet = weakref.WeakSet()
_GRAVEYARD: list = []  # inherited clients of forked children: never closed, never used


def _after_fork_in_child() -> None:
    for kv in list(_INSTANCES):
        kv._forget_process_state()


os.register_at_fork(after_in_child=_after_fork_in_child)


class TextCalls:
    """The text calls of both clients, written once as steps (:mod:`vecserve.text.embed`)."""

    embed = Call(text_embed.embed)


class RedisKeyedVectors(Calls, WholeMatrixCalls, TextCalls):
    """A drop-in for gensim's ``KeyedVectors`` whose vectors live in Redis.

    Parameters
    ----------
    name : str
        Model name (as given to ``vecserve load --key``).
    redis_url : str, optional
        Server; default ``$VECSERVE_REDIS_URL``, else the embedded server.
    store : Store, optional
        An existing connection instead of ``redis_url``.
    cache : bool or int
        Client-side cache of decoded vectors: ``False`` (default), ``True``
        (``DEFAULT_CACHE_SIZE`` entries) or the maximum number of entries.
    missing : {"raise", "zeros", "skip"}
        What lookups do with a word the model lacks: ``KeyError`` (gensim), a zero
        vector, or leave it out of the result.
    similarity_url : str, optional
        vecserve HTTP service for ``most_similar`` & co.; default
        ``$VECSERVE_SIMILARITY_URL``, else a local memory-mapped snapshot.
    api_key : str, optional
        Key sent to that service as ``Authorization: Bearer``; default ``$VECSERVE_API_KEY``.
    cache_dir : path, optional
        Where local snapshots go (default ``$VECSERVE_CACHE_DIR`` or the user cache dir).
    model_ttl : float, optional
        Seconds the registry entry answers metadata calls (default
        ``$VECSERVE_MODEL_TTL`` or 1.0; reads of rows always check it).

    Examples
    --------
    >>> kv = RedisKeyedVectors("GOOGLE_W2V", cache=True)     # doctest: +SKIP
    >>> kv.similarity("king", "queen")                        # doctest: +SKIP
    0.6510957
    """

    def _init_state(self) -> None:
        self._given_reader: Reader | None = None
        self._pin: Pin | None = None  # a pinned view's (see pin())
        self._lock = threading.RLock()
        self._forget_process_state(first=True)
        _INSTANCES.add(self)

    @classmethod
    def _wrap(cls, call: Call):
        fn = call.fn

        def method(self, *args, **kwargs):
            return self._run(fn(self, *args, **kwargs))

        functools.update_wrapper(method, fn)
        return property(method, doc=fn.__doc__) if call.prop else method

    @classmethod
    def _on_reader(cls, reader: Reader, like: Calls) -> RedisKeyedVectors:
        """A client of ``reader`` (its store, cache and pin), with ``like``'s options."""
        kv = cls(reader.name, store=reader.store, **Calls._options_of(like))
        kv._given_reader = kv._reader_ = reader
        kv.cache_size = reader.cache_size
        return kv

    def _view(self, reader: Reader) -> RedisKeyedVectors:
        """This client's API on another reader of its store (a pinned one: see
        :mod:`vecserve.reader`)."""
        return self._on_reader(reader, self)

    def pin(self, *, lease: float | None = None) -> RedisKeyedVectors:
        """A view of the generation live now that reads it, and only it, until closed.

        The view has this client's API (without its vector cache) while reloads move the
        client on; use it as a context manager, or call ``close()``. Its pin is a lease in
        Redis (:class:`vecserve.store.Pin`) that a daemon thread renews every third of
        ``lease`` seconds (default ``$VECSERVE_PIN_LEASE`` or 30): while it lives no
        reload deletes the generation; once it ends, or its process dies and the lease
        runs out, the generation goes at the next load, ``vecserve models history`` or
        ``cleanup``. A read after the lease was lost raises
        :class:`~vecserve.errors.PinLost`.

        >>> with kv.pin() as pinned:                      # doctest: +SKIP
        ...     vectors = pinned[["king", "queen"]]       # one generation throughout
        """
        reader = self._reader
        pin = self._run(Pin.take_steps(reader.store, self.name, lease=lease, info=reader.last_info))
        view = self._view(reader.pinned(pin.info))
        view._pin = pin.keep_alive()
        return view

    @classmethod
    def from_url(cls, url: str, name: str, **kwargs) -> RedisKeyedVectors:
        """``RedisKeyedVectors(name, redis_url=url, **kwargs)``."""
        return cls(name, redis_url=url, **kwargs)

    @classmethod
    def connect(cls, name: str, **kwargs) -> RedisKeyedVectors:
        """Like the constructor, but connect now: ModelNotFound/StoreUnavailable raise here."""
        kv = cls(name, **kwargs)
        kv._run(kv._info_steps(fresh=True))
        if kv.cache_size:
            kv._get_cache().wait_ready(5)
        return kv

    # -- per-process state ------------------------------------------------------------------

    def _forget_process_state(self, first: bool = False) -> None:
        """Drop every connection-bound object (after fork: without closing its sockets)."""
        if not first:
            _GRAVEYARD.append((self._store, self._reader_, self._embedded, self._indexes))
            self._lock = threading.RLock()
        self._pid = os.getpid()
        self._store: Store | None = self._given_store
        self._reader_: Reader | None = self._given_reader if first else None
        self._embedded = None
        self._indexes: IndexManager | None = None
        self._vocab: tuple[int, list[str], dict[str, int]] | None = None
        self._counts: tuple[int, np.ndarray | None] | None = None

    def _get_store(self) -> Store:
        store = self._store
        if store is not None:
            return store
        with self._lock:
            if self._store is None:
                self._embedded = connect(self._redis_url)
                self._store = Store.from_url(self._embedded.url)
            return self._store

    @property
    def _reader(self) -> Reader:
        reader = self._reader_
        if reader is None:
            store = self._get_store()
            with self._lock:
                if self._reader_ is None:
                    self._reader_ = self._new_reader(store)
                reader = self._reader_
        return reader

    def _run(self, steps: Steps):
        pin = self._pin
        if pin is not None:  # a pinned view: good only if its pin lived through the read
            steps = pin.confirmed(steps)
        return self._reader.store.run(steps)

    @property
    def _cache(self):
        """The vector cache (None when off or not made yet)."""
        reader = self._reader_
        return reader._cache if reader is not None else None

    def _get_cache(self):
        self._run(self._info_steps())
        return self._reader.cache()

    def close(self) -> None:
        """Stop the cache listener and close the connections this instance opened (a
        pinned view: end its pin)."""
        if self._pin is not None:
            self._pin.release()
        with self._lock:
            if self._reader_ is not None and self._given_reader is None:
                self._reader_.close()
            if self._store is not None and self._given_store is None:
                self._store.close()
            if self._embedded is not None:
                self._embedded.release()
            self._forget_process_state(first=True)

    def __enter__(self) -> RedisKeyedVectors:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the calls Python's syntax makes --------------------------------------------------

    def __getitem__(self, key_or_keys):
        """``kv["word"]`` (1-D, read-only) or ``kv[["a", "b"]]`` (2-D), like gensim."""
        if type(key_or_keys) is str:
            reader = self._reader_
            if reader is not None:
                single = reader.single
                if single is not None:  # one hand-written request, no steps
                    try:
                        v = single.get(key_or_keys)
                    except DRIVER_ERRORS:
                        v = None  # the general read retries, and names what failed
                else:
                    v = reader.cached(key_or_keys)
                if v is not None:
                    return v
        return self._getitem(key_or_keys)

    def __len__(self) -> int:
        return self.next_index

    def __contains__(self, key) -> bool:
        return self.contains(key)

    def distances(self, word_or_vector, other_words=()) -> np.ndarray:
        """Cosine distances to ``other_words`` (one round trip), or to every key (snapshot)."""
        if not other_words:
            return self._index().distances(word_or_vector)
        return self._distances_to(word_or_vector, other_words)

    # -- what the whole-matrix calls (wholematrix.py) need ----------------------------------

    def _vectors_of(self, keys: Iterable, *, norm: bool = False) -> dict:
        return self._run(self._vectors_of_steps(keys, norm=norm))

    def _subword_terms(self, positive, negative):
        return self._run(self._subword_terms_steps(positive, negative))

    def _text_terms(self, positive, negative):
        return self._run(text_terms_steps(self._reader, positive, negative))

    def _index(self) -> SimilarityIndex:
        reader = self._reader
        with self._lock:
            if self._indexes is None:
                self._indexes = IndexManager(reader.store, cache_dir=self.cache_dir)
        # the registry entry as lookups see it (re-read after model_ttl, or at once when
        # the cache saw another generation): not a round trip on every query
        return self._indexes.get(self.name, info=self._run(reader.info_steps()))

    # -- materialising ----------------------------------------------------------------------

    def to_keyedvectors(self, keys: Iterable | None = None, *, chunk: int = STREAM_CHUNK):
        """A real gensim ``KeyedVectors``: of ``keys`` (those that exist), or of the whole
        model streamed in chunks, with the source's counts (or gensim's made-up ones).

        >>> small = kv.to_keyedvectors(["king", "queen"])      # doctest: +SKIP
        """
        from gensim.models import KeyedVectors

        if keys is not None:
            return self.vectors_for_all(keys, copy_vecattrs=True)
        reader = self._reader
        info = self._run(reader.info_steps(fresh=reader.pin is None))
        store = reader.store
        kv = KeyedVectors(info.dim, info.count, dtype=REAL)
        counts = store.run(store.counts_steps(info))
        vocab: list[str] = []
        pinned = reader.pin is not None
        for tokens in store.iter_vocab(info, chunk=chunk):
            got, mat, found = self._run(store.read_rows_steps(info, tokens, pinned=pinned))
            if not found.all() or got.generation != info.generation:
                raise GenerationChanged(f"model {self.name!r} changed while being copied")
            kv.vectors[len(vocab) : len(vocab) + len(tokens)] = mat
            vocab.extend(tokens)
        kv.index_to_key = vocab
        kv.key_to_index = {k: i for i, k in enumerate(vocab)}
        kv.next_index = len(vocab)
        kv.allocate_vecattrs(["count"], [np.int64])
        fake = info.count - np.arange(info.count, dtype=np.int64)
        kv.expandos["count"][:] = counts if counts is not None else fake
        return kv


# The calls AsyncRedisKeyedVectors answers in a worker thread, on its sync twin: those
# of the whole matrix (a local memory-mapped snapshot, or the HTTP service) and the
# whole-model copy.
_THREADED = sorted(
    {n for n in vars(WholeMatrixCalls) if not n.startswith("_")}
    - {n for n, v in vars(WholeMatrixCalls).items() if isinstance(v, (staticmethod, property))}
    | {"to_keyedvectors"}
)
_THREADED_PROPERTIES = sorted(
    n for n, v in vars(WholeMatrixCalls).items() if isinstance(v, property)
)


class AsyncRedisKeyedVectors(Calls, TextCalls):
    """:class:`RedisKeyedVectors` for asyncio: the same calls, answers, errors and cache,
    with ``await`` on every call that does I/O, over ``redis.asyncio``.

    ``await kv.get_vector("king")``, ``await kv["king"]``, ``await kv.index_to_key``,
    ``await kv.most_similar("king")``. Lookups are driven on the event loop, pipelined on
    a few connections every coroutine shares (a batch of many words is built, packed and
    decoded in chunks, the loop running between them); whole-matrix calls (``most_similar``,
    ``closer_than``, the evaluations, ...) run the sync snapshot code in a worker thread.
    ``len(kv)`` and ``kv.vector_size`` answer from the registry entry last read (after
    :meth:`connect` or any call); ``key in kv`` cannot await: use
    ``await kv.contains(key)``. A cancelled call leaves the connections usable.

    Takes the same arguments as :class:`RedisKeyedVectors`.

    >>> kv = await AsyncRedisKeyedVectors.connect("GOOGLE_W2V", cache=True)  # doctest: +SKIP
    >>> (await kv.get_vectors(["king", "queen"]))[0].shape                   # doctest: +SKIP
    (2, 300)
    """

    def _init_state(self) -> None:
        self._reader_: Reader | None = None
        self._twin_: RedisKeyedVectors | None = None
        self._embedded = None
        self._aclient = None
        self._connections: AsyncConnections | None = None
        self._connecting: asyncio.Lock | None = None
        self._vocab: tuple[int, list[str], dict[str, int]] | None = None
        self._counts: tuple[int, np.ndarray | None] | None = None
        # a pinned view's: its pin, the task renewing it, the client whose connections it uses
        self._pin: Pin | None = None
        self._pin_task: asyncio.Task | None = None
        self._parent: AsyncRedisKeyedVectors | None = None

    @classmethod
    def _wrap(cls, call: Call):
        fn = call.fn
        if call.prop:
            return property(lambda self: self._arun(fn(self)), doc=fn.__doc__)

        async def method(self, *args, **kwargs):
            return await self._arun(fn(self, *args, **kwargs))

        functools.update_wrapper(method, fn)
        return method

    @classmethod
    async def connect(cls, name: str, **kwargs) -> AsyncRedisKeyedVectors:
        """Construct and connect now: ModelNotFound/StoreUnavailable raise here."""
        kv = cls(name, **kwargs)
        await kv._arun(kv._info_steps(fresh=True))
        if kv.cache_size:
            cache = kv._reader.cache()
            await asyncio.to_thread(cache.wait_ready, 5)
        return kv

    def _view(self, reader: Reader) -> AsyncRedisKeyedVectors:
        """This client's API on another reader of its connections (a pinned one)."""
        kv = AsyncRedisKeyedVectors(reader.name, store=reader.store, **Calls._options_of(self))
        kv._reader_, kv._aclient, kv._connections = reader, self._aclient, self._connections
        kv.cache_size = reader.cache_size
        kv._parent = self
        return kv

    def pin(self, *, lease: float | None = None) -> _Pinning:
        """A view of the generation live now, as :meth:`RedisKeyedVectors.pin`: ``async
        with kv.pin() as pinned:`` (closed at the block's end) or ``pinned = await
        kv.pin()`` (then ``await pinned.aclose()``). An asyncio task renews its lease;
        it uses this client's connections.

        >>> async with kv.pin() as pinned:                # doctest: +SKIP
        ...     vectors, found = await pinned.get_vectors(["king", "queen"])
        """
        return _Pinning(self, lease)

    async def _pin_view(self, lease: float | None) -> AsyncRedisKeyedVectors:
        reader = await self._ensure()
        pin = await self._arun(
            Pin.take_steps(reader.store, self.name, lease=lease, info=reader.last_info)
        )
        view = self._view(reader.pinned(pin.info))
        view._pin = pin
        run = functools.partial(view._arun, confirm=False)
        view._pin_task = asyncio.create_task(keep_alive_async(pin, run))
        return view

    # -- connections --------------------------------------------------------------------

    def _connect_sync(self) -> None:
        """Connect the sync store (and the embedded server): run in a thread."""
        if self._given_store is not None:
            store = self._given_store
        else:
            self._embedded = connect(self._redis_url)
            store = Store.from_url(self._embedded.url)
        self._reader_ = self._new_reader(store)

    async def _ensure(self) -> Reader:
        if self._aclient is not None and self._reader_ is not None:
            return self._reader_
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._reader_ is None:
                await asyncio.to_thread(self._connect_sync)
            if self._aclient is None:
                self._aclient, self._connections = async_client(self._reader_.store)
        return self._reader_

    @property
    def _reader(self) -> Reader:
        if self._reader_ is None:
            raise RuntimeError("not connected: call through an await first")
        return self._reader_

    async def _arun(self, steps: Steps, *, confirm: bool = True):
        reader = await self._ensure()
        if self._pin is not None and confirm:  # a pinned view: its pin lived through it
            steps = self._pin.confirmed(steps)
        return await arun(steps, self._aclient, reader.store.url, self._connections)

    @property
    def _twin(self) -> RedisKeyedVectors:
        """A sync client of the same reader, for the calls run in a worker thread."""
        if self._twin_ is None:
            self._twin_ = RedisKeyedVectors._on_reader(self._reader, self)
            self._twin_._pin = self._pin  # its reads are confirmed too; closed by us
        return self._twin_

    async def _threaded(self, name: str, *args, **kwargs):
        await self._ensure()
        return await asyncio.to_thread(getattr(self._twin, name), *args, **kwargs)

    async def aclose(self) -> None:
        """Stop the cache listener and close the connections this instance opened (a
        pinned view: end its pin; its client's connections stay open)."""
        if self._pin is not None:
            if self._pin_task is not None:
                self._pin_task.cancel()
            await self._arun(self._pin.release_steps(), confirm=False)
        if self._parent is not None:
            self._reader_ = self._twin_ = self._aclient = self._connections = None
            return
        if self._connections is not None:
            await self._connections.close()
        if self._aclient is not None:
            await self._aclient.aclose()
        reader = self._reader_
        if reader is not None:
            await asyncio.to_thread(reader.close)
            if self._given_store is None:
                await asyncio.to_thread(reader.store.close)
        if self._embedded is not None:
            self._embedded.release()
        self._reader_ = self._twin_ = self._aclient = self._connections = None

    async def __aenter__(self) -> AsyncRedisKeyedVectors:
        await self._arun(self._info_steps())  # connected, the entry read: len() answers
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    # -- the calls Python's syntax makes --------------------------------------------------

    def __getitem__(self, key_or_keys):
        """``await kv["word"]`` or ``await kv[["a", "b"]]``."""
        return self._getitem(key_or_keys)

    def __len__(self) -> int:
        info = self._reader_.last_info if self._reader_ is not None else None
        if info is None:
            raise TypeError(
                "len() of an AsyncRedisKeyedVectors before its first call: "
                "await kv.connect(...) or any call first"
            )
        return info.count

    def __contains__(self, key) -> bool:
        raise TypeError("`in` cannot await: use `await kv.contains(key)`")

    @property
    def vector_size(self) -> int:
        """The dimension, from the registry entry last read (no I/O)."""
        len(self)  # TypeError before the first call
        return self._reader.last_info.dim

    async def distances(self, word_or_vector, other_words=()) -> np.ndarray:
        """Cosine distances to ``other_words`` (one round trip), or to every key (snapshot,
        in a thread)."""
        if not other_words:
            return await self._threaded("distances", word_or_vector)
        return await self._arun(self._distances_to_steps(word_or_vector, other_words))

    def _distances_to_steps(self, word_or_vector, other_words):
        return Calls._distances_to(self, word_or_vector, other_words)

    cosine_similarities = staticmethod(Calls.cosine_similarities)


def _threaded_method(name: str):
    async def method(self, *args, **kwargs):
        return await self._threaded(name, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = getattr(WholeMatrixCalls, name, getattr(RedisKeyedVectors, name)).__doc__
    return method


def _threaded_property(name: str):
    async def get(self):
        await self._ensure()
        return await asyncio.to_thread(getattr, self._twin, name)

    return property(lambda self: get(self), doc=getattr(WholeMatrixCalls, name).__doc__)


for _name in _THREADED:
    setattr(AsyncRedisKeyedVectors, _name, _threaded_method(_name))
for _name in _THREADED_PROPERTIES:
    setattr(AsyncRedisKeyedVectors, _name, _threaded_property(_name))
for _name in ("log_accuracy", "log_evaluate_word_pairs"):
    setattr(AsyncRedisKeyedVectors, _name, staticmethod(getattr(WholeMatrixCalls, _name)))


class _Pinning:
    """What :meth:`AsyncRedisKeyedVectors.pin` returns: awaited, the pinned view; used
    with ``async with``, the view, closed (its pin ended) at the block's end."""

    def __init__(self, kv: AsyncRedisKeyedVectors, lease: float | None):
        self._kv, self._lease = kv, lease
        self._view: AsyncRedisKeyedVectors | None = None

    def __await__(self):
        return self._kv._pin_view(self._lease).__await__()

    async def __aenter__(self) -> AsyncRedisKeyedVectors:
        self._view = await self._kv._pin_view(self._lease)
        return self._view

    async def __aexit__(self, *exc) -> None:
        assert self._view is not None
        await self._view.aclose()
