"""The :class:`Word2Vec` model: parameters, vocabulary, multi-threaded training, output.

Training runs ``workers`` threads, each with its own :class:`KernelWorker` (private
buffers, shared weights). The encoded corpus is cut into jobs of about ``job_words``
words; a bounded queue hands them out, ``None`` stops a thread. Each job runs in one
GIL-free kernel call, so threads truly run in parallel and update the weights with no
lock (Hogwild). The learning rate falls linearly from ``alpha`` to ``min_alpha`` over
all epochs; every job draws from its own generator seeded by ``(seed, epoch, job)``, so
``workers=1`` runs with the same seed give identical vectors.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import sys
import threading
import time
from typing import Any

import numpy as np

from ..errors import TrainingError
from . import _kernels
from ._blas import single_threaded_blas
from .corpus import Corpus, check_restartable
from .vocab import (
    alias_table,
    build_vocab,
    encode_corpus,
    huffman_tree,
    sample_thresholds,
    scan_corpus,
)

__all__ = ["Word2Vec"]

log = logging.getLogger("vecserve.train")


class Word2Vec:
    """word2vec trained by vecserve's own Cython/BLAS Hogwild kernels.

    Parameters mirror gensim's ``Word2Vec``; all but ``corpus`` are keyword-only.
    ``batch`` selects HogBatch (shared negatives, ``sgemm`` updates) for negative
    sampling: in skip-gram the contexts of a window share them; in CBOW ``cbow_batch``
    consecutive windows do. ``None`` (default) picks it where it is faster at equal
    quality on the benchmark: skip-gram yes, CBOW no.
    ``progress`` prints words/s, alpha and ETA to stderr while training.

    Examples
    --------
    >>> from vecserve.train import Word2Vec
    >>> corpus = [["cat", "sat", "on", "the", "mat"], ["dog", "sat", "on", "the", "rug"]] * 50
    >>> model = Word2Vec(corpus, vector_size=16, min_count=1, epochs=2, workers=1, seed=3)
    >>> model.wv["cat"].shape
    (16,)
    """

    def __init__(
        self,
        corpus: Corpus | None = None,
        *,
        vector_size: int = 100,
        window: int = 5,
        min_count: int = 5,
        max_vocab_size: int | None = None,
        max_final_vocab: int | None = None,
        sg: int = 0,
        hs: int = 0,
        negative: int = 5,
        ns_exponent: float = 0.75,
        cbow_mean: int = 1,
        sample: float = 1e-3,
        alpha: float = 0.025,
        min_alpha: float = 0.0001,
        epochs: int = 5,
        workers: int | None = None,
        seed: int = 1,
        batch: bool | None = None,
        cbow_batch: int = 2,
        job_words: int = 50_000,
        progress: bool = False,
    ):
        self.vector_size = vector_size
        self.window = window
        self.min_count = min_count
        self.max_vocab_size = max_vocab_size
        self.max_final_vocab = max_final_vocab
        self.sg = int(bool(sg))
        self.hs = int(bool(hs))
        self.negative = negative
        self.ns_exponent = ns_exponent
        self.cbow_mean = int(bool(cbow_mean))
        self.sample = sample
        self.alpha = alpha
        self.min_alpha = min_alpha
        self.epochs = epochs
        self.workers = workers if workers is not None else (os.cpu_count() or 1)
        self.seed = seed
        self.batch = batch
        self.cbow_batch = cbow_batch
        self.job_words = job_words
        self.progress = progress
        self._check_params()
        self.vocab = None
        self.corpus = None
        self.syn0 = self.syn1 = self.syn1neg = None
        self.train_stats: dict[str, Any] = {}
        self.source = ""
        self._wv = None
        if corpus is not None:
            self.build_vocab(corpus)
            self.train()

    # ------------------------------------------------------------ parameters

    @property
    def use_batch(self) -> bool:
        """Whether training runs the HogBatch kernel."""
        applies = self.negative > 0 and not self.hs
        return bool(applies and self.sg if self.batch is None else self.batch)

    def _check_params(self) -> None:
        def bad(name, why):
            raise TrainingError(f"{name}={getattr(self, name)!r}: {why}")

        for name in ("vector_size", "window", "epochs", "workers", "job_words", "cbow_batch"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v <= 0:
                bad(name, "must be a positive integer")
        if not isinstance(self.min_count, (int, np.integer)) or self.min_count < 0:
            bad("min_count", "must be an integer >= 0")
        if self.negative < 0 or self.negative > 1000:
            bad("negative", "must be between 0 and 1000")
        if not self.hs and not self.negative:
            bad("negative", "with hs=0 there is no objective: set negative > 0 or hs=1")
        if not self.alpha > 0:
            bad("alpha", "must be > 0")
        if not 0 <= self.min_alpha <= self.alpha:
            bad("min_alpha", f"must be between 0 and alpha={self.alpha}")
        if not self.sample >= 0:
            bad("sample", "must be >= 0")
        if self.batch and not (self.negative > 0 and not self.hs):
            bad("batch", "HogBatch needs negative > 0 and hs=0")
        if self.max_final_vocab is not None and self.max_final_vocab < 1:
            bad("max_final_vocab", "must be >= 1")
        if self.max_vocab_size is not None and self.max_vocab_size < 1:
            bad("max_vocab_size", "must be >= 1")

    # ------------------------------------------------------------ vocabulary

    def build_vocab(self, corpus: Corpus) -> None:
        """Count *corpus*, keep the vocabulary, encode the corpus into word ids."""
        if isinstance(corpus, (str, os.PathLike)):
            self.source = os.fspath(corpus)
        t0 = time.perf_counter()
        if self.max_vocab_size is None:  # one pass: count and encode together
            self.vocab, self.corpus = scan_corpus(
                corpus, min_count=self.min_count, max_final_vocab=self.max_final_vocab
            )
            t1 = time.perf_counter()
        else:  # pruning while counting: count, then encode in a second pass
            if not isinstance(corpus, (str, os.PathLike)):
                check_restartable(corpus)
            self.vocab = build_vocab(
                corpus,
                min_count=self.min_count,
                max_vocab_size=self.max_vocab_size,
                max_final_vocab=self.max_final_vocab,
            )
            t1 = time.perf_counter()
            self.corpus = encode_corpus(corpus, self.vocab)
        t2 = time.perf_counter()
        self.train_stats.update(vocab_seconds=t1 - t0, encode_seconds=t2 - t1)
        log.info(
            "vocabulary: %d words (of %d distinct) from %d tokens in %.1fs; "
            "encoded %d words in %d sentences (+%.1fs)",
            len(self.vocab), self.vocab.raw_vocab, self.vocab.raw_words, t1 - t0,
            self.corpus.n_words, self.corpus.n_sentences, t2 - t1,
        )  # fmt: skip
        self._init_weights()

    def _init_weights(self) -> None:
        n, d = len(self.vocab), self.vector_size
        rng = np.random.default_rng(self.seed)
        # uniform in [-1/d, 1/d) like gensim (word2vec.c uses half that; trains slower)
        self.syn0 = rng.random((n, d), dtype=np.float32)
        self.syn0 *= 2.0
        self.syn0 -= 1.0
        self.syn0 /= d
        self.syn1neg = np.zeros((n, d), np.float32) if self.negative else None
        self.syn1 = np.zeros((max(n - 1, 1), d), np.float32) if self.hs else None
        self._tree = huffman_tree(self.vocab.counts) if self.hs else None
        self._sample_int = sample_thresholds(self.vocab.counts, self.sample)
        self._alias = alias_table(self.vocab.counts, self.ns_exponent)
        self._wv = None

    def _kernel_worker(self) -> _kernels.KernelWorker:
        tree = self._tree
        return _kernels.KernelWorker(
            self.syn0, self.syn1, self.syn1neg, self._sample_int, *self._alias,
            tree.codes if tree else None, tree.points if tree else None,
            tree.codelens if tree else None,
            sg=self.sg, hs=self.hs, negative=self.negative, window=self.window,
            cbow_mean=self.cbow_mean, batch=int(self.use_batch), cbow_batch=self.cbow_batch,
        )  # fmt: skip

    # ------------------------------------------------------------ training

    def _jobs(self) -> list[tuple[int, int, int, int]]:
        """(first sentence, end sentence, first word, words) of each job."""
        bounds = self.corpus.bounds
        cuts = np.searchsorted(bounds, np.arange(self.job_words, bounds[-1], self.job_words))
        edges = np.unique(np.concatenate(([0], cuts, [len(bounds) - 1])))
        return [
            (int(a), int(b), int(bounds[a]), int(bounds[b] - bounds[a]))
            for a, b in itertools.pairwise(edges)
        ]

    def train(self) -> dict[str, Any]:
        """Train ``epochs`` passes over the encoded corpus; returns :attr:`train_stats`."""
        if self.corpus is None:
            raise TrainingError("no vocabulary: call build_vocab(corpus) first")
        if self.corpus.n_words < 2:
            raise TrainingError("corpus has fewer than 2 words in the vocabulary")
        jobs = self._jobs()
        n_words = self.corpus.n_words
        total = n_words * self.epochs
        kworkers = [self._kernel_worker() for _ in range(self.workers)]
        jobq: queue.Queue = queue.Queue(maxsize=2 * self.workers)
        doneq: queue.Queue = queue.Queue()
        words, bounds = self.corpus.words, self.corpus.bounds
        span = self.alpha - self.min_alpha

        def work(kw):
            while (job := jobq.get()) is not None:
                s0, s1, seed, a0, a1, n = job
                try:
                    eff = kw.train(words, bounds, s0, s1, a0, a1, seed)
                except BaseException as exc:  # reported by the main thread
                    doneq.put(exc)
                else:
                    doneq.put((n, eff))
            doneq.put(None)  # this worker is done

        stop = threading.Event()

        def produce():
            for epoch in range(self.epochs):
                for k, (s0, s1, w0, n) in enumerate(jobs):
                    p0 = (epoch * n_words + w0) / total
                    p1 = (epoch * n_words + w0 + n) / total
                    seed = _kernels.mix_seed(self.seed & (2**64 - 1), epoch, k)
                    job = (s0, s1, seed, self.alpha - span * p0, self.alpha - span * p1, n)
                    while not stop.is_set():
                        try:
                            jobq.put(job, timeout=0.1)
                            break
                        except queue.Full:
                            pass
            for _ in kworkers:
                jobq.put(None)

        threads = [threading.Thread(target=work, args=(kw,), daemon=True) for kw in kworkers]
        threads.append(threading.Thread(target=produce, daemon=True))
        done = effective = 0
        error = None
        t0 = last = time.perf_counter()
        with single_threaded_blas():
            for t in threads:
                t.start()
            finished = 0
            try:
                while finished < len(kworkers):
                    item = doneq.get()
                    if item is None:
                        finished += 1
                    elif isinstance(item, BaseException):
                        error = error or item
                        stop.set()  # no more jobs; workers finish theirs and stop
                    else:
                        done += item[0]
                        effective += item[1]
                        now = time.perf_counter()
                        if now - last >= 2.0:
                            last = now
                            self._report_progress(done, total, now - t0)
            except BaseException:  # e.g. Ctrl-C: stop handing out jobs
                stop.set()
                raise
            for t in threads:
                t.join()
        if error is not None:
            raise TrainingError(f"training failed: {error}") from error
        elapsed = time.perf_counter() - t0
        raw = self.vocab.raw_words * self.epochs
        self.train_stats.update(
            train_seconds=elapsed,
            epochs=self.epochs,
            workers=self.workers,
            mode=self.mode,
            corpus_words=self.vocab.raw_words,
            trained_words=done,
            effective_words=effective,
            words_per_second=raw / elapsed if elapsed > 0 else float("inf"),
        )
        self._wv = None
        self._say(
            f"trained {self.mode} on {raw:,} words ({effective:,} after subsampling) "
            f"in {elapsed:.1f}s: {raw / max(elapsed, 1e-9):,.0f} words/s, "
            f"{self.workers} threads"
        )
        return self.train_stats

    @property
    def mode(self) -> str:
        """A short name of the training mode, e.g. ``"sg-neg-hogbatch"``."""
        parts = ["sg" if self.sg else ("cbow-mean" if self.cbow_mean else "cbow-sum")]
        if self.hs:
            parts.append("hs")
        if self.negative:
            parts.append("neg")
        if self.use_batch:
            parts.append("hogbatch")
        return "-".join(parts)

    def _say(self, msg: str) -> None:
        log.info(msg)
        if self.progress:
            print(msg, file=sys.stderr, flush=True)

    def _report_progress(self, done: int, total: int, elapsed: float) -> None:
        frac = done / total
        rate = done / elapsed
        alpha = self.alpha - (self.alpha - self.min_alpha) * frac
        eta = (total - done) / rate if rate else float("inf")
        epoch = min(int(frac * self.epochs) + 1, self.epochs)
        self._say(
            f"epoch {epoch}/{self.epochs} {100 * frac:5.1f}%  {rate:,.0f} words/s  "
            f"alpha {alpha:.5f}  ETA {eta:.0f}s"
        )

    # ------------------------------------------------------------ output

    @property
    def wv(self):
        """The word vectors as a gensim ``KeyedVectors`` (sharing memory with training)."""
        if self.syn0 is None:
            raise TrainingError("model has no vocabulary yet")
        if self._wv is None:
            from gensim.models import KeyedVectors

            kv = KeyedVectors(self.vector_size, count=0)
            kv.index_to_key = list(self.vocab.words)
            kv.key_to_index = {w: i for i, w in enumerate(kv.index_to_key)}
            kv.vectors = self.syn0
            kv.allocate_vecattrs(attrs=["count"], types=[np.int64])
            kv.expandos["count"][:] = self.vocab.counts
            self._wv = kv
        return self._wv

    def save_word2vec_format(self, path: str | os.PathLike, *, binary: bool = False) -> None:
        """Write the vectors in word2vec text (or ``binary``) format, which gensim loads."""
        try:
            self.wv.save_word2vec_format(os.fspath(path), binary=binary)
        except OSError as exc:
            raise TrainingError(f"cannot write {path}: {exc}") from exc

    def to_redis(
        self,
        key: str,
        *,
        redis_url: str | None = None,
        codec: str = "f32",
        progress: bool | None = None,
    ):
        """Commit the vectors to Redis as model *key* (atomically, counts kept).

        Returns the committed model's metadata from :func:`vecserve.loader.load_arrays`.
        """
        from ..loader import load_arrays

        if self.syn0 is None:
            raise TrainingError("model has no vocabulary yet")
        return load_arrays(
            self.vocab.words,
            self.syn0,
            name=key,
            redis_url=redis_url,
            codec=codec,
            counts=self.vocab.counts,
            source=self.source or "vecserve train",
            progress=progress,
        )

    def __repr__(self) -> str:
        n = len(self.vocab) if self.vocab is not None else 0
        return f"<Word2Vec {self.mode} vocab={n} vector_size={self.vector_size}>"
