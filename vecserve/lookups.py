"""gensim's lookup and metadata calls, written once as steps for both clients.

:class:`~vecserve.keyedvectors.RedisKeyedVectors` and
:class:`~vecserve.keyedvectors.AsyncRedisKeyedVectors` are two drivers of the calls here:
each call is a generator method (its steps, :mod:`vecserve.store.wire`) on the model's
reader core (:mod:`vecserve.reader`), and each client class turns it into a plain method
or a coroutine of the same name. gensim's arithmetic runs on the fetched vectors, so the
answers are gensim's, bit for bit, whichever client asks.
"""

from __future__ import annotations

import functools
import logging
import os
import warnings
from collections.abc import Iterable, Sequence

import numpy as np

from . import config
from .errors import TokenNotFound
from .reader import Reader, apply_missing, check_policy, swap_oov, unit_rows
from .search.arith import NO_INPUT
from .search.snapshot import mean_vector
from .store import ModelInfo, Store
from .store.wire import Steps
from .text.query import Text, text_vectors_steps

__all__ = ["DEFAULT_CACHE_SIZE", "KEY_TYPES", "Call", "Calls"]

log = logging.getLogger("vecserve.keyedvectors")

REAL = np.float32
KEY_TYPES = (str, int, np.integer)
DEFAULT_CACHE_SIZE = 10_000


class Call:
    """A gensim call written once, as steps (a generator method; see
    :mod:`vecserve.store.wire`). Each client class turns it into a method of the same
    name: a plain one (:class:`RedisKeyedVectors`) or a coroutine
    (:class:`AsyncRedisKeyedVectors`). ``Calls.name(self, ...)`` gives the steps, for
    calls made of other calls."""

    def __init__(self, fn, *, prop: bool = False):
        self.fn = fn
        self.prop = prop
        functools.update_wrapper(self, fn)

    def __call__(self, obj, *args, **kwargs):
        return self.fn(obj, *args, **kwargs)


def _call(fn) -> Call:
    return Call(fn)


def _call_property(fn) -> Call:
    return Call(fn, prop=True)


