"""Planning a run: the jobs of an epoch, its sync groups, the learning rate along the global
word count, and which rows each sync between ranks carries.

An epoch's encoded corpus is cut into *jobs* (whole sentences, about ``job_words``
words: one kernel call each) and the jobs into *sync groups*: the threads of a rank meet
at the end of each group, where the ranks combine their changes. Every rank trains the
same number of groups, so the global word count at each group's end, which the learning
rate follows, is known before training starts (each rank's words per group are summed
once). One process alone trains one group an epoch.

>>> bounds = np.array([0, 4, 9, 12, 20])  # 4 sentences, 20 words
>>> [tuple(j) for j in cut_jobs(bounds, 10)]
[(0, 3, 0, 12), (3, 4, 12, 8)]
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..errors import TrainingError
from .distributed.schedule import head_for_budget, sync_rows, tier_tables
from .distributed.sync import Synchronizer
from .params import SyncParams

__all__ = [
    "CLASSIC_MIN_ALPHA",
    "MIN_SYNC_WORDS",
    "WARMUP_PARTS",
    "EpochPlan",
    "Job",
    "LinkedRows",
    "RunPlan",
    "cut_groups",
    "cut_jobs",
    "groups_needed",
    "head_rows_budget",
    "min_alpha_for",
    "plan_epoch",
    "plan_run",
    "plan_syncs",
    "row_schedule",
    "update_rates",
]

#: A warm-up's groups are cut into this many: syncs that often in the first epoch's start.
WARMUP_PARTS = 4

#: ``sync_min_per_epoch`` never cuts a rank's epoch into groups smaller than this.
MIN_SYNC_WORDS = 1000


class Job(NamedTuple):
    """Sentences ``[first, end)`` of the encoded corpus: ``words`` words from ``start``."""

    first: int
    end: int
    start: int
    words: int


def cut_jobs(bounds: np.ndarray, size: int, extra_cuts: Any = ()) -> list[Job]:
    """Jobs of about *size* words (cut at the sentence end at or after every *size*-th
    word), also cut at the words *extra_cuts*."""
    at = np.arange(size, bounds[-1], size)
    cuts = np.searchsorted(bounds, np.concatenate((at, np.asarray(extra_cuts, np.int64))))
    edges = np.unique(np.concatenate(([0], cuts, [len(bounds) - 1])))
    return [
        Job(int(a), int(b), int(bounds[a]), int(bounds[b] - bounds[a]))
        for a, b in itertools.pairwise(edges)
        if b > a
    ]


def groups_needed(n_words: int, ranks: int, sync: SyncParams) -> int:
    """The sync groups a rank of *n_words* words needs an epoch: one every
    ``sync_words`` words, and a short epoch ``sync_min_per_epoch`` of them (never
    fewer than ``MIN_SYNC_WORDS`` words a group); one process alone: one.

    >>> groups_needed(30_000, 2, SyncParams(sync_words=5000, sync_min_per_epoch=0))
    6
    """
    if ranks == 1:
        return 1
    by_words = -(-n_words // sync.sync_words)
    return max(by_words, min(sync.sync_min_per_epoch, n_words // MIN_SYNC_WORDS))


def cut_groups(
    bounds: np.ndarray, n_groups: int, *, workers: int, job_words: int, split: int = 0
) -> list[list[Job]]:
    """The jobs of an epoch in *n_groups* sync groups; the first *split* groups cut
    again into ``WARMUP_PARTS`` (a warm-up: more frequent syncs).

    Every thread needs work in each group (the threads meet at its end): two jobs a
    thread (one job for one thread), or as near as whole sentences allow.
    """
    n_words = int(bounds[-1])
    split = min(split, n_groups)
    parts = WARMUP_PARTS
    cuts = [
        (i * parts + q) * n_words // (n_groups * parts)
        for i in range(split)
        for q in range(1, parts + 1)
    ]
    groups: list[list[Job]] = [[] for _ in range(split * parts + n_groups - split)]
    per_group = 2 * workers if workers > 1 else 1
    size = min(job_words, max(1, n_words // (n_groups * per_group)))
    for job in cut_jobs(bounds, size, cuts):
        x = job.start * n_groups * parts // max(n_words, 1)  # in parts of a group
        i = x if x < split * parts else split * parts + x // parts - split
        groups[min(i, len(groups) - 1)].append(job)
    return groups


@dataclass(frozen=True)
class EpochPlan:
    """An epoch's sync groups; this rank's words in each (``mine``), all ranks' words
    in each (``global_words``) and where each group starts in the global count."""

    groups: list[list[Job]]
    mine: np.ndarray
    global_words: np.ndarray
    starts: np.ndarray

    @property
    def words(self) -> int:
        """All ranks' words in the epoch."""
        return int(self.global_words.sum())


