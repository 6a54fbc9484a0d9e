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

import collections
import contextlib
import hashlib
import itertools
import json
import logging
import os
import queue
import sys
import threading
import time
import zipfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import TrainingError
from . import _kernels
from ._blas import single_threaded_blas
from .corpus import Corpus, check_restartable, shard_corpus
from .distributed import (
    SYNC_DTYPES,
    Exchange,
    Group,
    Synchronizer,
    head_for_budget,
    sync_rows,
    tier_tables,
)
from .vocab import (
    alias_table,
    build_vocab,
    count_corpus,
    count_pruned,
    encode_corpus,
    finish_vocab,
    huffman_tree,
    merge_counts,
    prune_counts,
    sample_thresholds,
    scan_corpus,
)

__all__ = ["Word2Vec"]

#: A warm-up's groups are cut into this many: syncs that often in the first epoch's start.
WARMUP_PARTS = 4

#: ``sync_min_per_epoch`` never cuts a rank's epoch into groups smaller than this.
MIN_SYNC_WORDS = 1000

log = logging.getLogger("vecserve.train")


class Word2Vec:
    """word2vec trained by vecserve's own Cython/BLAS Hogwild kernels.

    Parameters mirror gensim's ``Word2Vec``; all but ``corpus`` are keyword-only.
    ``batch`` selects HogBatch's shared negatives for negative sampling: in skip-gram
    the contexts of a window share them (updated pair after pair); in CBOW
    ``cbow_batch`` consecutive windows do (``sgemm`` updates). ``None`` (default) picks
    it where it is faster at equal quality on the benchmark: skip-gram yes, CBOW no.
    ``progress`` prints words/s, alpha and ETA to stderr while training.

    ``comm`` (an ``mpi4py`` communicator, e.g. ``MPI.COMM_WORLD``, or a
    :class:`~vecserve.train.distributed.Group`) trains data-parallel across its ranks:
    each reads its share of the corpus and they combine their changes every
    ``sync_words`` words a rank trains, and at least ``sync_min_per_epoch`` times an
    epoch (short epochs sync more often; groups of at least 1,000 words; see
    :mod:`vecserve.train.distributed`;
    ``sync_cap`` and ``sync_coherent`` say how). ``sync_budget`` bounds the bytes each
    rank sends per epoch, in float32 models (each epoch's last sync, the whole model,
    included); ``sync_dtype`` is the changes' precision on the wire (``"int16"``: half
    the bytes of ``"float32"``, so twice the rows within the budget; ``"int8"``: a
    quarter, for up to 31 ranks);
    ``sync_schedule`` picks which rows each sync carries (``"doubling"``: by frequency
    rank; ``"rates"``: by expected updates); ``sync_warmup`` syncs the first epoch's
    first share 4x as often; ``sync_scale_alpha`` (a power; 0: off) starts the
    learning rate at :attr:`start_alpha`; ``overlap`` runs each sync's exchange while
    the next words train, and ``sync_depth`` exchanges may be under way at once (each
    is applied ``sync_depth`` groups after it was taken: a rank a little behind the
    others holds them up less).
    ``checkpoint_dir`` saves the model after every epoch; ``resume`` continues from the
    checkpoint there.

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
        comm: Any = None,
        sync_words: int = 50_000,
        sync_budget: float = 2.0,
        sync_cap: float = 2.0,
        sync_coherent: bool = True,
        sync_dtype: str = "int16",
        sync_schedule: str = "doubling",
        sync_warmup: float = 0.25,
        sync_scale_alpha: float = 0.8,
        sync_min_per_epoch: int = 128,
        overlap: bool = True,
        sync_depth: int = 1,
        checkpoint_dir: str | os.PathLike | None = None,
        resume: bool = False,
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
        self.workers = workers if workers is not None else usable_cores()
        self.seed = seed
        self.batch = batch
        self.cbow_batch = cbow_batch
        self.job_words = job_words
        self.progress = progress
        self.group = comm if isinstance(comm, Group) else Group(comm)
        self.sync_words = sync_words
        self.sync_budget = sync_budget
        self.sync_cap = sync_cap
        self.sync_coherent = sync_coherent
        self.sync_dtype = sync_dtype
        self.sync_schedule = sync_schedule
        self.sync_warmup = sync_warmup
        self.sync_scale_alpha = sync_scale_alpha
        self.sync_min_per_epoch = sync_min_per_epoch
        self.overlap = overlap
        self.sync_depth = sync_depth
        self.checkpoint_dir = checkpoint_dir
        self.resume = resume
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
    def start_alpha(self) -> float:
        """The learning rate training starts from: ``alpha``, x ``(N / min(N,
        sync_cap)) ** sync_scale_alpha`` on N ranks. The capped gain moves a row that all
        N ranks changed by ``min(N, cap) / N`` of their summed changes; the full
        compensation (power 1) is what the plain sum would do, without its collapse at
        4 ranks. Measured (BENCHMARKS.md): power 0.8 beat the square root by 0.6-1.1
        analogy points at 4 ranks and 1.9 at 8, and power 1 by 1.2 at 8; at 2 ranks
        (cap 2) the factor is 1 whatever the power.

        >>> Word2Vec(alpha=0.025, comm=None).start_alpha
        0.025
        """
        n = self.group.size
        if n == 1 or not self.sync_scale_alpha:
            return self.alpha
        return self.alpha * float((n / min(n, self.sync_cap)) ** self.sync_scale_alpha)

    @property
    def use_batch(self) -> bool:
        """Whether training runs the HogBatch kernel."""
        applies = self.negative > 0 and not self.hs
        return bool(applies and self.sg if self.batch is None else self.batch)

    def _check_params(self) -> None:
        def bad(name, why):
            raise _collective(TrainingError(f"{name}={getattr(self, name)!r}: {why}"))

        def whole(v) -> bool:
            return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

        for name in ("vector_size", "window", "epochs", "workers", "job_words", "cbow_batch",
                     "sync_words"):  # fmt: skip
            v = getattr(self, name)
            if not whole(v) or v <= 0:
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
        if not self.sync_budget > 0:
            bad("sync_budget", "must be > 0")
        if not self.sync_cap >= 1:
            bad("sync_cap", "must be >= 1 (1: average the ranks' changes)")
        if not 0 <= self.sync_scale_alpha <= 2:
            bad("sync_scale_alpha", "must be a power between 0 (off) and 2")
        if not whole(self.sync_min_per_epoch) or self.sync_min_per_epoch < 0:
            bad("sync_min_per_epoch", "must be an integer >= 0 (0: sync_words alone)")
        if not whole(self.sync_depth) or self.sync_depth < 1:
            bad("sync_depth", "must be an integer >= 1")
        if not 0 <= self.sync_warmup <= 1:
            bad("sync_warmup", "must be a fraction of the first epoch, between 0 and 1")
        if self.sync_dtype not in SYNC_DTYPES:
            bad("sync_dtype", f"must be one of {', '.join(SYNC_DTYPES)}")
        if self.sync_schedule not in ("doubling", "rates"):
            bad("sync_schedule", "must be 'doubling' or 'rates'")
        if self.resume and not self.checkpoint_dir:
            bad("resume", "needs checkpoint_dir")

    # ------------------------------------------------------------ vocabulary

    def build_vocab(self, corpus: Corpus) -> None:
        """Count *corpus*, keep the vocabulary, encode the corpus into word ids.

        With several ranks each counts and encodes its own share, and all get the
        vocabulary of the whole corpus (see :mod:`vecserve.train.distributed`).
        """
        if isinstance(corpus, (str, os.PathLike)):
            self.source = os.fspath(corpus)
        t0 = time.perf_counter()
        if self.group.size > 1:
            self.vocab, encode = self._merged_vocab(corpus)
            t1 = time.perf_counter()
            self.corpus = encode()
        elif self.max_vocab_size is None:  # one pass: count and encode together
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
            "encoded %d words in %d sentences (+%.1fs)%s",
            len(self.vocab), self.vocab.raw_vocab, self.vocab.raw_words, t1 - t0,
            self.corpus.n_words, self.corpus.n_sentences, t2 - t1,
            f" on rank {self.group.rank} of {self.group.size}" if self.group.size > 1 else "",
        )  # fmt: skip
        self._init_weights()

    def _shard(self, corpus: Corpus):
        """This rank's share of *corpus* (a path, or a list of token lists)."""
        g = self.group
        if isinstance(corpus, (str, os.PathLike)):
            return shard_corpus(corpus, g.rank, g.size)
        if isinstance(corpus, Sequence) and not isinstance(corpus, (str, bytes)):
            n = len(corpus)
            return corpus[n * g.rank // g.size : n * (g.rank + 1) // g.size]
        raise _collective(
            TrainingError(
                "with several ranks the corpus must be a path or a list of token lists "
                f"(each rank takes its share), not {type(corpus).__name__}"
            )
        )

    def _merged_vocab(self, corpus: Corpus):
        """Count this rank's share, merge all ranks' counts on rank 0, share the result.

        Returns the vocabulary and a function that encodes this rank's share with it.
        """
        g = self.group
        shard = self._shard(corpus)
        if self.max_vocab_size is None:
            scan = count_corpus(shard)
            mine = (scan.keys, scan.counts, scan.raw)
        else:  # gensim's pruning, on each rank's share, then once more on the merge
            scan = None
            mine = count_pruned(shard, self.max_vocab_size)
        counted = g.gather(mine)
        result: Any = None
        if g.rank == 0:
            try:
                keys, counts, raw = merge_counts(counted)
                if self.max_vocab_size is not None:
                    keys, counts = prune_counts(keys, counts, self.max_vocab_size)
                vocab = finish_vocab(
                    keys, counts, raw,
                    min_count=self.min_count, max_final_vocab=self.max_final_vocab,
                )  # fmt: skip
                vocab.order = None
                result = vocab
            except TrainingError as exc:
                result = str(exc)
        result = g.bcast(result)
        if isinstance(result, str):
            raise _collective(TrainingError(result))
        vocab = result
        if scan is not None:
            return vocab, lambda: scan.encode(scan.remap_to(vocab))
        return vocab, lambda: encode_corpus(shard, vocab, exact=False)

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

    def _jobs(self, extra_cuts=(), size: int = 0) -> list[tuple[int, int, int, int]]:
        """(first sentence, end sentence, first word, words) of each job: about *size*
        (default ``job_words``) words, also cut at the words *extra_cuts* (at sentence
        ends)."""
        bounds = self.corpus.bounds
        size = size or self.job_words
        at = np.arange(size, bounds[-1], size)
        cuts = np.searchsorted(bounds, np.concatenate((at, np.asarray(extra_cuts, np.int64))))
        edges = np.unique(np.concatenate(([0], cuts, [len(bounds) - 1])))
        return [
            (int(a), int(b), int(bounds[a]), int(bounds[b] - bounds[a]))
            for a, b in itertools.pairwise(edges)
            if b > a
        ]

    def _groups(self, split: int = 0) -> list[list[tuple[int, int, int, int]]]:
        """This rank's jobs cut into the epoch's sync groups (the same number on every
        rank: the most any rank needs at ``sync_words`` words a group); the first
        *split* groups cut again into ``WARMUP_PARTS`` (a warm-up: more frequent syncs)."""
        n_words = self.corpus.n_words
        n_groups = 1
        if self.group.size > 1:  # every sync_words, and short epochs sync_min_per_epoch times
            n_groups = max(-(-n_words // self.sync_words),
                           min(self.sync_min_per_epoch, n_words // MIN_SYNC_WORDS))  # fmt: skip
        n_groups = max(1, int(self.group.max(n_groups)))
        split = min(split, n_groups)
        parts = WARMUP_PARTS
        cuts = [
            (i * parts + q) * n_words // (n_groups * parts)
            for i in range(split)
            for q in range(1, parts + 1)
        ]
        groups: list[list] = [[] for _ in range(split * parts + n_groups - split)]
        # every thread needs work in each group (the threads meet at its end): two jobs a
        # thread (one job for one thread), or as near as whole sentences allow (a
        # 50,000-word group was one job, so a rank of T threads trained on one of them)
        per_group = 2 * self.workers if self.workers > 1 else 1
        size = min(self.job_words, max(1, n_words // (n_groups * per_group)))
        for job in self._jobs(cuts, size):
            x = job[2] * n_groups * parts // max(n_words, 1)  # in parts of a group
            i = x if x < split * parts else split * parts + x // parts - split
            groups[min(i, len(groups) - 1)].append(job)
        return groups

    def _plan(self, split: int = 0) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
        """The sync groups, this rank's words in each, all ranks' words in each (the
        global word count the learning rate follows, known in advance) and where
        each group starts in the global count."""
        groups = self._groups(split)
        mine = np.array([sum(j[3] for j in grp) for grp in groups], np.int64)
        global_words = self.group.allreduce(mine.copy())
        starts = np.concatenate(([0], np.cumsum(global_words)))
        return groups, mine, global_words, starts

    def train(self) -> dict[str, Any]:
        """Train ``epochs`` passes over the encoded corpus; returns :attr:`train_stats`.

        With several ranks (``comm``), every rank calls this; all of them end with the
        same model.
        """
        if self.corpus is None:
            raise TrainingError("no vocabulary: call build_vocab(corpus) first")
        if self.group.size == 1 and self.corpus.n_words < 2:
            raise TrainingError("corpus has fewer than 2 words in the vocabulary")
        g = self.group
        cores = usable_cores()
        if g.size > 1 and self.workers > cores and g.rank == 0:
            self._say(
                f"warning: each rank runs {self.workers} training threads but may use "
                f"{cores} core(s): mpiexec binds ranks to cores; give it --bind-to none, "
                f"or --map-by slot:PE={self.workers}",
                level=logging.WARNING,
            )
        plan = self._plan()
        groups = plan[0]
        epoch_words = int(plan[2].sum())
        if epoch_words < 2:
            raise _collective(TrainingError("corpus has fewer than 2 words in the vocabulary"))
        warm = None  # the first epoch's plan with a warm-up
        if g.size > 1 and self.sync_warmup > 0:
            warm = self._plan(max(1, round(self.sync_warmup * len(groups))))
        total = epoch_words * self.epochs
        alpha = self.start_alpha
        span = alpha - self.min_alpha
        sync = None
        head = len(self.vocab)
        if g.size > 1:
            mats = [(self.syn0, False), (self.syn1neg, False), (self.syn1, True)]
            depth = self.sync_depth if self.overlap else 1
            sync = Synchronizer(g, mats, cap=self.sync_cap, coherent=self.sync_coherent,
                                dtype=self.sync_dtype, depth=depth)  # fmt: skip
            rows_budget = self._head_budget(sync)
            syncs = [len(groups)] * self.epochs  # per epoch, a warm-up's first epoch more
            if warm is not None:
                syncs[0] = len(warm[0])
            head = head_for_budget(len(self.vocab), syncs, rows_budget)
            if self.sync_schedule == "rates":
                tables = tier_tables(self._update_rates(), syncs, rows_budget)
                head = int(tables[0][0])

                def rows_at(k):
                    tz = (k & -k).bit_length() - 1
                    return [int(t[min(tz, len(t) - 1)]) for t in tables]
            else:

                def rows_at(k):
                    return sync_rows(k, head=head, n_rows=sync.n_rows)

        first_epoch = self._load_checkpoint(sync) if self.resume else 0

        def job_args(epoch, k, grp_i, job, offset, grp_local):
            s0, s1, _, n = job
            _, _, global_words, starts = epoch_plan
            frac0 = offset / grp_local if grp_local else 0.0
            frac1 = (offset + n) / grp_local if grp_local else 0.0
            at = epoch * epoch_words + starts[grp_i]
            p0 = (at + frac0 * global_words[grp_i]) / total
            p1 = (at + frac1 * global_words[grp_i]) / total
            seed = _kernels.mix_seed(self.seed & (2**64 - 1), epoch, k)
            return (s0, s1, seed, alpha - span * p0, alpha - span * p1, n)

        stats = _Progress(self, total, first_epoch * epoch_words)
        pool = _Pool([self._kernel_worker() for _ in range(self.workers)], self.corpus)
        pending: collections.deque[Exchange] = collections.deque()  # oldest first
        t0 = time.perf_counter()
        with single_threaded_blas(), pool:
            for epoch in range(first_epoch, self.epochs):
                k = n_sync = 0  # the schedule restarts after each epoch's full sync
                epoch_plan = warm if warm is not None and epoch == 0 else plan
                groups, mine, _, starts = epoch_plan
                for grp_i, grp in enumerate(groups):
                    grp_local = int(mine[grp_i])
                    batch, offset = [], 0
                    for job in grp:
                        batch.append(job_args(epoch, k, grp_i, job, offset, grp_local))
                        offset += job[3]
                        k += 1
                    pool.run(batch, stats)
                    stats.global_done = epoch * epoch_words + int(starts[grp_i + 1])
                    if sync is None:
                        continue
                    last = grp_i == len(groups) - 1
                    while pending and (last or len(pending) >= sync.depth):
                        done = pending.popleft()  # the oldest exchange, overlapped
                        stats.stall += done.wait()
                        sync.apply(done.payload)
                    if last:  # the epoch ends: the whole model
                        t_s = time.perf_counter()
                        sync.sync(sync.n_rows)
                        waited = time.perf_counter() - t_s
                        stats.stall += waited
                        stats.stall_full += waited
                    else:
                        n_sync += 1
                        payload = sync.snapshot(rows_at(n_sync))
                        if self.overlap:
                            after = pending[-1] if pending else None  # one at a time
                            pending.append(Exchange(sync, payload, after))
                        else:
                            t_s = time.perf_counter()
                            sync.exchange(payload)
                            sync.apply(payload, exact=True)
                            stats.stall += time.perf_counter() - t_s
                    stats.report()
                if self.checkpoint_dir:
                    self._save_checkpoint(epoch + 1)
        elapsed = time.perf_counter() - t0
        trained = total - first_epoch * epoch_words
        effective = int(g.allreduce(np.array([stats.effective], np.int64))[0])
        raw = self.vocab.raw_words * (self.epochs - first_epoch)
        self.train_stats.update(
            train_seconds=elapsed,
            epochs=self.epochs,
            first_epoch=first_epoch,
            workers=self.workers,
            ranks=g.size,
            mode=self.mode,
            corpus_words=self.vocab.raw_words,
            trained_words=trained,
            effective_words=effective,
            words_per_second=raw / elapsed if elapsed > 0 else float("inf"),
        )
        if sync is not None:
            self.train_stats.update(
                syncs=sync.syncs,
                sync_head=head,
                sync_stall_seconds=stats.stall,
                sync_full_seconds=stats.stall_full,
                sync_share=stats.stall / elapsed if elapsed > 0 else 0.0,
                bytes_sent=g.bytes_sent,
                model_bytes=sync.model_bytes,
            )
        self._wv = None
        where = f"{self.workers} thread{'s' if self.workers != 1 else ''}"
        if g.size > 1:
            where = (
                f"{g.size} ranks x {where}, {100 * stats.stall / elapsed:.0f}% "
                f"waiting on {sync.syncs} syncs, {_size(g.bytes_sent)} sent by this rank"
            )
        self._say(
            f"trained {self.mode} on {raw:,} words ({effective:,} after subsampling) "
            f"in {elapsed:.1f}s: {raw / max(elapsed, 1e-9):,.0f} words/s, {where}"
        )
        return self.train_stats

    def _head_budget(self, sync: Synchronizer) -> float:
        """The head syncs' rows per epoch, in models, that keep each rank's bytes sent
        per epoch within ``sync_budget`` float32 models: each row costs its columns
        (the change, the touch count, the squared norm) in the payload's precision, x a
        ring allreduce's ``2 (N-1) / N``; each epoch's last sync carries the whole model."""
        n = self.group.size
        per_model = 2 * (n - 1) / n * sync.row_bytes(self.vector_size) / (4 * self.vector_size)
        head = self.sync_budget / per_model - 1.0
        if head <= 0:
            raise _collective(
                TrainingError(
                    f"sync_budget={self.sync_budget!r}: each epoch's whole-model sync alone "
                    f"sends {per_model:.2f} models a rank at {n} ranks; give more"
                )
            )
        return head

    def _update_rates(self) -> list[np.ndarray]:
        """Each synchronised matrix's rows' expected updates per word trained, most
        frequent row first: a word's kept frequency (after subsampling) for its input
        vector, plus ``negative`` x its noise probability for its output weights; a
        Huffman node's, the kept frequency of the words below it."""
        counts = self.vocab.counts.astype(np.float64)
        kept = counts * (self._sample_int / float(2**32 - 1))
        kept /= max(kept.sum(), 1e-300)
        rates = [kept]
        if self.syn1neg is not None:
            noise = counts**self.ns_exponent
            rates.append(kept + self.negative * noise / noise.sum())
        if self.syn1 is not None:
            t = self._tree
            on_path = np.arange(t.points.shape[1]) < t.codelens[:, None]
            node = np.zeros(len(self.syn1))
            np.add.at(
                node, t.points[on_path], np.broadcast_to(kept[:, None], on_path.shape)[on_path]
            )
            rates.append(node[::-1])  # the tree's top nodes are its last rows
        return rates

    # ------------------------------------------------------------ checkpoints

    def _fingerprint(self) -> dict[str, Any]:
        """What a checkpoint must match to be resumed: the parameters and vocabulary."""
        h = hashlib.sha256()
        h.update("\n".join(self.vocab.words).encode())
        h.update(np.ascontiguousarray(self.vocab.counts).tobytes())
        params = {
            k: getattr(self, k)
            for k in ("vector_size", "window", "sg", "hs", "negative", "ns_exponent",
                      "cbow_mean", "sample", "alpha", "min_alpha", "epochs", "seed")
        }  # fmt: skip
        return {"params": params, "vocab_sha256": h.hexdigest()}

    def _checkpoint_path(self) -> str:
        return os.path.join(os.fspath(self.checkpoint_dir), "vecserve-w2v-checkpoint.npz")

    def _save_checkpoint(self, epochs_done: int) -> None:
        """Rank 0 writes the model after *epochs_done* epochs (atomically: a temporary
        file renamed over the previous checkpoint)."""
        if self.group.rank != 0:
            return
        path = self._checkpoint_path()
        meta = dict(self._fingerprint(), epochs_done=epochs_done, ranks=self.group.size)
        arrays = {"syn0": self.syn0}
        if self.syn1neg is not None:
            arrays["syn1neg"] = self.syn1neg
        if self.syn1 is not None:
            arrays["syn1"] = self.syn1
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            os.makedirs(os.fspath(self.checkpoint_dir), exist_ok=True)
            with open(tmp, "wb") as fh:
                np.savez(fh, meta=np.array(json.dumps(meta)), **arrays)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise TrainingError(f"cannot write checkpoint {path}: {exc}") from exc
        self._say(f"checkpoint: {epochs_done}/{self.epochs} epochs saved to {path}")

    def _load_checkpoint(self, sync) -> int:
        """Epochs already done per the checkpoint (0: none); loads its weights on all
        ranks (rank 0 reads the file and sends them)."""
        g = self.group
        answer: Any = 0
        if g.rank == 0:
            answer = self._read_checkpoint()
        answer = g.bcast(answer if isinstance(answer, (int, str)) else answer[0])
        if isinstance(answer, str):
            raise _collective(TrainingError(answer))
        if answer:
            for m in (self.syn0, self.syn1neg, self.syn1):
                if m is not None:
                    g.bcast_array(m)
            if sync is not None:
                sync.reset()
            self._say(f"resuming after epoch {answer}/{self.epochs} from {self._checkpoint_path()}")
        return int(answer)

    def _read_checkpoint(self):
        path = self._checkpoint_path()
        if not os.path.exists(path):
            self._say(f"no checkpoint at {path}: starting from the first epoch")
            return 0
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                want = self._fingerprint()
                for k in ("params", "vocab_sha256"):
                    if meta.get(k) != want[k]:
                        what = "parameters" if k == "params" else "vocabulary"
                        return (
                            f"checkpoint {path} was written with other {what}; "
                            "resume with the same corpus and options, or delete it"
                        )
                for name in ("syn0", "syn1neg", "syn1"):
                    m = getattr(self, name)
                    if m is None:
                        continue
                    if name not in z or z[name].shape != m.shape:
                        return f"checkpoint {path}: {name} is missing or has the wrong shape"
                    np.copyto(m, z[name])
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            return f"checkpoint {path} is unreadable: {exc}"
        return (int(meta["epochs_done"]),)

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

    def _say(self, msg: str, level: int = logging.INFO) -> None:
        log.log(level, msg)
        if self.progress:
            print(msg, file=sys.stderr, flush=True)

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


def _collective(exc: TrainingError) -> TrainingError:
    """Mark an error every rank raises alike (the CLI prints it on rank 0 only)."""
    exc.collective = True
    return exc


def _size(n: float) -> str:
    """
    >>> _size(123), _size(5.5e6), _size(3.2e9)
    ('123 B', '5.5 MB', '3.2 GB')
    """
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: what mpiexec's binding or
    ``taskset`` left it), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class _Pool:
    """The training threads, each running jobs on its own :class:`KernelWorker`.

    :meth:`run` hands out a list of jobs and returns when all are trained (a sync point
    needs every thread stopped); the threads live from ``__enter__`` to ``__exit__``.
    """

    def __init__(self, kworkers: list, corpus):
        self.words, self.bounds = corpus.words, corpus.bounds
        self.jobq: queue.SimpleQueue = queue.SimpleQueue()
        self.doneq: queue.SimpleQueue = queue.SimpleQueue()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._work, args=(kw,), daemon=True)
                        for kw in kworkers]  # fmt: skip

    def __enter__(self) -> _Pool:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()  # queued jobs are skipped
        for _ in self.threads:
            self.jobq.put(None)
        for t in self.threads:
            t.join()

    def _work(self, kw) -> None:
        while (job := self.jobq.get()) is not None:
            if self.stop.is_set():
                self.doneq.put(None)
                continue
            s0, s1, seed, a0, a1, n = job
            try:
                eff = kw.train(self.words, self.bounds, s0, s1, a0, a1, seed)
            except BaseException as exc:  # reported by the main thread
                self.doneq.put(exc)
            else:
                self.doneq.put((n, eff))

    def run(self, jobs: list, progress: _Progress) -> None:
        for job in jobs:
            self.jobq.put(job)
        error = None
        for _ in jobs:
            item = self.doneq.get()
            if isinstance(item, BaseException):
                error = error or item
                self.stop.set()  # no more jobs; the others finish theirs
            elif item is not None:
                progress.add(*item)
        if error is not None:
            raise TrainingError(f"training failed: {error}") from error


class _Progress:
    """Words trained, and a progress line every 2 s (rank 0 only): words/s over all
    ranks, alpha, ETA, and with several ranks the share of time waiting on syncs and the
    bytes sent."""

    def __init__(self, model: Word2Vec, total: int, done: int):
        self.model = model
        self.total = total
        self.done0 = self.global_done = done
        self.effective = 0
        self.stall = 0.0
        self.stall_full = 0.0  # the part in each epoch's whole-model sync
        self.t0 = self.last = time.perf_counter()

    def add(self, n: int, effective: int) -> None:
        self.effective += effective
        if self.model.group.size == 1:
            self.global_done += n
            self.report()

    def report(self) -> None:
        now = time.perf_counter()
        m = self.model
        if now - self.last < 2.0 or m.group.rank != 0:
            return
        self.last = now
        elapsed = now - self.t0
        frac = self.global_done / self.total
        rate = (self.global_done - self.done0) / elapsed
        alpha = m.start_alpha - (m.start_alpha - m.min_alpha) * frac
        eta = (self.total - self.global_done) / rate if rate else float("inf")
        epoch = min(int(frac * m.epochs) + 1, m.epochs)
        line = (
            f"epoch {epoch}/{m.epochs} {100 * frac:5.1f}%  {rate:,.0f} words/s  "
            f"alpha {alpha:.5f}  ETA {eta:.0f}s"
        )
        if m.group.size > 1:
            line += (
                f"  ({m.group.size} ranks, {100 * self.stall / elapsed:.0f}% waiting on "
                f"syncs, {_size(m.group.bytes_sent)} sent)"
            )
        m._say(line)