class Calls:
    """The lookup and metadata calls of gensim's ``KeyedVectors``, once for both clients.

    Every read goes through the instance's :class:`~vecserve.reader.Reader`; a client
    subclass only supplies how steps are driven (``_wrap``) and its connections.
    """

    _reader: Reader

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for klass in reversed(cls.__mro__):
            for name, attr in vars(klass).items():
                if isinstance(attr, Call) and name not in vars(cls):
                    setattr(cls, name, cls._wrap(attr))

    @classmethod
    def _wrap(cls, call: Call):  # pragma: no cover - each client defines it
        raise NotImplementedError

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
        model_ttl: float | None = None,
    ):
        """The options every client takes (documented on each client class); the
        client's own state is made by its ``_init_state``."""
        self.name = name
        self.missing = check_policy(missing)
        self.similarity_url = config.similarity_url(similarity_url)
        self._api_key = config.api_key(api_key)  # never shown: not in repr, logs or errors
        self.cache_dir = cache_dir
        self.cache_size = (
            0 if cache is False else DEFAULT_CACHE_SIZE if cache is True else int(cache)
        )
        self.model_ttl = config.model_ttl(model_ttl)
        self._redis_url = redis_url
        self._given_store = store
        self._init_state()

    def _init_state(self) -> None:  # pragma: no cover - each client defines it
        raise NotImplementedError

    @staticmethod
    def _options_of(like: Calls) -> dict:
        """The constructor's options ``like`` was made with (its store and server aside):
        a client of another reader (a pinned view, the asyncio client's sync twin) made
        the same way."""
        return {
            "cache": like.cache_size,
            "missing": like.missing,
            "similarity_url": like.similarity_url,
            "api_key": like._api_key,
            "cache_dir": like.cache_dir,
            "model_ttl": like.model_ttl,
        }

    def _new_reader(self, store: Store) -> Reader:
        return Reader(store, self.name, ttl=self.model_ttl, cache_size=self.cache_size)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    # -- steps every call is made of ---------------------------------------------------

    def _info_steps(self, *, fresh: bool = False) -> Steps[ModelInfo]:
        return (yield from self._reader.info_steps(fresh=fresh))

    def _token_at(self, key) -> Steps[str | None]:
        """The token at position ``key`` (gensim accepts int keys as positions)."""
        if isinstance(key, (int, np.integer)):
            info = yield from self._reader.info_steps()
            if 0 <= key < info.count:
                v = self._vocab
                if v is not None and v[0] == info.generation:
                    return v[1][key]
                got = yield from self._reader.store.vocab_steps(info, int(key), int(key) + 1)
                return got[0] if got else None
        return None

    def _lookup(self, keys: Sequence) -> Steps[tuple[np.ndarray, np.ndarray]]:
        """Rows (zeros where missing) and found-mask of ``keys``; cache-aware."""
        tokens = list(keys)
        if set(map(type, tokens)) <= {str}:  # words only: no position to resolve
            want = tokens
        else:
            for i, k in enumerate(tokens):
                if not isinstance(k, str):
                    tokens[i] = yield from self._token_at(k)
            valid = [i for i, t in enumerate(tokens) if t is not None]
            want = tokens if len(valid) == len(tokens) else [tokens[i] for i in valid]
        got = yield from self._reader.lookup_steps(want)
        if want is tokens:
            return got.rows, got.found
        out = np.zeros((len(tokens), got.info.dim), dtype=REAL)
        out_found = np.zeros(len(tokens), dtype=bool)
        out[valid], out_found[valid] = got.rows, got.found
        return out, out_found

    def _vectors_of_steps(self, keys: Iterable, *, norm: bool = False) -> Steps[dict]:
        """{key: vector} of the keys found, one round trip; for gensim-style arithmetic."""
        uniq = list(dict.fromkeys(k for k in keys if isinstance(k, KEY_TYPES)))
        if not uniq:
            return {}
        mat, found = yield from self._lookup(uniq)
        out = {}
        for k, row, ok in zip(uniq, mat, found, strict=True):
            if ok:
                out[k] = row / np.linalg.norm(row[None, :], axis=1)[0] if norm else row
        return out

    def _pair(self, *words) -> Steps[dict]:
        vecs = yield from self._vectors_of_steps(words)
        for w in words:
            if w not in vecs:
                raise TokenNotFound(w, self.name, lookup=True)
        return vecs

    def _subword_terms_steps(self, positive, negative) -> Steps[tuple[list, list]]:
        """``most_similar``'s arguments with out-of-vocabulary words of a fastText model
        replaced by their unit vectors (gensim normalises each word's vector first)."""
        info = yield from self._reader.info_steps()
        if not info.subwords:
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
        if not words:
            return positive, negative
        got = yield from self._reader.lookup_steps(words)
        oov = set(got.built)
        if not oov:
            return positive, negative
        keep = [i for i, w in enumerate(words) if w in oov]
        vecs = dict(zip([words[i] for i in keep], unit_rows(got.rows[keep]), strict=True))
        return swap_oov(positive, vecs), swap_oov(negative, vecs)

    def _load_vocab(self) -> Steps[tuple[list[str], dict[str, int]]]:
        info = yield from self._reader.info_steps()
        v = self._vocab
        if v is None or v[0] != info.generation:
            tokens = yield from self._reader.store.vocab_steps(info)
            v = (info.generation, tokens, {t: i for i, t in enumerate(tokens)})
            self._vocab = v
        return v[1], v[2]

    # -- metadata (gensim API) -------------------------------------------------------------

    @_call_property
    def info(self) -> Steps[ModelInfo]:
        """Registry entry of the current generation (:class:`~vecserve.store.ModelInfo`)."""
        return (yield from self._reader.info_steps())

    @_call_property
    def vector_size(self) -> Steps[int]:
        return (yield from self._reader.info_steps()).dim

    @_call_property
    def next_index(self) -> Steps[int]:
        return (yield from self._reader.info_steps()).count

    @_call_property
    def index_to_key(self) -> Steps[list[str]]:
        """All tokens in model order (fetched once per generation)."""
        return (yield from self._load_vocab())[0]

    @_call_property
    def key_to_index(self) -> Steps[dict[str, int]]:
        return (yield from self._load_vocab())[1]

    @_call
    def get_index(self, key, default=None) -> Steps[int]:
        val = (yield from self._load_vocab())[1].get(key, -1)
        if val >= 0:
            return val
        info = yield from self._reader.info_steps()
        if isinstance(key, (int, np.integer)) and 0 <= key < info.count:
            return int(key)
        if default is not None:
            return default
        raise TokenNotFound(key, self.name, lookup=True)

    @_call
    def get_vecattr(self, key, attr):
        """``"count"``: the source's count, or gensim's made-up ``count - index``."""
        index = yield from Calls.get_index(self, key)
        if attr != "count":
            raise KeyError(attr)
        info = yield from self._reader.info_steps()
        c = self._counts
        if c is None or c[0] != info.generation:
            c = self._counts = (info.generation, (yield from self._reader.store.counts_steps(info)))
        if c[1] is None:
            return info.count - index
        return c[1][index]

    @_call_property
    def expandos(self) -> Steps[dict[str, np.ndarray]]:
        """gensim's per-key attributes: ``{"count": counts}`` in model order."""
        info = yield from self._reader.info_steps()
        counts = yield from self._reader.store.counts_steps(info)
        if counts is None:  # gensim's made-up counts of a file without them
            counts = np.arange(info.count, 0, -1, dtype=np.int64)
        return {"count": counts}

    mapfile_path = None  # gensim's: the file a memory-mapped load came from
    lifecycle_events: tuple = ()  # gensim's log of what made the model; none here

    # -- lookups (gensim API) --------------------------------------------------------------

    @_call
    def get_vector(self, key, norm: bool = False, *, missing: str | None = None):
        """The vector of ``key`` (unit length with ``norm=True``), read-only, as gensim.

        >>> kv.get_vector("king", norm=True).shape        # doctest: +SKIP
        (300,)
        """
        mat, found = yield from self._lookup([key])
        if not found[0]:
            apply_missing(self.name, [key], mat, found, missing or self.missing)
            result = np.zeros(mat.shape[1], dtype=REAL)
        elif norm:
            result = mat[0] / np.linalg.norm(mat[:1], axis=1)[0]
        else:
            result = mat[0]
        result.setflags(write=False)
        return result

    @_call
    def word_vec(self, *args, **kwargs):
        """gensim's older name of :meth:`get_vector` (deprecated there too)."""
        warnings.warn(
            "Call to deprecated `word_vec` (Use get_vector instead).", DeprecationWarning, 3
        )
        return (yield from Calls.get_vector(self, *args, **kwargs))

    @_call
    def get_vectors(self, keys: Sequence, *, norm: bool = False, missing: str | None = None):
        """Vectors of ``keys`` in one round trip, and the boolean mask of those found.

        ``missing="raise"`` raises KeyError for the first missing key, ``"zeros"`` gives
        a zero row for it, ``"skip"`` leaves its row out (use the mask to align).

        >>> vectors, found = kv.get_vectors(["king", "qwzx"], missing="skip")  # doctest: +SKIP
        >>> vectors.shape, found.tolist()                                       # doctest: +SKIP
        ((1, 300), [True, False])
        """
        keys = list(keys)
        mat, found = yield from self._lookup(keys)
        mat = apply_missing(self.name, keys, mat, found, missing or self.missing)
        if norm:
            mat = unit_rows(mat)
        return mat, found

    @_call
    def _getitem(self, key_or_keys):
        if isinstance(key_or_keys, KEY_TYPES):
            return (yield from Calls.get_vector(self, key_or_keys))
        keys = list(key_or_keys)
        if not keys:
            raise ValueError("need at least one array to concatenate")  # as numpy.vstack
        return (yield from Calls.get_vectors(self, keys))[0]

    @_call
    def built_from_subwords(self, keys: Sequence[str]) -> Steps[list[bool]]:
        """For each key: True when its vector is built from n-grams (not in the vocabulary).

        Always False for models without subwords (their unknown words have no vector).
        """
        keys = list(keys)
        info = yield from self._reader.info_steps()
        if not info.subwords or not keys:
            return [False] * len(keys)
        built = set((yield from self._reader.lookup_steps(keys)).built)
        return [k in built for k in keys]

    @_call
    def has_index_for(self, key) -> Steps[bool]:
        """Whether ``key`` is in the vocabulary (for fastText models too, as gensim)."""
        if not isinstance(key, KEY_TYPES):
            return False
        info = yield from self._reader.info_steps()
        if info.subwords:
            token = key if isinstance(key, str) else (yield from self._token_at(key))
            if token is None:
                return False
            return not (yield from self._reader.lookup_steps([token])).built
        if type(key) is str and self._reader.cached(key) is not None:
            return True
        return bool((yield from self._lookup([key]))[1][0])

    @_call
    def contains(self, key) -> Steps[bool]:
        """``key in kv``: for a fastText model with n-gram buckets, always True (gensim's
        ``FastTextKeyedVectors``: every word has a vector); else `has_index_for`."""
        if (yield from self._reader.info_steps()).subwords:
            return True
        return (yield from Calls.has_index_for(self, key))

    @_call
    def get_mean_vector(
        self, keys, weights=None, pre_normalize=True, post_normalize=False, ignore_missing=True
    ):
        """gensim's ``get_mean_vector``, with every word fetched in one round trip."""
        if len(keys) == 0:
            raise ValueError(NO_INPUT)
        if isinstance(weights, list):
            weights = np.array(weights, dtype=REAL)
        if weights is None:
            weights = np.ones(len(keys), dtype=REAL)
        if len(keys) != weights.shape[0]:
            raise ValueError("keys and weights array must have same number of elements")
        vecs = yield from self._vectors_of_steps(
            (k for k in keys if not isinstance(k, np.ndarray)), norm=pre_normalize
        )
        size = (yield from self._reader.info_steps(known=True)).dim
        return mean_vector(
            keys,
            weights,
            vecs,
            size,
            post_normalize=post_normalize,
            ignore_missing=ignore_missing,
        )

    @_call
    def similarity(self, w1, w2):
        """gensim's ``similarity``; either side may be a :class:`~vecserve.text.query.Text`
        (embedded by the model's text rule, in the same batch)."""
        from gensim import matutils

        v = yield from self._terms_of(w1, w2)
        return np.dot(matutils.unitvec(v[w1]), matutils.unitvec(v[w2]))

    def _terms_of(self, *terms) -> Steps[dict]:
        """``_pair`` where a term may be a Text: the words' vectors, then the texts'."""
        texts = [t for t in terms if isinstance(t, Text)]
        words = [t for t in terms if not isinstance(t, Text)]
        vecs = (yield from self._pair(*words)) if words else {}
        if texts:
            vecs.update((yield from text_vectors_steps(self._reader, texts)))
        return vecs

    @_call
    def distance(self, w1, w2):
        return 1 - (yield from Calls.similarity(self, w1, w2))

    @_call
    def n_similarity(self, ws1, ws2):
        from gensim import matutils

        if not (len(ws1) and len(ws2)):
            raise ZeroDivisionError("At least one of the passed list is empty.")
        mean1 = yield from Calls.get_mean_vector(self, ws1, pre_normalize=False)
        mean2 = yield from Calls.get_mean_vector(self, ws2, pre_normalize=False)
        return np.dot(matutils.unitvec(mean1), matutils.unitvec(mean2))

    @staticmethod
    def cosine_similarities(vector_1, vectors_all):
        norm = np.linalg.norm(vector_1)
        all_norms = np.linalg.norm(vectors_all, axis=1)
        return np.dot(vectors_all, vector_1) / (norm * all_norms)

    @_call
    def _distances_to(self, word_or_vector, other_words):
        words = list(other_words)
        first = [word_or_vector] if isinstance(word_or_vector, (*KEY_TYPES, Text)) else []
        vecs = yield from self._terms_of(*first, *words)
        vec = vecs[word_or_vector] if first else word_or_vector
        return 1 - self.cosine_similarities(vec, np.stack([vecs[w] for w in words]))

    @_call
    def most_similar_to_given(self, key1, keys_list):
        from gensim import matutils

        vecs = yield from self._pair(key1, *keys_list)
        v1 = matutils.unitvec(vecs[key1])
        sims = [np.dot(v1, matutils.unitvec(vecs[k])) for k in keys_list]
        return keys_list[np.argmax(sims)]

    @_call
    def rank_by_centrality(self, words, use_norm=True):
        vecs = yield from self._vectors_of_steps(words, norm=use_norm)
        used_words = [w for w in words if w in vecs]
        if len(used_words) != len(words):
            ignored = set(words) - set(used_words)
            log.warning(
                "vectors for words %s are not present in the model, ignoring these words", ignored
            )
        if not used_words:
            raise ValueError("cannot select a word from an empty list")
        vectors = np.vstack([vecs[w] for w in used_words]).astype(REAL)
        mean = yield from Calls.get_mean_vector(self, vectors, post_normalize=True)
        dists = np.dot(vectors, mean)
        return sorted(zip(dists, used_words, strict=True), reverse=True)

    @_call
    def doesnt_match(self, words):
        return (yield from Calls.rank_by_centrality(self, words))[-1][1]

    @_call
    def vectors_for_all(
        self, keys: Iterable, allow_inference: bool = True, copy_vecattrs: bool = False
    ):
        """A gensim ``KeyedVectors`` of the given keys that exist (deduplicated, in order)."""
        from gensim.models import KeyedVectors

        uniq = list(dict.fromkeys(keys))
        vecs = yield from self._vectors_of_steps(uniq)
        vocab = [k for k in uniq if k in vecs]
        size = (yield from self._reader.info_steps(known=True)).dim
        kv = KeyedVectors(size, len(vocab), dtype=REAL)
        for i, key in enumerate(vocab):
            kv.add_vector(key, vecs[key])
            kv.set_vecattr(key, "count", len(vocab) - i)
            if copy_vecattrs:
                kv.set_vecattr(key, "count", (yield from Calls.get_vecattr(self, key, "count")))
        return kv

    @_call
    def wmdistance(self, document1, document2, norm=True):
        """gensim's Word Mover's Distance (needs POT), on the documents' vectors only."""
        from ot import emd2  # noqa: F401  (ImportError like gensim when POT is missing)

        keys = list(document1) + list(document2)
        subset = yield from Calls.vectors_for_all(self, keys)
        return subset.wmdistance(document1, document2, norm=norm)
