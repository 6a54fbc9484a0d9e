"""The trainer's parameters: one record for training, one for syncing ranks, validated once.

Every parameter is declared here once, with its default and its help line:
:class:`~vecserve.train.Word2Vec` takes them as keyword arguments (gensim's names), and
``vecserve train`` builds its options from the same fields (:func:`option_fields`).
A record refuses a bad value when it is made, with a
:class:`~vecserve.errors.TrainingError` that names the parameter; every rank of a
distributed job makes the same records, so that error is ``collective``.

The learning rate's default follows word2vec.c: 0.025 for skip-gram, 0.05 for CBOW (gensim
uses 0.025 for both); BENCHMARKS.md's CBOW figures use 0.05 for both tools.

>>> TrainParams(sg=0).alpha, TrainParams(sg=1).alpha
(0.05, 0.025)
>>> SyncParams(sync_depth=0)
Traceback (most recent call last):
...
vecserve.errors.TrainingError: sync_depth=0: must be an integer >= 1
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import TrainingError

__all__ = [
    "SYNC_DTYPES",
    "SYNC_SCHEDULES",
    "SubwordParams",
    "SyncParams",
    "TrainParams",
    "usable_cores",
]

#: the changes' types on the wire between ranks
SYNC_DTYPES = ("float32", "float16", "int16", "int8")
#: which rows each sync carries: by frequency rank, or by expected updates
SYNC_SCHEDULES = ("doubling", "rates")


def _param(default: Any, help: str, **cli: Any) -> Any:
    """A field with its help line and, in ``cli``, how ``vecserve train`` spells it:
    ``flags`` (its option names, ``"--a/--b"`` for a switch), ``is_flag`` (an option
    alone, no value), ``type``, ``choices``, ``min``, ``metavar``, and ``cli_default``
    where the command's default differs from the library's."""
    return field(default=default, metadata={"help": help, **cli})


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: what mpiexec's binding or
    ``taskset`` left it), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _bad(name: str, value: Any, why: str) -> TrainingError:
    return TrainingError(f"{name}={value!r}: {why}", collective=True)


def _whole(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


@dataclass(frozen=True)
class TrainParams:
    """What to train and how (gensim's ``Word2Vec`` parameters, and vecserve's own)."""

    vector_size: int = _param(
        100, "Dimensions of the word vectors.", flags=("--vector-size", "--size")
    )
    window: int = _param(5, "Context words on each side of a word, at most.")
    min_count: int = _param(5, "Ignore words seen fewer times.")
    max_vocab_size: int | None = _param(None, "Prune while counting.", type=int)
    max_final_vocab: int | None = _param(None, "Keep at most N words.", type=int)
    sg: int = _param(0, "Skip-gram or CBOW.", flags=("--sg/--cbow",), cli_default=True)
    hs: int = _param(0, "Hierarchical softmax.", is_flag=True)
    negative: int = _param(5, "Negative samples per word (0: none).")
    ns_exponent: float = _param(0.75, "Exponent of the negative-sampling distribution.")
    cbow_mean: int = _param(
        1, "CBOW: the mean or the sum of the contexts.", flags=("--cbow-mean/--cbow-sum",)
    )
    sample: float = _param(1e-3, "Subsample words more frequent than this.")
    alpha: float | None = _param(
        None, "Initial learning rate [default: 0.025 skip-gram, 0.05 CBOW].", type=float
    )
    min_alpha: float | None = _param(
        None,
        "Final learning rate [default: by the words trained, a quarter of alpha on "
        "short runs, toward 0.0001 on long ones; 0.0001 on several ranks and for "
        "subword skip-gram].",
        type=float,
    )
    epochs: int = _param(5, "Passes over the corpus.", flags=("--epochs", "--iter"))
    workers: int | None = _param(
        None,
        "Threads [default: the cores this process may use].",
        flags=("--workers", "-j"),
        type=int,
    )
    seed: int = _param(1, "Seed of the initial vectors and every random draw.")
    batch: bool | None = _param(
        None,
        "HogBatch's shared negatives [default: on for skip-gram].",
        flags=("--batch/--no-batch",),
    )
    cbow_batch: int = _param(2, "CBOW HogBatch: windows that share negatives.")
    job_words: int = _param(50_000, "Words a training thread takes at a time.")

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: the defaults that depend on others, resolved
        set_(self, "sg", int(bool(self.sg)))
        set_(self, "hs", int(bool(self.hs)))
        set_(self, "cbow_mean", int(bool(self.cbow_mean)))
        if self.alpha is None:
            set_(self, "alpha", 0.025 if self.sg else 0.05)
        if self.workers is None:
            set_(self, "workers", usable_cores())
        self._check()

    def _check(self) -> None:
        for name in ("vector_size", "window", "epochs", "workers", "job_words", "cbow_batch"):
            v = getattr(self, name)
            if not _whole(v) or v <= 0:
                raise _bad(name, v, "must be a positive integer")
        if not isinstance(self.min_count, (int, np.integer)) or self.min_count < 0:
            raise _bad("min_count", self.min_count, "must be an integer >= 0")
        if self.negative < 0 or self.negative > 1000:
            raise _bad("negative", self.negative, "must be between 0 and 1000")
        if not self.hs and not self.negative:
            raise _bad(
                "negative",
                self.negative,
                "with hs=0 there is no objective: set negative > 0 or hs=1",
            )
        if not self.alpha > 0:
            raise _bad("alpha", self.alpha, "must be > 0")
        if self.min_alpha is not None and not 0 <= self.min_alpha <= self.alpha:
            raise _bad("min_alpha", self.min_alpha, f"must be between 0 and alpha={self.alpha}")
        if not self.sample >= 0:
            raise _bad("sample", self.sample, "must be >= 0")
        if self.batch and not (self.negative > 0 and not self.hs):
            raise _bad("batch", self.batch, "HogBatch needs negative > 0 and hs=0")
        for name in ("max_final_vocab", "max_vocab_size"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise _bad(name, v, "must be >= 1")

    @property
    def use_batch(self) -> bool:
        """Whether training runs the HogBatch kernel (``batch=None``: for skip-gram with
        negative sampling, where it is faster at equal quality)."""
        applies = self.negative > 0 and not self.hs
        return bool(applies and self.sg if self.batch is None else self.batch)

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


_MPI = "Under mpiexec: "


@dataclass(frozen=True)
class SyncParams:
    """How the ranks of a distributed job combine their changes
    (:mod:`vecserve.train.distributed`; one process alone ignores them).

    The ranks combine their changes every ``sync_words`` words a rank trains, and at
    least ``sync_min_per_epoch`` times an epoch (short epochs sync more often; groups of
    at least 1,000 words); ``sync_cap`` and ``sync_coherent`` say how.
    ``sync_budget`` bounds the bytes each rank sends per epoch, in float32 models (each
    epoch's last sync, the whole model, included); ``sync_dtype`` is the changes'
    precision on the wire (``"int16"``: half the bytes of ``"float32"``, so twice the
    rows within the budget; ``"int8"``: a quarter, for up to 31 ranks);
    ``sync_schedule`` picks which rows each sync carries (``"doubling"``: by frequency
    rank; ``"rates"``: by expected updates); ``sync_warmup`` syncs the first epoch's
    first share 4x as often; ``sync_scale_alpha`` (a power; 0: off) starts the learning
    rate at :meth:`start_alpha`; ``overlap`` runs each sync's exchange while the next
    words train, and ``sync_depth`` exchanges may be under way at once (each is applied
    ``sync_depth`` groups after it was taken: a rank a little behind the others holds
    them up less).
    """

    sync_words: int = _param(50_000, _MPI + "words a rank trains between two model syncs.")
    sync_min_per_epoch: int = _param(128, _MPI + "at least this many syncs an epoch (short runs).")
    sync_budget: float = _param(2.0, _MPI + "bytes a rank sends per epoch, in float32 models.")
    sync_cap: float = _param(2.0, _MPI + "1 averages ranks' changes to a row, N adds them.")
    sync_coherent: bool = _param(True, _MPI + "add changes the ranks disagree on.")
    sync_dtype: str = _param(
        "int16", _MPI + "the changes' precision on the wire.", choices=SYNC_DTYPES
    )
    sync_schedule: str = _param(
        "doubling",
        _MPI + "rows synced by frequency rank or by update rate.",
        choices=SYNC_SCHEDULES,
    )
    sync_warmup: float = _param(0.25, _MPI + "share of the first epoch synced 4x as often.")
    sync_scale_alpha: float = _param(
        0.8, _MPI + "alpha x (ranks / sync cap) ** POWER (0: off).", metavar="POWER"
    )
    overlap: bool = _param(True, _MPI + "exchange a sync's changes while training on.")
    sync_depth: int = _param(1, _MPI + "syncs under way at once while training on.", min=1)

    def __post_init__(self) -> None:
        if not _whole(self.sync_words) or self.sync_words <= 0:
            raise _bad("sync_words", self.sync_words, "must be a positive integer")
        if not self.sync_budget > 0:
            raise _bad("sync_budget", self.sync_budget, "must be > 0")
        if not self.sync_cap >= 1:
            raise _bad("sync_cap", self.sync_cap, "must be >= 1 (1: average the ranks' changes)")
        if not 0 <= self.sync_scale_alpha <= 2:
            raise _bad(
                "sync_scale_alpha", self.sync_scale_alpha, "must be a power between 0 (off) and 2"
            )
        if not _whole(self.sync_min_per_epoch) or self.sync_min_per_epoch < 0:
            raise _bad(
                "sync_min_per_epoch",
                self.sync_min_per_epoch,
                "must be an integer >= 0 (0: sync_words alone)",
            )
        if not _whole(self.sync_depth) or self.sync_depth < 1:
            raise _bad("sync_depth", self.sync_depth, "must be an integer >= 1")
        if not 0 <= self.sync_warmup <= 1:
            raise _bad(
                "sync_warmup",
                self.sync_warmup,
                "must be a fraction of the first epoch, between 0 and 1",
            )
        if self.sync_dtype not in SYNC_DTYPES:
            raise _bad("sync_dtype", self.sync_dtype, f"must be one of {', '.join(SYNC_DTYPES)}")
        if self.sync_schedule not in SYNC_SCHEDULES:
            raise _bad("sync_schedule", self.sync_schedule, "must be 'doubling' or 'rates'")

    def start_alpha(self, alpha: float, ranks: int) -> float:
        """The learning rate training starts from on *ranks* ranks: *alpha* x
        ``(N / min(N, sync_cap)) ** sync_scale_alpha``. The capped gain moves a row that
        all N ranks changed by ``min(N, cap) / N`` of their summed changes; the power
        makes up part of that (1: all of it, the plain sum's collapse at 4 ranks
        without its instability); at 2 ranks and cap 2 the factor is 1.

        >>> SyncParams().start_alpha(0.025, 1), SyncParams().start_alpha(0.025, 2)
        (0.025, 0.025)
        """
        n = ranks
        if n == 1 or not self.sync_scale_alpha:
            return alpha
        return alpha * float((n / min(n, self.sync_cap)) ** self.sync_scale_alpha)


_SUB = "With --subwords: "


@dataclass(frozen=True)
class SubwordParams:
    """fastText's character n-grams (:class:`~vecserve.train.FastText`; gensim's names,
    fastText's defaults). ``vecserve train`` offers them with ``--subwords`` only, so
    their options have no default of their own there.

    >>> SubwordParams(min_n=4, max_n=3)
    Traceback (most recent call last):
    ...
    vecserve.errors.TrainingError: max_n=3: must be 0 (no n-grams) or >= min_n=4
    """

    min_n: int = _param(
        3, _SUB + "shortest character n-gram [default: 3].", cli_default=None, type=int
    )
    max_n: int = _param(
        6, _SUB + "longest character n-gram, 0: none [default: 6].", cli_default=None, type=int
    )
    bucket: int = _param(
        2_000_000,
        _SUB + "hash buckets of n-gram rows [default: 2000000].",
        flags=("--buckets", "--bucket"),
        cli_default=None,
        type=int,
    )

    def __post_init__(self) -> None:
        if not _whole(self.min_n) or self.min_n < 1:
            raise _bad("min_n", self.min_n, "must be an integer >= 1")
        if not _whole(self.max_n) or (self.max_n != 0 and self.max_n < self.min_n):
            raise _bad("max_n", self.max_n, f"must be 0 (no n-grams) or >= min_n={self.min_n}")
        if not _whole(self.bucket) or not 1 <= self.bucket <= 1 << 30:
            raise _bad("bucket", self.bucket, "must be an integer between 1 and 2**30")


def option_fields() -> list[dataclasses.Field]:
    """Every parameter, training first: what ``vecserve train`` offers as options."""
    return [
        *dataclasses.fields(TrainParams),
        *dataclasses.fields(SyncParams),
        *dataclasses.fields(SubwordParams),
    ]


def subword_names() -> frozenset[str]:
    """The names of :class:`SubwordParams`' fields."""
    return frozenset(f.name for f in dataclasses.fields(SubwordParams))


def split_params(options: dict[str, Any]) -> tuple[TrainParams, SyncParams]:
    """The two records from keyword arguments; an unknown name is a ``TypeError``, as in
    any call."""
    sync_names = {f.name for f in dataclasses.fields(SyncParams)}
    sync = {k: v for k, v in options.items() if k in sync_names}
    train = {k: v for k, v in options.items() if k not in sync_names}
    return TrainParams(**train), SyncParams(**sync)