def plan_epoch(
    group: Any,
    bounds: np.ndarray,
    *,
    workers: int,
    job_words: int,
    sync: SyncParams,
    split: int = 0,
) -> EpochPlan:
    """This rank's plan of an epoch: as many groups as the rank that needs the most
    (``group.max``), the words of all ranks summed once (``group.allreduce``)."""
    n_groups = groups_needed(int(bounds[-1]), group.size, sync)
    n_groups = max(1, int(group.max(n_groups)))
    groups = cut_groups(bounds, n_groups, workers=workers, job_words=job_words, split=split)
    mine = np.array([sum(j.words for j in grp) for grp in groups], np.int64)
    global_words = group.allreduce(mine.copy())
    starts = np.concatenate(([0], np.cumsum(global_words)))
    return EpochPlan(groups, mine, global_words, starts)


@dataclass(frozen=True)
class RunPlan:
    """The whole run: every epoch's plan (a warm-up's first epoch has its own) and the
    learning rate, falling linearly from ``start_alpha`` to ``min_alpha`` along the
    global word count of all epochs."""

    plan: EpochPlan
    warm: EpochPlan | None
    epochs: int
    start_alpha: float
    min_alpha: float

    @property
    def epoch_words(self) -> int:
        return self.plan.words

    @property
    def total(self) -> int:
        """All ranks' words in all epochs."""
        return self.epoch_words * self.epochs

    def epoch(self, epoch: int) -> EpochPlan:
        return self.warm if self.warm is not None and epoch == 0 else self.plan

    def alphas(self, epoch: int, grp_i: int, offset: int, n: int) -> tuple[float, float]:
        """The learning rate at the start and end of a job of *n* words *offset* words
        into this rank's share of group *grp_i*: the rank's share is spread over the
        group's global words."""
        plan = self.epoch(epoch)
        local = int(plan.mine[grp_i])
        frac0 = offset / local if local else 0.0
        frac1 = (offset + n) / local if local else 0.0
        at = epoch * self.epoch_words + plan.starts[grp_i]
        p0 = (at + frac0 * plan.global_words[grp_i]) / self.total
        p1 = (at + frac1 * plan.global_words[grp_i]) / self.total
        span = self.start_alpha - self.min_alpha
        return self.start_alpha - span * p0, self.start_alpha - span * p1


#: ``min_alpha``'s default: the learning rate ends at this share of the start alpha on a
#: run of up to ``FLOOR_WORDS`` words trained (corpus words x epochs, all ranks) ...
FLOOR_SHARE = 0.25
FLOOR_WORDS = 20_000_000
#: ... and never below word2vec.c's and gensim's fixed final rate.
CLASSIC_MIN_ALPHA = 0.0001


def min_alpha_for(alpha: float, words: int) -> float:
    """The final learning rate when the user gives none: ``alpha`` x ``FLOOR_SHARE`` x
    ``min(1, sqrt(FLOOR_WORDS / words))``, at least ``CLASSIC_MIN_ALPHA``; *words* is the
    run's words trained (corpus words x epochs).

    Why: a rate falling to ~0 spends the run's second half at rates too small to move a
    vector, which a long run can afford and a short one cannot. Measured (BENCHMARKS.md,
    first 20 MB, 2 epochs, 2 threads, means of 3 seeds): falling to 0.0001, skip-gram
    ends 1.0 analogy point and 0.057 WS-353 below gensim, CBOW 1.1 and 0.052; ending at a
    quarter of alpha, -0.05 and -0.019, -0.12 and +0.022 (half of alpha passes gensim in
    both; not measured on long runs). gensim's ``corpus_file`` mode with W workers ends
    each epoch at ``alpha (1 - 1/W) / E`` by accident (each worker counts only its own
    words), which is why it leads on short runs and not on long ones. The share falls
    with the square root of the words trained, so a long run still ends near the classic
    rate (whole wiki100m, 5 epochs, 85M words: 0.12 of alpha, +1.8 analogy points over
    gensim in skip-gram, -0.2 in CBOW; a billion words x 5: 0.016). Runs on
    several ranks keep ``CLASSIC_MIN_ALPHA`` (``Word2Vec._plan_run``).

    >>> min_alpha_for(0.025, 6_800_000), min_alpha_for(0.05, 20_000_000)
    (0.00625, 0.0125)
    >>> round(min_alpha_for(0.025, 80_000_000), 6), min_alpha_for(0.025, 10**13)
    (0.003125, 0.0001)
    """
    share = FLOOR_SHARE * min(1.0, (FLOOR_WORDS / max(words, 1)) ** 0.5)
    return max(alpha * share, CLASSIC_MIN_ALPHA)


