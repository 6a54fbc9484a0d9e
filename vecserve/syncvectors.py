"""RedisKeyedVectors: the synchronous client, over redis-py (how each kind of call is
answered, generations, processes and threads: :mod:`vecserve.keyedvectors`).

It drives the steps of :mod:`vecserve.lookups` (and the text calls of
:mod:`vecserve.text.embed`) on the store's sync client, and the whole-matrix calls of
:mod:`vecserve.wholematrix` on a local snapshot or the HTTP service. The connections,
cache and snapshot handles are per process: a child forked after construction drops the
inherited ones (``_after_fork_in_child``) and makes its own.
"""

from __future__ import annotations

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
from .store.wire import Steps
from .text import embed as text_embed
from .text.query import text_terms_steps
from .wholematrix import WholeMatrixCalls

__all__ = ["RedisKeyedVectors", "TextCalls"]

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
