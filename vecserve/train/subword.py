"""The :class:`FastText` model: fastText's subword model on vecserve's trainer.

A word's input vector is the mean of its own row and the rows of its character n-grams'
hash buckets (:mod:`vecserve.subwords` hashes them, byte-exact with fastText and gensim);
the kernels are :mod:`vecserve.train._subword`. Everything else is the word2vec
trainer's (:class:`~vecserve.train.Word2Vec`): the vocabulary and the encoded corpus,
the threads, the learning rate, progress, checkpoints.

The weights are fastText's: one input matrix ``wi`` (the words' rows, then ``bucket``
n-gram rows, all drawn uniform in ``[-1/dim, 1/dim)``) and the output rows. A word's
vector is gensim's ``FastTextKeyedVectors`` one: its row plus its n-gram rows, over their
number (:func:`vecserve.subwords.compose`); a word never seen is the mean of its n-gram
rows. :meth:`FastText.to_redis` commits both as a fastText model (served with vectors for
unseen words), :meth:`FastText.save_facebook_model` writes fastText's ``.bin``.

One loss at a time, as in fastText: negative sampling, or hierarchical softmax
(``hs=1, negative=0``).

On several MPI ranks (``comm``) it trains data-parallel as word2vec does
(:mod:`vecserve.train.distributed`): the words' rows and the output rows by frequency
rank, and the n-gram rows by the words that use them. Only the n-gram rows some
vocabulary word uses can change, so only they are synchronised, in the order of the
first word (most frequent first) that uses each: a head sync of the ``k`` most frequent
words carries their n-gram rows too (counted in ``sync_budget``), each epoch's last sync
every used n-gram row; the rest of the ``bucket`` rows (most of them on a small
vocabulary) keep their initial values on every rank and never travel.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from ..errors import TrainingError
from ..subwords import compose, ngram_buckets_flat
from . import _subword, checkpoint
from .fasttext_bin import write_fasttext_bin
from .model import Word2Vec, expose_params
from .params import SubwordParams, SyncParams, TrainParams, subword_names
from .plan import RunPlan, plan_run

__all__ = ["FastText"]


class FastText(Word2Vec):
    """fastText's subword model (skip-gram or CBOW; negative sampling or hierarchical
    softmax) trained by vecserve's kernels.

    The parameters are :class:`Word2Vec`'s (gensim's names) and ``min_n``, ``max_n``,
    ``bucket`` (:class:`~vecserve.train.params.SubwordParams`; fastText's defaults 3, 6,
    2,000,000); ``max_n=0`` trains words alone, as fastText's ``-maxn 0``. ``batch`` and
    ``cbow_batch`` do not apply.

    Examples
    --------
    >>> from vecserve.train import FastText
    >>> corpus = [["cats", "sat", "on", "the", "mat"], ["dogs", "sat", "on", "the", "rug"]] * 50
    >>> model = FastText(corpus, vector_size=16, min_count=1, epochs=2, workers=1, bucket=1000)
    >>> model.wv["cat"].shape  # a word it never saw, from its n-grams
    (16,)
    """

    wi: np.ndarray | None = None
    _buckets: tuple[np.ndarray, np.ndarray] | None = None

    def _take_params(self, params: dict[str, Any]) -> None:
        names = subword_names()
        self.subword_params = SubwordParams(**{k: v for k, v in params.items() if k in names})
        super()._take_params({k: v for k, v in params.items() if k not in names})
        if self.params.hs and self.params.negative:
            raise TrainingError(
                f"hs=1 with negative={self.params.negative}: a subword model trains one "
                "loss, as fastText: hierarchical softmax (hs=1, negative=0) or negative "
                "sampling (hs=0)",
                collective=True,
            )

    @property
    def mode(self) -> str:
        """A short name of the training mode, e.g. ``"subword-sg-neg"``."""
        p = self.params
        kind = "sg" if p.sg else ("cbow-mean" if p.cbow_mean else "cbow-sum")
        return f"subword-{kind}-{'hs' if p.hs else 'neg'}"

    def _plan_run(self) -> RunPlan:
        """Skip-gram ends at the classic final rate, as fastText's own schedule (linear
        to 0), whatever the corpus's size: the floor that short word2vec runs gain from
        (:func:`~vecserve.train.plan.min_alpha_for`) costs subword skip-gram its
        similarity. Measured (first 10 MB of wiki100m, 5 epochs, 2 threads, two runs
        each): ending at a quarter of alpha, WS-353 0.471 and 0.488, unseen-word
        Spearman 0.091 and 0.076; at 0.0001, 0.565 and 0.535, 0.132 and 0.134, analogy
        +0.6 and +1.3 points (fastText 0.527, 0.123). CBOW keeps the floor: at 0.0001 it
        lost 10.8 analogy points (29.5% -> 18.7%) and 0.021 WS-353."""
        p = self.params
        return plan_run(self.group, self.corpus.bounds, p, self.sync_params, floor=not p.sg)

    # ------------------------------------------------------------ weights

    def _init_weights(self) -> None:
        n, sub = len(self.vocab), self.subword_params
        # fastText's input matrix: the words' rows, then the n-gram rows (gensim draws
        # both the same way)
        self.wi = self._input_rows(n + (sub.bucket if sub.max_n > 0 else 0))
        self.syn0 = self.wi[:n]
        self._init_output()
        flat, bounds = ngram_buckets_flat(self.vocab.words, sub.min_n, sub.max_n, sub.bucket)
        self._ngram_ids = (flat, bounds)
        # each word's input rows, its own first (fastText's Dictionary::getSubwords)
        ptr = bounds + np.arange(n + 1, dtype=np.int64)
        rows = np.empty(len(flat) + n, np.int32)
        own = ptr[:-1]
        rows[own] = np.arange(n, dtype=np.int32)
        is_ngram = np.ones(len(rows), bool)
        is_ngram[own] = False
        rows[is_ngram] = flat.astype(np.int64) + n
        self._sub_ptr, self._sub_rows = ptr, rows
        self._buckets = None  # _bucket_order's, made on first use

    def _kernel_worker(self) -> _subword.SubwordWorker:
        p, tree = self.params, self._tree
        return _subword.SubwordWorker(
            self.wi,
            self.syn1neg,
            self._sub_ptr,
            self._sub_rows,
            self._sample_int,
            *self._alias,
            self.syn1,
            tree.codes if tree else None,
            tree.points if tree else None,
            tree.codelens if tree else None,
            sg=p.sg,
            negative=p.negative,
            window=p.window,
            cbow_mean=p.cbow_mean,
            hs=p.hs,
        )

    @property
    def vectors_ngrams(self) -> np.ndarray:
        """The n-gram bucket rows (a view of the input matrix)."""
        self._need_vocab()
        return self.wi[len(self.vocab) :]

    def word_vectors(self) -> np.ndarray:
        """Every vocabulary word's vector: its row and its n-gram rows, over their number
        (gensim's ``FastTextKeyedVectors.vectors``, bit for bit)."""
        self._need_vocab()
        flat, bounds = self._ngram_ids
        ids = np.split(flat, bounds[1:-1]) if len(self.vocab) else []
        return compose(self.syn0, ids, self.vectors_ngrams)

    def _need_vocab(self) -> None:
        if self.wi is None:
            raise TrainingError("model has no vocabulary yet")

    # ------------------------------------------------------------ syncs between ranks

    def _bucket_order(self) -> tuple[np.ndarray, np.ndarray]:
        """The n-gram rows the vocabulary uses (the only ones training changes), each
        once, ordered by the first word (most frequent first) that uses it; and how many
        of them the first ``k`` words use (``k`` = 0 .. vocabulary size).

        >>> m = FastText(min_count=1, bucket=100_000, min_n=3, max_n=3)
        >>> m.build_vocab([["abc", "abc", "bcd"]])  # "<ab" "abc" "bc>", "<bc" "bcd" "cd>"
        >>> order, used_by = m._bucket_order()
        >>> len(order), used_by.tolist()
        (6, [0, 3, 6])
        """
        if self._buckets is None:
            flat, bounds = self._ngram_ids
            buckets, first = np.unique(flat, return_index=True)
            by_use = np.argsort(first, kind="stable")
            used_by = np.searchsorted(first[by_use], bounds, side="left")
            self._buckets = (buckets[by_use].astype(np.intp), used_by.astype(np.int64))
        return self._buckets

    def _sync_matrices(self) -> list[tuple]:
        """The words' rows and output rows as word2vec's, and the n-gram rows the
        vocabulary uses, in their order of first use (never the whole bucket matrix)."""
        mats = [m for m in super()._sync_matrices() if m[0] is not None]
        order, _ = self._bucket_order()
        if len(order):
            mats.append((self.vectors_ngrams, False, order))
        return mats

    def _linked_rows(self) -> np.ndarray | None:
        """A head of ``k`` words also carries the n-gram rows they use."""
        order, used_by = self._bucket_order()
        return used_by if len(order) else None

    def _update_rates(self) -> list[np.ndarray]:
        """Word2vec's rates of the word matrices; an n-gram row's: the summed input rates
        of the words that use it."""
        rates = super()._update_rates()
        order, _ = self._bucket_order()
        if len(order):
            flat, bounds = self._ngram_ids
            per_word = np.repeat(rates[0], np.diff(bounds))
            rates.append(np.bincount(flat, per_word, minlength=len(self.vectors_ngrams))[order])
        return rates

    # ------------------------------------------------------------ checkpoints

    def _weights(self) -> dict[str, np.ndarray]:
        out = {"wi": self.wi, "syn1neg": self.syn1neg, "syn1": self.syn1}
        return {k: v for k, v in out.items() if v is not None}

    def _fingerprint(self) -> dict[str, Any]:
        fp = checkpoint.fingerprint(self.params, self.vocab.words, self.vocab.counts)
        fp["params"].update(dataclasses.asdict(self.subword_params))
        return fp

    # ------------------------------------------------------------ output

    @property
    def wv(self):
        """The vectors as gensim's ``FastTextKeyedVectors`` (a word never seen answered
        from its n-grams); the n-gram rows are shared with training."""
        self._need_vocab()
        if self._wv is None:
            from gensim.models.fasttext import FastTextKeyedVectors

            sub = self.subword_params
            kv = FastTextKeyedVectors(self.vector_size, sub.min_n, sub.max_n, sub.bucket, count=0)
            kv.index_to_key = list(self.vocab.words)
            kv.key_to_index = {w: i for i, w in enumerate(kv.index_to_key)}
            kv.vectors_vocab = self.syn0
            kv.vectors_ngrams = self.vectors_ngrams
            flat, bounds = self._ngram_ids
            kv.buckets_word = np.split(flat, bounds[1:-1]) if len(self.vocab) else []
            kv.vectors = self.word_vectors()
            kv.allocate_vecattrs(attrs=["count"], types=[np.int64])
            kv.expandos["count"][:] = self.vocab.counts
            self._wv = kv
        return self._wv

    def save_word2vec_format(self, path: str | os.PathLike, *, binary: bool = False) -> None:
        """Write the words' vectors (fastText's ``.vec`` as text) in word2vec format."""
        self._need_vocab()
        super().save_word2vec_format(path, binary=binary)

    def save_facebook_model(self, path: str | os.PathLike) -> None:
        """Write fastText's native binary model (:mod:`vecserve.train.fasttext_bin`):
        fastText's ``load_model`` and gensim's ``load_facebook_model`` read it with
        this model's vectors, for unseen words too."""
        self._need_vocab()
        p, sub = self.params, self.subword_params
        wo = self.syn1neg
        if p.hs:  # fastText's output matrix has a row per word: the inner nodes, and a 0
            wo = np.zeros((len(self.vocab), self.vector_size), np.float32)
            wo[: len(self.vocab) - 1] = self.syn1[: len(self.vocab) - 1]
        write_fasttext_bin(
            path,
            words=self.vocab.words,
            counts=self.vocab.counts,
            wi=self.wi,
            wo=wo,
            args={
                "hs": p.hs,
                "dim": self.vector_size,
                "ws": p.window,
                "epoch": p.epochs,
                "min_count": p.min_count,
                "neg": p.negative,
                "sg": p.sg,
                "bucket": len(self.wi) - len(self.vocab),
                "minn": sub.min_n,
                "maxn": sub.max_n,
                "t": p.sample,
            },
        )

    def to_redis(
        self,
        key: str,
        *,
        redis_url: str | None = None,
        codec: str = "f32",
        progress: bool | None = None,
        allow_eviction: bool = False,
    ):
        """Commit the model to Redis as fastText model *key*: the words' vectors and the
        n-gram rows, so that readers answer unseen words (as from a fastText ``.bin``)."""
        from ..loader import load_arrays

        self._need_vocab()
        sub = self.subword_params
        return load_arrays(
            self.vocab.words,
            self.word_vectors(),
            name=key,
            redis_url=redis_url,
            codec=codec,
            counts=self.vocab.counts,
            source=self.source or "vecserve train --subwords",
            progress=progress,
            allow_eviction=allow_eviction,
            subwords=(sub.min_n, sub.max_n, self.vectors_ngrams) if sub.max_n > 0 else None,
        )

    def __repr__(self) -> str:
        n = len(self.vocab) if self.vocab is not None else 0
        return f"<FastText {self.mode} vocab={n} vector_size={self.vector_size}>"


expose_params(
    FastText, {"params": TrainParams, "sync_params": SyncParams, "subword_params": SubwordParams}
)
