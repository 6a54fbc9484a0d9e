"""The :class:`Word2Vec` model: gensim's face on vecserve's trainer.

The model holds the parameters (:mod:`.params`), the vocabulary and the encoded corpus,
and the weights; :meth:`Word2Vec.train` plans the run (:mod:`.plan`), resumes a
checkpoint (:mod:`.checkpoint`) and runs the training threads and the syncs between
ranks (:mod:`.loop`, :mod:`.distributed`). The learning rate falls linearly from
``alpha`` to ``min_alpha`` over all epochs (by default a share of ``alpha`` that falls
with the words trained: :func:`~vecserve.train.plan.min_alpha_for`).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from ..errors import TrainingError
from . import _kernels, checkpoint
from .corpus import Corpus, check_restartable, shard_corpus
from .distributed.group import Group
from .loop import Pool, Progress, SyncRun, run_epochs, size_text
from .params import SyncParams, TrainParams, split_params, usable_cores
from .plan import RunPlan, plan_run, plan_syncs, update_rates
from .tables import alias_table, huffman_tree, sample_thresholds
from .vocab import build_vocab, encode_corpus, encode_share, merge_shares, scan_corpus

__all__ = ["Word2Vec"]

log = logging.getLogger("vecserve.train")

# Hierarchical softmax with two threads or more: each thread keeps its own copy of the
# Huffman tree's top HOT_NODES inner nodes (every path starts at the root) and merges it
# every HOT_EVERY centres (`_kernels.hot_merge`). Whole wiki100m, 1 epoch, 2 threads,
# skip-gram + HS: 12.5 s with the rows shared (one thread: 13.4 s), 7.0 s with 31 nodes
# merged every 64 centres (15 nodes 7.2 s, 7 nodes 13.3 s; every 16 centres 7.2 s);
# CBOW + HS: 3.6 s shared, 2.5 s.
HOT_NODES = 31
HOT_EVERY = 64


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
    ``sync_words`` words a rank trains (the ``sync_*`` parameters say how:
    :class:`~vecserve.train.params.SyncParams`, :mod:`vecserve.train.distributed`).
    ``checkpoint_dir`` saves the model after every epoch; ``resume`` continues from the
    checkpoint there.

    The parameters, their defaults and checks are :class:`~vecserve.train.params.TrainParams`
    and :class:`~vecserve.train.params.SyncParams` (:attr:`params`, :attr:`sync_params`);
    each also reads as an attribute (``model.window``), fixed once the model is made.
    ``alpha`` defaults to 0.025 for skip-gram and 0.05 for CBOW, as in word2vec.c.

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
        comm: Any = None,
        progress: bool = False,
        checkpoint_dir: str | os.PathLike | None = None,
        resume: bool = False,
        **params: Any,
    ):
        self._take_params(params)
        if resume and not checkpoint_dir:
            raise TrainingError("resume=True: needs checkpoint_dir", collective=True)
        self.group = comm if isinstance(comm, Group) else Group(comm)
        self.progress = progress
        self.checkpoint_dir = checkpoint_dir
        self.resume = resume
        self.vocab = None
        self.corpus = None
        self.syn0 = self.syn1 = self.syn1neg = None
        self.train_stats: dict[str, Any] = {}
        self.source = ""
        self._wv = None
        if corpus is not None:
            self.build_vocab(corpus)
            self.train()

    def _take_params(self, params: dict[str, Any]) -> None:
        """The parameter records from the keyword arguments (each checked once)."""
        self.params, self.sync_params = split_params(params)

    @property
    def start_alpha(self) -> float:
        """The learning rate training starts from: ``alpha``, scaled up on several ranks
        (:meth:`~vecserve.train.params.SyncParams.start_alpha`).

        >>> Word2Vec(alpha=0.025, comm=None).start_alpha
        0.025
        """
        return self.sync_params.start_alpha(self.params.alpha, self.group.size)

    # ------------------------------------------------------------ vocabulary

    def build_vocab(self, corpus: Corpus) -> None:
        """Count *corpus*, keep the vocabulary, encode the corpus into word ids.

        With several ranks each counts and encodes its own share, and all get the
        vocabulary of the whole corpus (see :mod:`vecserve.train.distributed`).
        """
        if isinstance(corpus, (str, os.PathLike)):
            self.source = os.fspath(corpus)
        t0 = time.perf_counter()
        if self.group.size > 1:  # each rank its share; one vocabulary for all
            shard = self._shard(corpus)
            self.vocab, scan = merge_shares(
                self.group,
                shard,
                min_count=self.min_count,
                max_vocab_size=self.max_vocab_size,
                max_final_vocab=self.max_final_vocab,
            )
            t1 = time.perf_counter()
            self.corpus = encode_share(shard, scan, self.vocab)
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
            len(self.vocab),
            self.vocab.raw_vocab,
            self.vocab.raw_words,
            t1 - t0,
            self.corpus.n_words,
            self.corpus.n_sentences,
            t2 - t1,
            f" on rank {self.group.rank} of {self.group.size}" if self.group.size > 1 else "",
        )
        self._init_weights()

    def _shard(self, corpus: Corpus):
        """This rank's share of *corpus* (a path, or a list of token lists)."""
        g = self.group
        if isinstance(corpus, (str, os.PathLike)):
            return shard_corpus(corpus, g.rank, g.size)
        if isinstance(corpus, Sequence) and not isinstance(corpus, (str, bytes)):
            n = len(corpus)
            return corpus[n * g.rank // g.size : n * (g.rank + 1) // g.size]
        raise TrainingError(
            "with several ranks the corpus must be a path or a list of token lists "
            f"(each rank takes its share), not {type(corpus).__name__}",
            collective=True,
        )

    def _init_weights(self) -> None:
        self.syn0 = self._input_rows(len(self.vocab))
        self._init_output()

    def _input_rows(self, n: int) -> np.ndarray:
        """*n* input rows drawn uniform in [-1/d, 1/d) like gensim (word2vec.c draws half
        that and trains slower; fastText draws the same)."""
        d = self.vector_size
        rows = np.random.default_rng(self.seed).random((n, d), dtype=np.float32)
        rows *= 2.0
        rows -= 1.0
        rows /= d
        return rows

    def _init_output(self) -> None:
        """The output weights (zero) and the tables of the vocabulary: the Huffman tree,
        the subsampling thresholds, the negatives' alias table."""
        n, d = len(self.vocab), self.vector_size
        self.syn1neg = np.zeros((n, d), np.float32) if self.negative else None
        self.syn1 = np.zeros((max(n - 1, 1), d), np.float32) if self.hs else None
        self._tree = huffman_tree(self.vocab.counts) if self.hs else None
        self._sample_int = sample_thresholds(self.vocab.counts, self.sample)
        self._alias = alias_table(self.vocab.counts, self.ns_exponent)
        self._wv = None

    def _kernel_worker(self) -> _kernels.KernelWorker:
        """A training thread's kernel worker over the shared weights and tables."""
        p, tree = self.params, self._tree
        return _kernels.KernelWorker(
            self.syn0,
            self.syn1,
            self.syn1neg,
            self._sample_int,
            *self._alias,
            tree.codes if tree else None,
            tree.points if tree else None,
            tree.codelens if tree else None,
            sg=p.sg,
            hs=p.hs,
            negative=p.negative,
            window=p.window,
            cbow_mean=p.cbow_mean,
            batch=int(p.use_batch),
            cbow_batch=p.cbow_batch,
            hot_nodes=HOT_NODES if p.workers > 1 else 0,
            hot_every=HOT_EVERY,
        )

    # ------------------------------------------------------------ training

    def train(self) -> dict[str, Any]:
        """Train ``epochs`` passes over the encoded corpus; returns :attr:`train_stats`.

        With several ranks (``comm``), every rank calls this; all of them end with the
        same model. A failure mid-run (a training thread's error, a diverged model, a
        failed sync) raises :class:`~vecserve.errors.TrainingError`.
        """
        if self.corpus is None:
            raise TrainingError("no vocabulary: call build_vocab(corpus) first")
        if self.group.size == 1 and self.corpus.n_words < 2:
            raise TrainingError("corpus has fewer than 2 words in the vocabulary")
        self._warn_if_oversubscribed()
        run = self._plan_run()
        sync = self._sync_run(run) if self.group.size > 1 else None
        first_epoch = self._load_checkpoint(sync) if self.resume else 0
        progress = Progress(self.group, run, first_epoch * run.epoch_words, self._say)
        pool = Pool([self._kernel_worker() for _ in range(self.workers)], self.corpus)
        t0 = time.perf_counter()
        # the threads are the parallelism: BLAS's own pool (the kernels' sgemm on ~10 x
        # 100 matrices) would only compete with them for the cores
        with threadpool_limits(limits=1, user_api="blas"), pool:
            run_epochs(
                pool,
                run,
                first_epoch=first_epoch,
                seed=self.params.seed,
                sync=sync,
                progress=progress,
                after_epoch=self._save_checkpoint,
            )
        self._record_stats(time.perf_counter() - t0, run, first_epoch, progress, sync)
        return self.train_stats

    def _warn_if_oversubscribed(self) -> None:
        cores = usable_cores()
        if self.group.size > 1 and self.workers > cores and self.group.rank == 0:
            self._say(
                f"warning: each rank runs {self.workers} training threads but may use "
                f"{cores} core(s): mpiexec binds ranks to cores; give it --bind-to none, "
                f"or --map-by slot:PE={self.workers}",
                level=logging.WARNING,
            )

    def _plan_run(self) -> RunPlan:
        return plan_run(self.group, self.corpus.bounds, self.params, self.sync_params)

    def _sync_run(self, run: RunPlan) -> SyncRun:
        sync, rows = plan_syncs(
            self.group,
            self.sync_params,
            run,
            self._sync_matrices(),
            n_vocab=len(self.vocab),
            rates=self._update_rates,
            linked=self._linked_rows(),
        )
        return SyncRun(sync, rows, self.sync_params.overlap)

    def _sync_matrices(self) -> list[tuple]:
        """The matrices the ranks synchronise (:class:`~vecserve.train.distributed.Synchronizer`'s
        *matrices*)."""
        return [(self.syn0, False), (self.syn1neg, False), (self.syn1, True)]

    def _linked_rows(self) -> np.ndarray | None:
        """A last synchronised matrix whose rows follow the words' (none here;
        :func:`~vecserve.train.plan.row_schedule`'s *linked*)."""
        return None

    def _update_rates(self) -> list[np.ndarray]:
        p = self.params
        return update_rates(
            self.vocab.counts,
            self._sample_int,
            negative=p.negative,
            ns_exponent=p.ns_exponent,
            tree=self._tree,
            n_inner=len(self.syn1) if self.syn1 is not None else 0,
        )

    def _record_stats(
        self,
        elapsed: float,
        run: RunPlan,
        first_epoch: int,
        progress: Progress,
        sync: SyncRun | None,
    ) -> None:
        g = self.group
        trained = run.total - first_epoch * run.epoch_words
        effective = int(g.allreduce(np.array([progress.effective], np.int64))[0])
        raw = self.vocab.raw_words * (self.epochs - first_epoch)
        self.train_stats.update(
            train_seconds=elapsed,
            epochs=self.epochs,
            first_epoch=first_epoch,
            workers=self.workers,
            ranks=g.size,
            mode=self.mode,
            min_alpha=run.min_alpha,
            corpus_words=self.vocab.raw_words,
            trained_words=trained,
            effective_words=effective,
            words_per_second=raw / elapsed if elapsed > 0 else float("inf"),
        )
        self._wv = None
        where = f"{self.workers} thread{'s' if self.workers != 1 else ''}"
        if sync is not None:
            self.train_stats.update(
                syncs=sync.sync.syncs,
                sync_head=sync.rows.head,
                sync_stall_seconds=progress.stall,
                sync_full_seconds=progress.stall_full,
                sync_share=progress.stall / elapsed if elapsed > 0 else 0.0,
                bytes_sent=g.bytes_sent,
                model_bytes=sync.sync.model_bytes,
            )
            where = (
                f"{g.size} ranks x {where}, {100 * progress.stall / elapsed:.0f}% "
                f"waiting on {sync.sync.syncs} syncs, {size_text(g.bytes_sent)} sent by this rank"
            )
        self._say(
            f"trained {self.mode} on {raw:,} words ({effective:,} after subsampling) "
            f"in {elapsed:.1f}s: {raw / max(elapsed, 1e-9):,.0f} words/s, {where}"
        )

    # ------------------------------------------------------------ checkpoints

    def _weights(self) -> dict[str, np.ndarray]:
        names = ("syn0", "syn1neg", "syn1")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    def _fingerprint(self) -> dict[str, Any]:
        return checkpoint.fingerprint(self.params, self.vocab.words, self.vocab.counts)

    def _save_checkpoint(self, epochs_done: int) -> None:
        """Rank 0 writes the weights after *epochs_done* epochs (with ``checkpoint_dir``)."""
        if not self.checkpoint_dir or self.group.rank != 0:
            return
        meta = dict(self._fingerprint(), epochs_done=epochs_done, ranks=self.group.size)
        path = checkpoint.write(self.checkpoint_dir, self._weights(), meta)
        self._say(f"checkpoint: {epochs_done}/{self.epochs} epochs saved to {path}")

    def _load_checkpoint(self, sync: SyncRun | None) -> int:
        """Epochs already done per the checkpoint (0: none), its weights on every rank."""
        found = checkpoint.resume(
            self.group, self.checkpoint_dir, self._fingerprint(), self._weights()
        )
        if not found.epochs_done:
            self._say(f"no checkpoint at {found.path}: starting from the first epoch")
            return 0
        if sync is not None:
            sync.sync.reset()
        self._say(f"resuming after epoch {found.epochs_done}/{self.epochs} from {found.path}")
        return found.epochs_done

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
        allow_eviction: bool = False,
    ):
        """Commit the vectors to Redis as model *key* (atomically, counts kept).

        Returns the committed model's metadata from :func:`vecserve.loader.load_arrays`
        (``allow_eviction``: commit even where the server's policy may evict its keys).
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
            allow_eviction=allow_eviction,
        )

    def __repr__(self) -> str:
        n = len(self.vocab) if self.vocab is not None else 0
        return f"<Word2Vec {self.mode} vocab={n} vector_size={self.vector_size}>"


def _param_property(record: str, name: str, doc: str | None) -> property:
    return property(lambda self: getattr(getattr(self, record), name), doc=doc)


def expose_params(cls: type, records: dict[str, type]) -> None:
    """Each parameter of *records* (the attribute holding a record -> its class; a
    subclass names its base's too) reads as an attribute of *cls*, as in gensim
    (``model.window``), and so does each property a record derives (``model.mode``)
    unless *cls* defines it itself; the signature lists the parameters with their
    defaults, for help() and editors."""
    for record, rec_cls in records.items():
        names = [f.name for f in dataclasses.fields(rec_cls)]
        names += [k for k, v in vars(rec_cls).items() if isinstance(v, property)]
        for name in names:
            if name not in vars(cls):
                setattr(cls, name, _param_property(record, name, _doc(rec_cls, name)))
    cls.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            *list(inspect.signature(cls.__init__).parameters.values())[1:-1],
            *(
                inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default)
                for rec_cls in records.values()
                for f in dataclasses.fields(rec_cls)
            ),
        ]
    )


def _doc(rec_cls: type, name: str) -> str | None:
    """A parameter's help line, or a derived property's docstring."""
    field = {f.name: f for f in dataclasses.fields(rec_cls)}.get(name)
    return field.metadata["help"] if field else getattr(rec_cls, name).__doc__


expose_params(Word2Vec, {"params": TrainParams, "sync_params": SyncParams})