# ---------------------------------------------------------------- the rows each sync carries


def head_rows_budget(sync: SyncParams, ranks: int, row_bytes: float, vector_size: int) -> float:
    """The head syncs' rows per epoch, in models, that keep each rank's bytes sent per
    epoch within ``sync_budget`` float32 models: each row costs *row_bytes* (the change,
    the touch count, the squared norm in the payload's precision) x a ring allreduce's
    ``2 (N-1) / N``; each epoch's last sync carries the whole model."""
    n = ranks
    per_model = 2 * (n - 1) / n * row_bytes / (4 * vector_size)
    head = sync.sync_budget / per_model - 1.0
    if head <= 0:
        raise TrainingError(
            f"sync_budget={sync.sync_budget!r}: each epoch's whole-model sync alone "
            f"sends {per_model:.2f} models a rank at {n} ranks; give more",
            collective=True,
        )
    return head


def update_rates(
    counts: np.ndarray,
    sample_int: np.ndarray,
    *,
    negative: int,
    ns_exponent: float,
    tree: Any,
    n_inner: int,
) -> list[np.ndarray]:
    """Each synchronised matrix's rows' expected updates per word trained, most frequent
    row first: a word's kept frequency (after subsampling) for its input vector, plus
    ``negative`` x its noise probability for its output weights; a Huffman node's
    (``tree``, ``n_inner`` nodes), the kept frequency of the words below it."""
    counts = counts.astype(np.float64)
    kept = counts * (sample_int / float(2**32 - 1))
    kept /= max(kept.sum(), 1e-300)
    rates = [kept]
    if negative:
        noise = counts**ns_exponent
        rates.append(kept + negative * noise / noise.sum())
    if tree is not None:
        on_path = np.arange(tree.points.shape[1]) < tree.codelens[:, None]
        node = np.zeros(n_inner)
        np.add.at(
            node, tree.points[on_path], np.broadcast_to(kept[:, None], on_path.shape)[on_path]
        )
        rates.append(node[::-1])  # the tree's top nodes are its last rows
    return rates


@dataclass(frozen=True)
class DoublingRows:
    """pWord2Vec's doubling schedule: sync *k* carries ``head`` x the largest power of
    two dividing *k* rows of every matrix."""

    head: int
    n_rows: int

    def __call__(self, k: int) -> int:
        return sync_rows(k, head=self.head, n_rows=self.n_rows)


@dataclass(frozen=True)
class RateRows:
    """Per-row periods by update rate (:func:`~vecserve.train.distributed.tier_tables`):
    sync *k* carries a matrix's first ``table[tz(k)]`` rows."""

    tables: list[np.ndarray]

    @property
    def head(self) -> int:
        return int(self.tables[0][0])

    def __call__(self, k: int) -> list[int]:
        tz = (k & -k).bit_length() - 1
        return [int(t[min(tz, len(t) - 1)]) for t in self.tables]


@dataclass(frozen=True)
class LinkedRows:
    """The doubling schedule of the word matrices (``n_words`` of them) and of one more
    whose rows follow the words': the subword model's n-gram buckets, ordered by the
    first word (in frequency order) that uses each. A head of ``n`` words carries
    ``linked[n]`` of its rows: the buckets of those words' n-grams.

    >>> LinkedRows(DoublingRows(2, 10), np.array([0, 3, 5, 6, 6]), 2)(2)
    [4, 4, 6]
    """

    words: DoublingRows
    linked: np.ndarray
    n_words: int

    @property
    def head(self) -> int:
        return self.words.head

    def __call__(self, k: int) -> list[int]:
        n = self.words(k)
        return [n] * self.n_words + [int(self.linked[min(n, len(self.linked) - 1)])]


