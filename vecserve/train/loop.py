"""The training loop: threads that run the kernels, and the syncs between ranks.

Each of a rank's threads has its own :class:`~vecserve.train._kernels.KernelWorker`
(private buffers, shared weights); a queue hands out the jobs of one sync group and
``None`` stops a thread. A job is one GIL-free kernel call, so the threads run truly in
parallel and update the weights with no lock (Hogwild). At the end of each group the
threads stop and the ranks combine their changes (:class:`SyncRun`); each job draws from
its own generator seeded by ``(seed, epoch, job)``, so one thread with a seed trains the
same vectors every time.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import TrainingError
from . import _kernels
from .distributed.group import Group
from .distributed.sync import Exchange, Synchronizer
from .plan import DoublingRows, RateRows, RunPlan

__all__ = ["Pool", "Progress", "SyncRun", "run_epochs", "size_text"]


def size_text(n: float) -> str:
    """
    >>> size_text(123), size_text(5.5e6), size_text(3.2e9)
    ('123 B', '5.5 MB', '3.2 GB')
    """
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


class Progress:
    """Words trained, and a progress line every 2 s (rank 0 only): words/s over all
    ranks, alpha, ETA, and with several ranks the share of time waiting on syncs and the
    bytes sent."""

    def __init__(self, group: Group, run: RunPlan, done: int, say: Callable[[str], None]):
        self.group = group
        self.run = run
        self.say = say
        self.total = run.total
        self.done0 = self.global_done = done
        self.effective = 0
        self.stall = 0.0
        self.stall_full = 0.0  # the part in each epoch's whole-model sync
        self.t0 = self.last = time.perf_counter()

    def add(self, n: int, effective: int) -> None:
        self.effective += effective
        if self.group.size == 1:
            self.global_done += n
            self.report()

    def report(self) -> None:
        now = time.perf_counter()
        if now - self.last < 2.0 or self.group.rank != 0:
            return
        self.last = now
        elapsed = now - self.t0
        frac = self.global_done / self.total
        rate = (self.global_done - self.done0) / elapsed
        run = self.run
        alpha = run.start_alpha - (run.start_alpha - run.min_alpha) * frac
        eta = (self.total - self.global_done) / rate if rate else float("inf")
        epoch = min(int(frac * run.epochs) + 1, run.epochs)
        line = (
            f"epoch {epoch}/{run.epochs} {100 * frac:5.1f}%  {rate:,.0f} words/s  "
            f"alpha {alpha:.5f}  ETA {eta:.0f}s"
        )
        if self.group.size > 1:
            line += (
                f"  ({self.group.size} ranks, {100 * self.stall / elapsed:.0f}% waiting on "
                f"syncs, {size_text(self.group.bytes_sent)} sent)"
            )
        self.say(line)


class Pool:
    """The training threads, each running jobs on its own kernel worker.

    :meth:`run` hands out a list of jobs and returns when all are trained (a sync point
    needs every thread stopped); the threads live from ``__enter__`` to ``__exit__``.
    """

    def __init__(self, kworkers: list, corpus: Any):
        self.words, self.bounds = corpus.words, corpus.bounds
        self.jobq: queue.SimpleQueue = queue.SimpleQueue()
        self.doneq: queue.SimpleQueue = queue.SimpleQueue()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._work, args=(kw,), daemon=True) for kw in kworkers
        ]

    def __enter__(self) -> Pool:
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

    def run(self, jobs: list, progress: Progress) -> None:
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


class SyncRun:
    """The syncs of a distributed run, at the end of each sync group: the head rows
    (*rows* says how many at the k-th sync of an epoch), and at each epoch's end the
    whole model. With ``overlap`` a head sync's exchange runs while the next group
    trains (at most ``sync.depth`` under way; each applied when that many groups
    later end)."""

    def __init__(self, sync: Synchronizer, rows: DoublingRows | RateRows, overlap: bool):
        self.sync = sync
        self.rows = rows
        self.overlap = overlap
        self.pending: collections.deque[Exchange] = collections.deque()  # oldest first
        self.n_sync = 0

    def start_epoch(self) -> None:
        self.n_sync = 0  # the schedule restarts after each epoch's full sync

    def after_group(self, last: bool, progress: Progress) -> None:
        sync = self.sync
        pending = self.pending
        while pending and (last or len(pending) >= sync.depth):
            done = pending.popleft()  # the oldest exchange, overlapped
            progress.stall += done.wait()
            sync.apply(done.payload)
        if last:  # the epoch ends: the whole model
            t_s = time.perf_counter()
            sync.sync(sync.n_rows)
            waited = time.perf_counter() - t_s
            progress.stall += waited
            progress.stall_full += waited
            return
        self.n_sync += 1
        payload = sync.snapshot(self.rows(self.n_sync))
        if self.overlap:
            after = pending[-1] if pending else None  # one at a time
            pending.append(Exchange(sync, payload, after))
        else:
            t_s = time.perf_counter()
            sync.exchange(payload)
            sync.apply(payload, exact=True)
            progress.stall += time.perf_counter() - t_s


def run_epochs(
    pool: Pool,
    run: RunPlan,
    *,
    first_epoch: int,
    seed: int,
    sync: SyncRun | None,
    progress: Progress,
    after_epoch: Callable[[int], None],
) -> None:
    """Train the epochs from *first_epoch* on: each sync group's jobs on the pool, then
    the sync; ``after_epoch(epochs_done)`` at each epoch's end."""
    seed64 = seed & (2**64 - 1)
    for epoch in range(first_epoch, run.epochs):
        plan = run.epoch(epoch)
        k = 0  # the job's number in the epoch: its random draws' seed
        if sync is not None:
            sync.start_epoch()
        for grp_i, grp in enumerate(plan.groups):
            jobs, offset = [], 0
            for job in grp:
                a0, a1 = run.alphas(epoch, grp_i, offset, job.words)
                jobs.append(
                    (job.first, job.end, _kernels.mix_seed(seed64, epoch, k), a0, a1, job.words)
                )
                offset += job.words
                k += 1
            pool.run(jobs, progress)
            progress.global_done = epoch * run.epoch_words + int(plan.starts[grp_i + 1])
            if sync is not None:
                sync.after_group(grp_i == len(plan.groups) - 1, progress)
                progress.report()
        after_epoch(epoch + 1)
