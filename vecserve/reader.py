"""The reader core: everything a client decides when it reads a model's vectors.

:class:`Reader` is one model's read state and its decisions, shared by
:class:`~vecserve.keyedvectors.RedisKeyedVectors`,
:class:`~vecserve.keyedvectors.AsyncRedisKeyedVectors` and the HTTP service
(``vecserve/service/deps.py``). It owns:

- the **registry entry** and its TTL (:func:`vecserve.config.model_ttl`, one setting for
  every client): metadata calls re-read it when older than the TTL, row reads never wait
  for it (every read of rows carries the entry, :meth:`Store.read_rows_steps`);
- the **generation-consistent read**: rows come from :meth:`Store.read_rows_steps` /
  :meth:`Store.read_rows_subwords_steps`, labelled with the generation they were read
  from (and with the damage checks those make);
- the **vector cache** (:class:`vecserve.cache.VectorCache`) and the rule that hits and
  fetched rows of two generations are never mixed;
- the **fastText n-gram fill** (every word of a model with n-gram buckets gets a row;
  ``built`` names the words whose row was built from n-grams) and the **missing-word
  policy** (:func:`apply_missing`) and the **out-of-vocabulary swap** of ``most_similar``
  terms (:func:`swap_oov`, kept in :mod:`vecserve.subwords` so the search planner, a layer
  below, uses the same one).

It does no I/O itself: its reads are *steps* (:mod:`vecserve.store.wire`), generators
that yield the commands of each round trip and read the replies. A client only drives
them: ``store.run(reader.lookup_steps(words))`` on a sync client,
``await arun(reader.lookup_steps(words), aclient, ...)`` on ``redis.asyncio``.
Clients must not read rows or the registry around the core, keep their own registry
entry, or build or parse key names (``vecserve/store/keys.py`` does).

Pinned mode (``kv.pin()``)
--------------------------
``reader.pinned(info)`` returns a Reader of the same store and model that reads
generation ``info`` and only it: :meth:`info_steps` answers ``info`` without I/O, rows
are read with ``pinned=True`` (no registry entry in the round trip, never followed to
another generation, so a reload does not move it), and it has no vector cache (the
cache follows the live generation). Keeping the generation's keys alive (the lease in
Redis, its renewal, the release) is the pin's holder's job, not the reader's
(:class:`vecserve.store.Pin`): a client's pinned view (``client._view(reader.pinned(info))``:
same API, cache-less reads) drives every read followed by ``Pin.confirm_steps``, so a
read the pin did not live through raises PinLost instead of answering.

>>> reader = Reader(store, "GOOGLE_W2V", cache_size=10_000)   # doctest: +SKIP
>>> got = store.run(reader.lookup_steps(["king", "queen"]))   # doctest: +SKIP
>>> got.rows.shape, got.info.generation                       # doctest: +SKIP
((2, 300), 3)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from . import config
from .cache import VectorCache, stack_rows, topology, tracking_nodes
from .errors import InvalidSetting, ModelNotFound, TokenNotFound
from .store import ModelInfo, Store
from .store.layout import encode_tokens
from .store.wire import Steps
from .subwords import in_vocabulary, swap_oov, unit_rows

__all__ = [
    "MISSING_POLICIES",
    "Lookup",
    "Reader",
    "apply_missing",
    "check_policy",
    "swap_oov",
    "unit_rows",
]

REAL = np.float32
MISSING_POLICIES = ("raise", "zeros", "skip")


class Lookup(NamedTuple):
    """One lookup's answer, every row of generation ``info``."""

    info: ModelInfo
    rows: np.ndarray  # float32, zeros where not found
    found: np.ndarray  # bool; all True for a model with n-gram buckets
    built: list[str]  # the words whose rows were built from n-grams (fastText)
    hits: int  # rows served by the vector cache