def plan_run(
    group: Any, bounds: np.ndarray, params: Any, sync: SyncParams, *, floor: bool = True
) -> RunPlan:
    """Every epoch's sync groups (with several ranks and ``sync_warmup``, the first
    epoch's start cut finer) and the learning rate along them, for the encoded corpus
    of sentence *bounds* (*params*: the :class:`~vecserve.train.params.TrainParams`).
    ``floor=False``: the default final rate is ``CLASSIC_MIN_ALPHA`` whatever the
    corpus's size (subword skip-gram: :meth:`FastText._plan_run`)."""
    g, p = group, params
    plan = plan_epoch(g, bounds, workers=p.workers, job_words=p.job_words, sync=sync)
    if plan.words < 2:
        raise TrainingError("corpus has fewer than 2 words in the vocabulary", collective=True)
    warm = None
    if g.size > 1 and sync.sync_warmup > 0:
        split = max(1, round(sync.sync_warmup * len(plan.groups)))
        warm = plan_epoch(
            g, bounds, workers=p.workers, job_words=p.job_words, sync=sync, split=split
        )
    start_alpha = sync.start_alpha(p.alpha, g.size)
    min_alpha = p.min_alpha
    if min_alpha is None and (g.size > 1 or not floor):
        # several ranks keep the classic final rate: their syncs' int8 changes and
        # the syncs still under way were tuned against it (a higher one lost topic
        # purity in tests/mpi/test_scheme_ranks.py's int8 run with 3 under way);
        # so does subword skip-gram, see FastText._plan_run
        min_alpha = CLASSIC_MIN_ALPHA
    elif min_alpha is None:  # the default: by the run's words trained
        min_alpha = min_alpha_for(start_alpha, plan.words * p.epochs)
    return RunPlan(plan, warm, p.epochs, start_alpha, min_alpha)


def plan_syncs(
    group: Any,
    sync: SyncParams,
    run: RunPlan,
    matrices: list[tuple],
    *,
    n_vocab: int,
    rates: Callable[[], list[np.ndarray]],
    linked: np.ndarray | None = None,
) -> tuple[Synchronizer, DoublingRows | RateRows | LinkedRows]:
    """The syncs of a run on several ranks: the :class:`Synchronizer` of *matrices*
    and the rows each head sync carries, within the byte budget (:func:`row_schedule`;
    *linked*: the last matrix's rows follow the words')."""
    synchronizer = Synchronizer(
        group,
        matrices,
        cap=sync.sync_cap,
        coherent=sync.sync_coherent,
        dtype=sync.sync_dtype,
        depth=sync.sync_depth if sync.overlap else 1,
    )
    d = synchronizer.mats[0].weights.shape[1]
    budget = head_rows_budget(sync, group.size, synchronizer.row_bytes(d), d)
    syncs = [len(run.plan.groups)] * run.epochs  # per epoch, a warm-up's first more
    if run.warm is not None:
        syncs[0] = len(run.warm.groups)
    rows = row_schedule(
        sync,
        n_vocab=n_vocab,
        n_rows=synchronizer.n_rows,
        syncs=syncs,
        rows_budget=budget,
        rates=rates,
        linked=linked,
        n_words=len(synchronizer.mats) - 1,
    )
    return synchronizer, rows


def row_schedule(
    sync: SyncParams,
    *,
    n_vocab: int,
    n_rows: int,
    syncs: list[int],
    rows_budget: float,
    rates: Callable[[], list[np.ndarray]],
    linked: np.ndarray | None = None,
    n_words: int = 0,
) -> DoublingRows | RateRows | LinkedRows:
    """The rows each head sync carries, within *rows_budget* models an epoch (*syncs*:
    each epoch's syncs); *rates* gives the rows' update rates (``"rates"`` only: a rate
    per row of every matrix, in its sync order). *linked*: the last matrix's rows
    follow the words' (:class:`LinkedRows`, after *n_words* word matrices)."""
    if sync.sync_schedule == "rates":
        return RateRows(tier_tables(rates(), syncs, rows_budget))
    if linked is None:
        return DoublingRows(head_for_budget(n_vocab, syncs, rows_budget), n_rows)
    rows_of = n_words * np.arange(n_vocab + 1, dtype=np.int64) + linked
    head = head_for_budget(n_vocab, syncs, rows_budget, rows_of)
    return LinkedRows(DoublingRows(head, n_rows), linked, n_words)
