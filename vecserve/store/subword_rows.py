"""fastText reads: a row for every word, out-of-vocabulary words composed from their
n-gram bucket rows."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import redis

from ..errors import GenerationChanged
from ..subwords import compose, in_vocabulary, ngram_buckets_flat
from .keys import MODELS, encode_tokens, ngram_key_prefix
from .lua import SUBWORD_READ
from .records import ModelInfo
from .wire import Round, Steps

__all__ = ["SubwordReads"]


class SubwordReads:
    """The :class:`~.registry.Store`'s fastText reads."""

    def read_rows_subwords(
        self, model: ModelInfo, tokens: Sequence[str]
    ) -> tuple[ModelInfo, np.ndarray, np.ndarray]:
        """``(info, rows, in_vocab)`` of a fastText model (:meth:`read_rows_subwords_steps`)."""
        return self.run(self.read_rows_subwords_steps(model, tokens))

    def read_rows_subwords_steps(
        self, model: ModelInfo, tokens: Sequence[str], *, pinned: bool = False
    ) -> Steps[tuple[ModelInfo, np.ndarray, np.ndarray]]:
        """``(info, rows, in_vocab)`` of a fastText model: a row for every token.

        An in-vocabulary word's row is its stored vector; any other word's is gensim's
        ``FastTextKeyedVectors`` vector: the float32 mean of its n-grams' bucket rows
        (zeros when it has none). One round trip with the registry entry (`read_rows`):
        the generation's vocabulary hashes (`vocab_hashes`, read once per generation)
        say which words are missing, so only their n-grams are hashed and fetched, in
        the MGET of the words. A word the hashes call present whose row is missing is a
        lost row: :class:`ModelDamaged`, never an n-gram vector (an unknown word whose
        64-bit hash equals a known one's, ~1e-13 a word at 2M words, reads as damage
        too). Generations without the hashes (loaded before they existed) read
        with `SUBWORD_READ`, or the buckets of every word. A model without n-gram
        buckets: `read_rows`. ``pinned``: as in :meth:`read_rows_steps`.
        """
        for attempt in range(2):
            if not model.subwords:
                return (yield from self.read_rows_steps(model, tokens, pinned=pinned))
            try:
                known = yield from self.vocab_hashes_steps(model)
                if known is None:
                    return (yield from self._read_rows_subwords_all(model, tokens, pinned))
                return (yield from self._read_rows_subwords_known(model, tokens, known, pinned))
            except GenerationChanged:  # a new generation with other n-gram settings
                if attempt:
                    raise
                raw = yield from self.registry_entry_steps(model.name)
                model = self.model_from_entry(model.name, raw)
        raise AssertionError("unreachable")

    def _read_rows_subwords_known(
        self, model: ModelInfo, tokens: Sequence[str], known: np.ndarray, pinned: bool
    ) -> Steps[tuple[ModelInfo, np.ndarray, np.ndarray]]:
        absent = np.flatnonzero(~in_vocabulary(known, encode_tokens(tokens)))
        flat, bounds = ngram_buckets_flat(
            [tokens[i] for i in absent], model.min_n, model.max_n, model.ngram_buckets
        )
        uniq, inverse = np.unique(flat, return_inverse=True)
        got, rows, found = yield from self.read_rows_steps(
            model, tokens, ngrams=uniq, pinned=pinned
        )
        n = len(tokens)
        mat, in_vocab = rows[:n], found[:n]
        own = {i: inverse[bounds[k] : bounds[k + 1]] for k, i in enumerate(absent.tolist())}
        oov = np.flatnonzero(~in_vocab)
        if not len(oov):
            return got, mat, in_vocab
        # every missing word is one the hashes call absent: a present word whose row is
        # missing raised ModelDamaged in read_rows, never gets an n-gram vector
        if any(i not in own for i in oov.tolist()):  # the read followed a re-load
            return (yield from self.read_rows_subwords_steps(got, tokens, pinned=pinned))
        mat = np.array(mat, copy=True)
        mat[oov] = compose(None, [own[i] for i in oov.tolist()], rows[n:])
        return got, mat, in_vocab

    def _read_rows_subwords_all(
        self, model: ModelInfo, tokens: Sequence[str], pinned: bool
    ) -> Steps[tuple[ModelInfo, np.ndarray, np.ndarray]]:
        """Every word's n-grams hashed; only the missing words' buckets read
        (`SUBWORD_READ`) where the server runs it, else all of them."""
        flat, bounds = ngram_buckets_flat(tokens, model.min_n, model.max_n, model.ngram_buckets)
        uniq, inverse = np.unique(flat, return_inverse=True)
        got, rows, found = yield from self.read_rows_steps(
            model, tokens, ngrams=uniq, needs=(inverse, bounds), pinned=pinned
        )
        n = len(tokens)
        mat, in_vocab = rows[:n], found[:n]
        oov = np.flatnonzero(~in_vocab)
        if len(oov):
            mat = np.array(mat, copy=True)
            own = [inverse[bounds[i] : bounds[i + 1]] for i in oov.tolist()]
            mat[oov] = compose(None, own, rows[n:])
        return got, mat, in_vocab

    def _fetch_subwords(
        self,
        model: ModelInfo,
        keys: list[bytes],
        ngrams: np.ndarray,
        needs: tuple[np.ndarray, np.ndarray],
        *,
        entry: bool = True,
    ) -> Steps[tuple[list[bytes | None], bytes | None] | None]:
        """`SUBWORD_READ` and (``entry``) the registry entry in one round trip; None if
        the server refused the script."""
        positions, bounds = needs
        args = [
            ngram_key_prefix(model.prefix),  # the bucket keys', bucket numbers joined in Lua
            np.asarray(ngrams, "<u4").tobytes(),
            np.asarray(positions, "<u4").tobytes(),
            np.asarray(bounds, "<u4").tobytes(),
        ]
        commands = [("EVAL_RO", SUBWORD_READ, len(keys), *keys, *args)]
        if entry:
            commands.append(("HGET", MODELS, model.name))
        what = f"reading {len(keys)} words and their n-grams of {model.name!r}"
        replies = yield Round(commands, what, tolerate=True)
        values = replies[0]
        if isinstance(values, redis.ResponseError):
            msg = str(values).lower()
            if "eval_ro" not in msg and "unknown command" not in msg:
                with self.errors(what):
                    raise values
            self.subword_script = False  # Redis < 7 or an ACL without it: MGET all
            return None
        raw = replies[1] if entry else None
        if isinstance(raw, redis.ResponseError):
            with self.errors(what):
                raise raw
        return values, raw
