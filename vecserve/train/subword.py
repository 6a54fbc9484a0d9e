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
(``hs=1, negative=0``). Not yet: training on several MPI ranks (refused with a
:class:`~vecserve.errors.TrainingError`).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from typing import Any

import numpy as np

from ..errors import TrainingError
from ..subwords import compose, ngram_buckets_flat
from . import _subword, checkpoint
from .corpus import Corpus
from .fasttext_bin import write_fasttext_bin
from .model import Word2Vec, _param_property
from .params import SubwordParams, SyncParams, TrainParams, subword_names
from .vocab import alias_table, huffman_tree, sample_thresholds

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

    def __init__(
        self,
        corpus: Corpus | None = None,
        *,
        comm: Any = None,
        progress: bool = False,
        checkpoint_dir: str | os.PathLike | None = None,
        resume: bool = False,
        **params: Any,
    ):
        names = subword_names()
        self.subword_params = SubwordParams(**{k: v for k, v in params.items() if k in names})
        rest = {k: v for k, v in params.items() if k not in names}
        super().__init__(
            None,
            comm=comm,
            progress=progress,
            checkpoint_dir=checkpoint_dir,
            resume=resume,
            **rest,
        )
        if self.params.hs and self.params.negative:
            raise TrainingError(
                f"hs=1 with negative={self.params.negative}: a subword model trains one "
                "loss, as fastText: hierarchical softmax (hs=1, negative=0) or negative "
                "sampling (hs=0)",
                collective=True,
            )
        if self.group.size > 1:
            raise TrainingError(
                "subword (fastText) training on several MPI ranks is not supported yet: "
                "run it as one process (its threads use every core)",
                collective=True,
            )
        self.wi = None
        if corpus is not None:
            self.build_vocab(corpus)
            self.train()

    @property
    def mode(self) -> str:
        """A short name of the training mode, e.g. ``"subword-sg-neg"``."""
        p = self.params
        kind = "sg" if p.sg else ("cbow-mean" if p.cbow_mean else "cbow-sum")
        return f"subword-{kind}-{'hs' if p.hs else 'neg'}"

    # ------------------------------------------------------------ weights

    def _init_weights(self) -> None:
        n, d, sub = len(self.vocab), self.vector_size, self.subword_params
        buckets = sub.bucket if sub.max_n > 0 else 0
        rng = np.random.default_rng(self.seed)
        # fastText's input matrix: the words' rows, then the n-gram rows, uniform in
        # [-1/d, 1/d) (gensim draws both the same way)
        self.wi = rng.random((n + buckets, d), dtype=np.float32)
        self.wi *= 2.0
        self.wi -= 1.0
        self.wi /= d
        self.syn0 = self.wi[:n]
        self.syn1neg = np.zeros((n, d), np.float32) if self.negative else None
        self.syn1 = np.zeros((max(n - 1, 1), d), np.float32) if self.hs else None
        self._tree = huffman_tree(self.vocab.counts) if self.hs else None
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
        self._sample_int = sample_thresholds(self.vocab.counts, self.sample)
        self._alias = alias_table(self.vocab.counts, self.ns_exponent)
        self._wv = None

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


for _f in dataclasses.fields(SubwordParams):
    setattr(FastText, _f.name, _param_property("subword_params", _f.name, _f.metadata["help"]))
FastText.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        *list(inspect.signature(FastText.__init__).parameters.values())[1:-1],
        *(
            inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default)
            for cls in (TrainParams, SyncParams, SubwordParams)
            for f in dataclasses.fields(cls)
        ),
    ]
)