class Reader:
    """One model's registry entry, vector cache and reads (see the module docstring).

    Parameters
    ----------
    store : Store
        Its state (parsed entries, vocabulary hashes) and key layout; the steps run on
        whichever client the caller drives them with.
    name : str
        The model.
    ttl : float, optional
        Seconds a registry entry serves metadata calls; default
        :func:`vecserve.config.model_ttl`.
    cache_size : int
        Vectors kept in the client-side cache (0: none).
    admit_on_repeat : bool
        The cache admits a word on its second miss (see :class:`VectorCache`).
    on_registry : callable, optional
        Called with True (entry served from memory) or False (read from Redis).
    pin : ModelInfo, optional
        Read this generation only (pinned mode).
    """

    def __init__(
        self,
        store: Store,
        name: str,
        *,
        ttl: float | None = None,
        cache_size: int = 0,
        admit_on_repeat: bool = False,
        on_registry: Callable[[bool], None] | None = None,
        pin: ModelInfo | None = None,
    ):
        self.store = store
        self.name = name
        self.ttl = config.model_ttl(ttl)
        self.cache_size = 0 if pin is not None else int(cache_size)
        self.admit_on_repeat = admit_on_repeat
        self.on_registry = on_registry
        self.pin = pin
        self._info: ModelInfo | None = pin
        self._info_time = time.monotonic()
        self._cache: VectorCache | None = None
        self._lock = threading.Lock()
        self._plain = not self.cache_size and pin is None
        #: the one-word read of the entry last seen (:meth:`Store.single_get`), where it
        #: needs nothing else (no cache, no pin, no n-grams, one server); else None. The
        #: hot path of ``kv[word]``: a None from its ``get`` leaves the answer to
        #: :meth:`lookup_steps` (a missing word, damage, a reload).
        self.single = None

    def pinned(self, info: ModelInfo) -> Reader:
        """A Reader of generation ``info`` only (pinned mode; see the module docstring)."""
        return Reader(self.store, self.name, ttl=self.ttl, pin=info)

    # -- the registry entry -------------------------------------------------------------

    @property
    def last_info(self) -> ModelInfo | None:
        """The entry last seen (no I/O); None before the first read."""
        return self._info

    def remember(self, info: ModelInfo) -> None:
        """A newer entry a read just saw: fresh from now."""
        if self.pin is None:
            self._info, self._info_time = info, time.monotonic()
            self.single = self.store.single_get(info) if self._plain else None

    def info_steps(self, *, fresh: bool = False, known: bool = False) -> Steps[ModelInfo]:
        """The registry entry: from memory while younger than ``ttl`` (``known``: any age,
        for reads that carry the entry anyway), re-read when the cache saw another
        generation, or when ``fresh``. ModelNotFound (a KeyError) if there is none."""
        info = self._info
        if self.pin is not None:
            return info
        if info is not None and not fresh:
            cache = self._cache
            stale = cache is not None and cache.ready and cache.generation != info.generation
            if not stale and (known or time.monotonic() - self._info_time <= self.ttl):
                if self.on_registry is not None:
                    self.on_registry(True)
                return info
        if self.on_registry is not None:
            self.on_registry(False)
        raw = yield from self.store.registry_entry_steps(self.name)
        try:
            info = self.store.model_from_entry(self.name, raw)
        except ModelNotFound:
            self._info = self.single = None
            raise
        self.remember(info)
        return info

    # -- the vector cache ---------------------------------------------------------------

    def cache(self) -> VectorCache | None:
        """The vector cache (made on first use, once the model is known to exist)."""
        if not self.cache_size or self._info is None:
            return self._cache
        cache = self._cache
        if cache is None:
            with self._lock:
                if self._cache is None:
                    store, name = self.store, self.name
                    self._cache = VectorCache(
                        self.cache_size,
                        nodes=tracking_nodes(store.client),
                        topology=topology(store.client),
                        read_registry=lambda: store.registry_entry(name),
                        admit_on_repeat=self.admit_on_repeat,
                        missing_keys=store.missing_keys,
                    )
                cache = self._cache
        return cache

    def cached(self, token: str) -> np.ndarray | None:
        """The cached vector of ``token`` or None: no lock, no I/O (the hot path)."""
        cache = self._cache
        if cache is None or not cache.ready:
            return None
        v = cache.data.get(token)
        if v is not None:
            try:  # noqa: SIM105  (faster than contextlib.suppress on the hit path)
                cache.data.move_to_end(token)
            except KeyError:
                pass
        return v

    def close(self) -> None:
        with self._lock:
            if self._cache is not None:
                self._cache.close()
                self._cache = None

    # -- rows ---------------------------------------------------------------------------

    def lookup_steps(self, tokens: Sequence[str]) -> Steps[Lookup]:
        """Rows of ``tokens``, cache first, all of one generation (:class:`Lookup`).

        Hits come from the cache, the rest from Redis in one round trip with the
        registry entry. When the cache's generation and the fetched one differ (a
        reload committed in between), the hits are dropped and every token is fetched.
        """
        tokens = list(tokens)
        info = yield from self.info_steps(known=True)
        if not tokens:
            return Lookup(info, np.zeros((0, info.dim), REAL), np.zeros(0, bool), [], 0)
        cache = self.cache()
        ticket, hits = cache.get_many(tokens) if cache is not None else (None, None)
        if ticket is None:
            got = yield from self._fetch_steps(info, tokens)
            return got
        todo = [i for i, v in enumerate(hits) if v is None]
        if not todo:
            info = yield from self.info_steps(known=True)
            if info.generation != ticket[1]:
                info = yield from self.info_steps(fresh=True)
            if info.generation != ticket[1]:
                return (yield from self._fetch_steps(info, tokens))
            rows = stack_rows(hits, info.dim)
            built = yield from self._built_of_hits(info, tokens)
            return Lookup(info, rows, np.ones(len(tokens), bool), built, len(tokens))
        want = [tokens[i] for i in todo]
        got = yield from self._fetch_steps(info, want, ticket=ticket)
        if got.info.generation != ticket[1]:
            return (yield from self._fetch_steps(got.info, tokens))
        if len(todo) == len(tokens):
            return got
        info = got.info
        zero = None
        for j, i in enumerate(todo):
            if got.found[j]:
                hits[i] = got.rows[j]
            else:
                zero = np.zeros(info.dim, REAL) if zero is None else zero
                hits[i] = zero
        found = np.ones(len(tokens), bool)
        found[todo] = got.found
        built = got.built
        if info.subwords:
            missed = set(todo)
            hit_words = [t for k, t in enumerate(tokens) if k not in missed]
            either = set(built).union((yield from self._built_of_hits(info, hit_words)))
            built = [t for t in tokens if t in either]
        return Lookup(info, stack_rows(hits, info.dim), found, built, len(tokens) - len(todo))

    def _fetch_steps(self, info: ModelInfo, tokens: list[str], *, ticket=None) -> Steps[Lookup]:
        """Rows of ``tokens`` from Redis (n-gram fill for fastText), the cache filled."""
        store, pinned = self.store, self.pin is not None
        try:
            if info.subwords:
                got, rows, in_vocab = yield from store.read_rows_subwords_steps(
                    info, tokens, pinned=pinned
                )
                found = np.ones(len(tokens), bool)
            else:
                got, rows, found = yield from store.read_rows_steps(info, tokens, pinned=pinned)
                in_vocab = found
        except ModelNotFound:
            self._info = self.single = None
            raise
        if got is not self._info:
            self.remember(got)
        built: list[str] = []
        fill = found
        if got.subwords:
            built = [t for t, ok in zip(tokens, in_vocab.tolist(), strict=True) if not ok]
            # built vectors are cached only where the vocabulary hashes can tell them apart
            known = yield from store.vocab_hashes_steps(got)
            if known is None:
                fill = in_vocab
        cache = self._cache
        if cache is not None and ticket is None:
            ticket = cache.ticket()
        if cache is not None:
            cache.fill(ticket, got.generation, tokens, rows, fill)
        return Lookup(got, rows, found, built, 0)

    def _built_of_hits(self, info: ModelInfo, words: list[str]) -> Steps[list[str]]:
        """Which cached words of a fastText generation were built from n-grams."""
        if not info.subwords or not words:
            return []
        known = yield from self.store.vocab_hashes_steps(info)
        if known is None:  # only vocabulary words were cached
            return []
        mask = in_vocabulary(known, encode_tokens(words))
        return [w for w, ok in zip(words, mask.tolist(), strict=True) if not ok]


# -- the policies every client shares ---------------------------------------------------


def check_policy(policy: str) -> str:
    """``policy`` if it is one of :data:`MISSING_POLICIES`, else ValueError."""
    if policy not in MISSING_POLICIES:
        raise InvalidSetting(f"missing must be one of {MISSING_POLICIES}, got {policy!r}")
    return policy


def apply_missing(
    name: str, keys: Sequence, rows: np.ndarray, found: np.ndarray, policy: str
) -> np.ndarray:
    """The rows a lookup answers under ``policy``: ``"raise"``: TokenNotFound (a
    KeyError, gensim's message) naming the first missing key; ``"zeros"``: the zero rows
    as they are; ``"skip"``: the missing keys' rows left out.

    >>> apply_missing("M", ["a", "b"], np.ones((2, 1)), np.array([True, False]), "skip")
    array([[1.]])
    """
    check_policy(policy)
    if found.all():
        return rows
    if policy == "raise":
        first = next(k for k, ok in zip(keys, found.tolist(), strict=True) if not ok)
        raise TokenNotFound(first, name, lookup=True)
    return rows[found] if policy == "skip" else rows
