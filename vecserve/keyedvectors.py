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

Generations: nothing is pinned. Every fetch carries the registry entry in the same round
trip; if it changed, the batch is re-read from the new generation (the MGET runs before
the HGET, so an unchanged entry proves the values came from one live generation). On a
cluster the entry is re-read at most every ``REGISTRY_TTL`` seconds and after any miss.
With the cache on, invalidations of the registry key flush it (see :mod:`vecserve.cache`).

Processes and threads: connections, cache and snapshot handles are created lazily in the
process that uses them; a child forked after construction (Celery prefork) drops the
inherited ones without closing their sockets and makes its own. All methods are
thread-safe; cache hits take no lock.

>>> kv = RedisKeyedVectors("GOOGLE_W2V", redis_url="redis://localhost:6379/0")  # doctest: +SKIP
>>> kv[["king", "queen"]].shape                                               # doctest: +SKIP
(2, 300)
"""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
import weakref
from collections.abc import Iterable, Sequence

import numpy as np

from . import config
from .cache import VectorCache, cached_lookup, topology, tracking_nodes
from .connect import connect
from .errors import GenerationChanged, ModelNotFound, TokenNotFound, VecserveError
from .search.snapshot import IndexManager, SimilarityIndex, mean_vector
from .store import MODELS, ModelInfo, Pin, Store
from .wholematrix import WholeMatrixCalls

__all__ = ["RedisKeyedVectors"]

log = logging.getLogger(__name__)

REAL = np.float32
_KEY_TYPES = (str, int, np.integer)
MISSING_POLICIES = ("raise", "zeros", "skip")
DEFAULT_CACHE_SIZE = 10_000
REGISTRY_TTL = 0.1  # seconds; cluster fetches and metadata calls
STREAM_CHUNK = 20_000

_INSTANCES: weakref.WeakSet = weakref.WeakSet()
_GRAVEYARD: list = []  # inherited clients of forked children: never closed, never used


def _after_fork_in_child() -> None:
    for kv in list(_INSTANCES):
        kv._forget_process_state()


os.register_at_fork(after_in_child=_after_fork_in_child)


class RedisKeyedVectors(WholeMatrixCalls):
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

    Examples
    --------
    >>> kv = RedisKeyedVectors("GOOGLE_W2V", cache=True)     # doctest: +SKIP
    >>> kv.similarity("king", "queen")                        # doctest: +SKIP
    0.6510957
    """

    def __init__(
        self,
        name: str,
        *,
        redis_url: str | None = None,
        store: Store | None = None,
        cache: bool | int = False,
        missing: str = "raise",
        similarity_url: str | None = None,
        api_key: str | None = None,
        cache_dir: str | os.PathLike | None = None,
    ):
        if missing not in MISSING_POLICIES:
            raise ValueError(f"missing must be one of {MISSING_POLICIES}, got {missing!r}")
        self.name = name
        self.missing = missing
        self.similarity_url = config.similarity_url(similarity_url)
        self._api_key = config.api_key(api_key)  # never shown: not in repr, logs or errors
        self.cache_dir = cache_dir
        self.cache_size = (
            0 if cache is False else DEFAULT_CACHE_SIZE if cache is True else int(cache)
        )
        self._redis_url = redis_url
        self._given_store = store
        self._lock = threading.RLock()
        self._cache: VectorCache | None = None
        self._pin: Pin | None = None  # a pinned view's (see pin())
        self._forget_process_state(first=True)
        _INSTANCES.add(self)

    @classmethod
    def from_url(cls, url: str, name: str, **kwargs) -> RedisKeyedVectors:
        """``RedisKeyedVectors(name, redis_url=url, **kwargs)``."""
        return cls(name, redis_url=url, **kwargs)

    @classmethod
    def connect(cls, name: str, **kwargs) -> RedisKeyedVectors:
        """Like the constructor, but connect now: ModelNotFound/StoreUnavailable raise here."""
        kv = cls(name, **kwargs)
        kv._refresh_info()
        if kv.cache_size:
            kv._get_cache().wait_ready(5)
        return kv

    # -- per-process state ------------------------------------------------------------------

    def _forget_process_state(self, first: bool = False) -> None:
        """Drop every connection-bound object (after fork: without closing its sockets)."""
        if not first:
            _GRAVEYARD.append((self._store, self._cache, self._embedded, self._indexes))
            self._lock = threading.RLock()
        self._pid = os.getpid()
        self._store: Store | None = self._given_store
        self._embedded = None
        self._cache = None
        self._indexes: IndexManager | None = None
        self._info: ModelInfo | None = None
        self._info_time = 0.0
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

    def _get_cache(self) -> VectorCache | None:
        if not self.cache_size:
            return None
        cache = self._cache
        if cache is not None:
            return cache
        with self._lock:
            if self._cache is None:
                store = self._get_store()
                self._cache = VectorCache(
                    self.cache_size,
                    nodes=tracking_nodes(store.client),
                    topology=topology(store.client),
                    read_registry=lambda: store.client.hget(MODELS, self.name),
                )
            return self._cache

    def close(self) -> None:
        """Stop the cache listener and close the connections this instance opened (and
        end a pinned view's pin)."""
        if self._pin is not None:
            self._pin.release()
        with self._lock:
            if self._cache is not None:
                self._cache.close()
            if self._store is not None and self._given_store is None:
                self._store.close()
            if self._embedded is not None:
                self._embedded.release()
            self._forget_process_state(first=True)

    def __enter__(self) -> RedisKeyedVectors:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        pin = self._pin
        pinned = f" pinned to generation {pin.info.generation}" if pin is not None else ""
        return f"<RedisKeyedVectors {self.name!r}{pinned}>"

    # -- registry ---------------------------------------------------------------------------

    def _refresh_info(self) -> ModelInfo:
        if self._pin is not None:  # a pinned view never follows the registry
            self._info = self._pin.info
            return self._info
        store = self._get_store()
        try:
            self._info = store.model_from_entry(self.name, store.registry_entry(self.name))
        except ModelNotFound:
            self._info = None
            raise
        self._info_time = time.monotonic()
        return self._info

    def _current_info(self) -> ModelInfo:
        """The registry entry, re-read if older than REGISTRY_TTL or the cache saw a change."""
        info = self._info
        if self._pin is not None:
            return self._pin.info
        if info is None or time.monotonic() - self._info_time > REGISTRY_TTL:
            return self._refresh_info()
        cache = self._cache
        if cache is not None and cache.ready and cache.generation != info.generation:
            return self._refresh_info()
        return info

    @property
    def info(self) -> ModelInfo:
        """Registry entry of the current generation (:class:`~vecserve.store.ModelInfo`)."""
        return self._current_info()

    def __len__(self) -> int:
        return self._current_info().count

    @property
    def vector_size(self) -> int:
        return self._current_info().dim

    # -- fetching ---------------------------------------------------------------------------

    def _fetch(self, tokens: list[str]) -> tuple[ModelInfo, np.ndarray, np.ndarray]:
        """Decoded rows and found-mask of ``tokens``, all from one live generation."""
        store = self._get_store()
        info = self._info if self._info is not None else self._refresh_info()
        if not tokens:
            info = self._current_info()
            return info, np.zeros((0, info.dim), dtype=REAL), np.zeros(0, dtype=bool)
        if self._pin is not None:
            return self._fetch_pinned(store, tokens)
        try:
            if info.subwords:
                info, mat, found = self._fetch_subwords(store, info, tokens)
            else:
                info, mat, found = store.read_rows(info, tokens)
        except ModelNotFound:
            self._info = None
            raise
        self._info, self._info_time = info, time.monotonic()
        return info, mat, found

    def _fetch_pinned(self, store: Store, tokens: list[str]):
        """Rows of the pinned generation: its keys' MGET, no registry entry; good only if
        the pin lived through it (``Pin.confirm``, else PinLost)."""
        pin = self._pin
        assert pin is not None
        info = pin.info
        values = store.fetch(info, tokens)
        mat, found = info.codec_obj.decode_values(values, info.dim, what=tokens)
        pin.confirm()
        return info, mat, found

    def pin(self, *, lease: float | None = None) -> RedisKeyedVectors:
        """A view of the generation live now that reads it, and only it, until closed.

        The view answers like this client (without its vector cache) while reloads move
        the client on; a context manager, or call ``close()``. Its pin is a lease in
        Redis renewed by a daemon thread every third of ``lease`` seconds (default
        ``$VECSERVE_PIN_LEASE`` or 30); while it lives no reload deletes the generation,
        and once it ends (or its process dies and the lease runs out) the generation goes
        at the next load, ``vecserve models history`` or ``cleanup``. A read after the
        lease was lost raises :class:`~vecserve.errors.PinLost`.

        >>> with kv.pin() as pinned:                      # doctest: +SKIP
        ...     vectors = pinned[["king", "queen"]]       # the same generation throughout
        """
        store = self._get_store()
        pin = Pin.take(store, self.name, lease=lease, info=self._info)
        if pin.info.subwords:
            pin.release()
            raise VecserveError(f"pinned views of fastText models ({self.name!r}) come later")
        pin.keep_alive()
        view = RedisKeyedVectors(self.name, store=store, missing=self.missing,
                                 similarity_url=self.similarity_url, api_key=self._api_key,
                                 cache_dir=self.cache_dir)  # fmt: skip
        view._pin = pin
        return view

    def _fetch_subwords(
        self, store: Store, info: ModelInfo, tokens: list[str]
    ) -> tuple[ModelInfo, np.ndarray, np.ndarray]:
        """Rows of a fastText model: every word has one (`Store.read_rows_subwords`)."""
        info, mat, _ = store.read_rows_subwords(info, tokens)
        return info, mat, np.ones(len(tokens), dtype=bool)

    def built_from_subwords(self, keys: Sequence[str]) -> list[bool]:
        """For each key: True when its vector is built from n-grams (not in the vocabulary).

        Always False for models without subwords (their unknown words have no vector).
        """
        info = self._current_info()
        if not info.subwords:
            return [False] * len(keys)
        _, _, in_vocab = self._get_store().read_rows(info, list(keys))
        return (~in_vocab).tolist()

    def _lookup(self, keys: Sequence) -> tuple[np.ndarray, np.ndarray]:
        """Rows (zeros where missing) and found-mask of ``keys``; cache-aware."""
        tokens = [k if isinstance(k, str) else self._token_at(k) for k in keys]
        valid = [i for i, t in enumerate(tokens) if t is not None]
        want = tokens if len(valid) == len(tokens) else [tokens[i] for i in valid]
        info, mat, found = self._lookup_rows(want)
        if want is tokens:
            return mat, found
        out = np.zeros((len(tokens), info.dim), dtype=REAL)
        out_found = np.zeros(len(tokens), dtype=bool)
        out[valid], out_found[valid] = mat, found
        return out, out_found

    def _lookup_rows(self, tokens: list[str]) -> tuple[ModelInfo, np.ndarray, np.ndarray]:
        """``(info, rows, found)`` of ``tokens``, cache first, all of generation ``info``."""
        info, mat, found, _ = cached_lookup(
            self._get_cache(), tokens, self._fetch, self._info_of_generation
        )
        return info, mat, found

    def _info_of_generation(self, generation: int) -> ModelInfo:
        """The registry entry, re-read if it is not of ``generation`` (the cache's)."""
        info = self._current_info()
        return info if info.generation == generation else self._refresh_info()

    def _token_at(self, key) -> str | None:
        """The token at position ``key`` (gensim accepts int keys as positions)."""
        if isinstance(key, (int, np.integer)):
            info = self._current_info()
            if 0 <= key < info.count:
                if self._vocab is not None and self._vocab[0] == info.generation:
                    return self._vocab[1][key]
                got = self._get_store().vocab(info, int(key), int(key) + 1)
                return got[0] if got else None
        return None

    def _missing(self, key, policy: str | None):
        policy = policy or self.missing
        if policy not in MISSING_POLICIES:
            raise ValueError(f"missing must be one of {MISSING_POLICIES}, got {policy!r}")
        if policy == "raise":
            raise TokenNotFound(key, self.name, lookup=True)
        return policy

    # -- lookups (gensim API) ---------------------------------------------------------------

    def __getitem__(self, key_or_keys):
        """``kv["word"]`` (1-D, read-only) or ``kv[["a", "b"]]`` (2-D), like gensim."""
        if type(key_or_keys) is str:
            cache = self._cache
            if cache is not None:
                v = cache.data.get(key_or_keys)
                if v is not None:
                    try:  # noqa: SIM105  (faster than contextlib.suppress on the hit path)
                        cache.data.move_to_end(key_or_keys)
                    except KeyError:
                        pass
                    return v
            return self.get_vector(key_or_keys)
        if isinstance(key_or_keys, _KEY_TYPES):
            return self.get_vector(key_or_keys)
        keys = list(key_or_keys)
        if not keys:
            raise ValueError("need at least one array to concatenate")  # as numpy.vstack
        return self.get_vectors(keys)[0]

    def get_vector(self, key, norm: bool = False, *, missing: str | None = None) -> np.ndarray:
        """The vector of ``key`` (unit length with ``norm=True``), read-only, as gensim.

        >>> kv.get_vector("king", norm=True).shape        # doctest: +SKIP
        (300,)
        """
        mat, found = self._lookup([key])
        if not found[0]:
            self._missing(key, missing)
            result = np.zeros(mat.shape[1], dtype=REAL)
        elif norm:
            result = mat[0] / np.linalg.norm(mat[:1], axis=1)[0]
        else:
            result = mat[0]
        result.setflags(write=False)
        return result

    def word_vec(self, *args, **kwargs) -> np.ndarray:
        """gensim's older name of :meth:`get_vector` (deprecated there too)."""
        warnings.warn(
            "Call to deprecated `word_vec` (Use get_vector instead).", DeprecationWarning, 2
        )
        return self.get_vector(*args, **kwargs)

    def get_vectors(
        self, keys: Sequence, *, norm: bool = False, missing: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Vectors of ``keys`` in one round trip, and the boolean mask of those found.

        ``missing="raise"`` raises KeyError for the first missing key, ``"zeros"`` gives
        a zero row for it, ``"skip"`` leaves its row out (use the mask to align).

        >>> vectors, found = kv.get_vectors(["king", "qwzx"], missing="skip")  # doctest: +SKIP
        >>> vectors.shape, found.tolist()                                       # doctest: +SKIP
        ((1, 300), [True, False])
        """
        mat, found = self._lookup(list(keys))
        if not found.all():
            policy = missing or self.missing
            first = next(k for k, ok in zip(keys, found, strict=True) if not ok)
            if self._missing(first, policy) == "skip":
                mat = mat[found]
        if norm:
            norms = np.linalg.norm(mat, axis=1)
            mat = mat / np.where(norms > 0, norms, 1)[:, None]
        return mat, found

    def _vectors_of(self, keys: Iterable, *, norm: bool = False) -> dict:
        """{key: vector} of the keys found, one round trip; for gensim-style arithmetic."""
        uniq = list(dict.fromkeys(k for k in keys if isinstance(k, _KEY_TYPES)))
        if not uniq:
            return {}
        mat, found = self._lookup(uniq)
        out = {}
        for k, row, ok in zip(uniq, mat, found, strict=True):
            if ok:
                out[k] = row / np.linalg.norm(row[None, :], axis=1)[0] if norm else row
        return out

    def has_index_for(self, key) -> bool:
        """Whether ``key`` is in the vocabulary (for fastText models too, as gensim)."""
        if not isinstance(key, _KEY_TYPES):
            return False
        info = self._current_info()
        if info.subwords:  # the cache holds subword-built vectors too: ask Redis
            token = key if isinstance(key, str) else self._token_at(key)
            if token is None:
                return False
            got, _, found = self._get_store().read_rows(info, [token])
            self._info = got
            return bool(found[0])
        if type(key) is str and self._cache is not None and key in self._cache.data:
            return True
        return bool(self._lookup([key])[1][0])

    def __contains__(self, key) -> bool:
        """``key in kv``: for a fastText model with n-gram buckets, always True (gensim's
        ``FastTextKeyedVectors``: every word has a vector); else `has_index_for`."""
        if self._current_info().subwords:
            return True
        return self.has_index_for(key)

    def _subword_terms(self, positive, negative):
        """``most_similar``'s arguments with out-of-vocabulary words of a fastText model
        replaced by their unit vectors (gensim normalises each word's vector first)."""
        if not self._current_info().subwords:
            return positive, negative

        def listed(terms):
            if terms is None:
                return []
            if isinstance(terms, (str, int, np.integer, np.ndarray)):
                return [terms]
            return list(terms)

        positive, negative = listed(positive), listed(negative)
        words = [t[0] if isinstance(t, tuple) else t for t in positive + negative]
        words = list(dict.fromkeys(w for w in words if isinstance(w, str)))
        oov = [w for w in words if not self.has_index_for(w)]
        if not oov:
            return positive, negative
        vecs = dict(zip(oov, self.get_vectors(oov, norm=True)[0], strict=True))

        def swap(t):
            if isinstance(t, tuple) and isinstance(t[0], str) and t[0] in vecs:
                return (vecs[t[0]], *t[1:])
            return vecs[t] if isinstance(t, str) and t in vecs else t

        return [swap(t) for t in positive], [swap(t) for t in negative]

    def get_mean_vector(
        self, keys, weights=None, pre_normalize=True, post_normalize=False, ignore_missing=True
    ) -> np.ndarray:
        """gensim's ``get_mean_vector``, with every word fetched in one round trip."""
        if len(keys) == 0:
            raise ValueError("cannot compute mean with no input")
        if isinstance(weights, list):
            weights = np.array(weights, dtype=REAL)
        if weights is None:
            weights = np.ones(len(keys), dtype=REAL)
        if len(keys) != weights.shape[0]:
            raise ValueError("keys and weights array must have same number of elements")
        vecs = self._vectors_of(
            (k for k in keys if not isinstance(k, np.ndarray)), norm=pre_normalize
        )
        return mean_vector(
            keys,
            weights,
            vecs,
            self.vector_size,
            post_normalize=post_normalize,
            ignore_missing=ignore_missing,
        )

    def similarity(self, w1, w2) -> float:
        from gensim import matutils

        v = self._pair(w1, w2)
        return np.dot(matutils.unitvec(v[w1]), matutils.unitvec(v[w2]))

    def _pair(self, *words) -> dict:
        vecs = self._vectors_of(words)
        for w in words:
            if w not in vecs:
                self._missing(w, "raise")
        return vecs

    def distance(self, w1, w2) -> float:
        return 1 - self.similarity(w1, w2)

    def n_similarity(self, ws1, ws2) -> float:
        from gensim import matutils

        if not (len(ws1) and len(ws2)):
            raise ZeroDivisionError("At least one of the passed list is empty.")
        mean1 = self.get_mean_vector(ws1, pre_normalize=False)
        mean2 = self.get_mean_vector(ws2, pre_normalize=False)
        return np.dot(matutils.unitvec(mean1), matutils.unitvec(mean2))

    @staticmethod
    def cosine_similarities(vector_1, vectors_all):
        norm = np.linalg.norm(vector_1)
        all_norms = np.linalg.norm(vectors_all, axis=1)
        return np.dot(vectors_all, vector_1) / (norm * all_norms)

    def distances(self, word_or_vector, other_words=()) -> np.ndarray:
        """Cosine distances to ``other_words`` (one round trip), or to every key (snapshot)."""
        if not other_words:
            return self._index().distances(word_or_vector)
        words = list(other_words)
        first = [word_or_vector] if isinstance(word_or_vector, _KEY_TYPES) else []
        vecs = self._pair(*first, *words)
        vec = vecs[word_or_vector] if first else word_or_vector
        return 1 - self.cosine_similarities(vec, np.stack([vecs[w] for w in words]))

    def most_similar_to_given(self, key1, keys_list):
        from gensim import matutils

        vecs = self._pair(key1, *keys_list)
        v1 = matutils.unitvec(vecs[key1])
        sims = [np.dot(v1, matutils.unitvec(vecs[k])) for k in keys_list]
        return keys_list[np.argmax(sims)]

    def rank_by_centrality(self, words, use_norm=True):
        vecs = self._vectors_of(words, norm=use_norm)
        used_words = [w for w in words if w in vecs]
        if len(used_words) != len(words):
            ignored = set(words) - set(used_words)
            log.warning("vectors for words %s are not present in the model, ignoring these words",
                        ignored)  # fmt: skip
        if not used_words:
            raise ValueError("cannot select a word from an empty list")
        vectors = np.vstack([vecs[w] for w in used_words]).astype(REAL)
        mean = self.get_mean_vector(vectors, post_normalize=True)
        dists = np.dot(vectors, mean)
        return sorted(zip(dists, used_words, strict=True), reverse=True)

    def doesnt_match(self, words):
        return self.rank_by_centrality(words)[-1][1]

    def vectors_for_all(self, keys: Iterable, allow_inference: bool = True,
                        copy_vecattrs: bool = False):  # fmt: skip
        """A gensim ``KeyedVectors`` of the given keys that exist (deduplicated, in order)."""
        from gensim.models import KeyedVectors

        uniq = list(dict.fromkeys(keys))
        vecs = self._vectors_of(uniq)
        vocab = [k for k in uniq if k in vecs]
        kv = KeyedVectors(self.vector_size, len(vocab), dtype=REAL)
        for i, key in enumerate(vocab):
            kv.add_vector(key, vecs[key])
            kv.set_vecattr(key, "count", len(vocab) - i)
            if copy_vecattrs:
                kv.set_vecattr(key, "count", self.get_vecattr(key, "count"))
        return kv

    def wmdistance(self, document1, document2, norm=True) -> float:
        """gensim's Word Mover's Distance (needs POT), on the documents' vectors only."""
        from ot import emd2  # noqa: F401  (ImportError like gensim when POT is missing)

        subset = self.vectors_for_all(list(document1) + list(document2))
        return subset.wmdistance(document1, document2, norm=norm)

    # -- vocabulary and counts --------------------------------------------------------------

    def _load_vocab(self) -> tuple[list[str], dict[str, int]]:
        info = self._current_info()
        v = self._vocab
        if v is None or v[0] != info.generation:
            with self._lock:
                v = self._vocab
                if v is None or v[0] != info.generation:
                    tokens = self._get_store().vocab(info)
                    v = (info.generation, tokens, {t: i for i, t in enumerate(tokens)})
                    self._vocab = v
        return v[1], v[2]

    @property
    def index_to_key(self) -> list[str]:
        """All tokens in model order (fetched once per generation)."""
        return self._load_vocab()[0]

    @property
    def key_to_index(self) -> dict[str, int]:
        return self._load_vocab()[1]

    def get_index(self, key, default=None) -> int:
        val = self.key_to_index.get(key, -1)
        if val >= 0:
            return val
        if isinstance(key, (int, np.integer)) and 0 <= key < len(self):
            return int(key)
        if default is not None:
            return default
        raise TokenNotFound(key, self.name, lookup=True)

    def get_vecattr(self, key, attr):
        """``"count"``: the source's count, or gensim's made-up ``count - index``."""
        index = self.get_index(key)
        if attr != "count":
            raise KeyError(attr)
        info = self._current_info()
        c = self._counts
        if c is None or c[0] != info.generation:
            c = self._counts = (info.generation, self._get_store().counts(info))
        if c[1] is None:
            return info.count - index
        return c[1][index]

    @property
    def expandos(self) -> dict[str, np.ndarray]:
        """gensim's per-key attributes: ``{"count": counts}`` in model order."""
        info = self._current_info()
        counts = self._get_store().counts(info)
        if counts is None:  # gensim's made-up counts of a file without them
            counts = np.arange(info.count, 0, -1, dtype=np.int64)
        return {"count": counts}

    @property
    def next_index(self) -> int:
        return len(self)

    mapfile_path = None  # gensim's: the file a memory-mapped load came from
    lifecycle_events: tuple = ()  # gensim's log of what made the model; none here

    def _index(self) -> SimilarityIndex:
        with self._lock:
            if self._indexes is None:
                self._indexes = IndexManager(self._get_store(), cache_dir=self.cache_dir)
        return self._indexes.get(self.name, info=self._refresh_info())

    # -- materialising ----------------------------------------------------------------------

    def to_keyedvectors(self, keys: Iterable | None = None, *, chunk: int = STREAM_CHUNK):
        """A real gensim ``KeyedVectors``: of ``keys`` (those that exist), or of the whole
        model streamed in chunks, with the source's counts (or gensim's made-up ones).

        >>> small = kv.to_keyedvectors(["king", "queen"])      # doctest: +SKIP
        """
        from gensim.models import KeyedVectors

        if keys is not None:
            return self.vectors_for_all(keys, copy_vecattrs=True)
        info = self._refresh_info()
        store = self._get_store()
        kv = KeyedVectors(info.dim, info.count, dtype=REAL)
        counts = store.counts(info)
        vocab: list[str] = []
        for tokens in store.iter_vocab(info, chunk=chunk):
            got, mat, found = self._fetch(tokens)
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
