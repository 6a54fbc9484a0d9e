"""How the ranks combine their changes to the model: :class:`Synchronizer`, and
:class:`Exchange`, one sync's collective in a background thread while training goes on.

A sync takes each synchronised row's change since its last sync, sums it over the ranks
(one allreduce) and scales the sum by a gain between 1/N (the mean) and 1 (the sum).
Touch weighting: the sum is averaged over the ranks that touched the row since its last
sync (a row trained on one rank keeps that rank's whole change instead of a 1/N share:
pWord2Vec's model averaging made fair to rare rows), then multiplied by
``min(touches, cap)``. Coherence (``coherent=True``): the gain is at least
``sum_r |d_r|^2 / |sum_r d_r|^2``, one over the number of ranks whose changes agree: N
equal changes count once, N orthogonal ones all count. The plain sum (cap N) diverges or
collapses at 4 ranks; the capped gain moves a row all ranks changed by ``min(N, cap) / N``
of their summed changes, which the learning rate partly makes up for: it starts at
``alpha`` x ``(N / min(N, cap)) ** 0.8`` by default
(:attr:`Word2Vec.start_alpha <vecserve.train.Word2Vec.start_alpha>`).

The changes travel as float32, float16, or integers in units of each row's largest
change: int16 (half the bytes: twice the rows in the same budget) or int8 (a quarter); a
rank's rounding stays in its weights and goes with its next change (error feedback), so
coarse units never drift a row. The per-row passes are C loops (``_sync.pyx``). The
schemes measured, and why the defaults are int16 payloads, cap 2 with coherence and that
learning rate: BENCHMARKS.md.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from ...errors import TrainingError
from .. import _sync
from .group import Group

__all__ = ["Exchange", "Synchronizer"]


@dataclass
class _Matrix:
    weights: np.ndarray  # trained in place by the kernels
    base: np.ndarray  # every rank's agreed value of each synchronised row at its last sync
    tail: bool  # the frequent rows are at the end (syn1: the Huffman tree's top nodes)
    sent: np.ndarray  # this rank's changes in exchanges not yet applied (depth > 1)
    # the rows synchronised, in sync order (None: every row, in place); base and sent
    # hold them in that order
    order: np.ndarray | None = None

    @property
    def length(self) -> int:
        """How many rows are synchronised."""
        return len(self.weights) if self.order is None else len(self.order)

    def rows(self, n: int) -> slice:
        """The first *n* synchronised rows (in sync order: positions in base)."""
        total = self.length
        n = min(n, total)
        return slice(total - n, total) if self.tail else slice(0, n)

    def indexed(self, sl: slice) -> tuple[np.ndarray, np.ndarray | None]:
        """Rows *sl* for the C passes: the weights' rows themselves, or (``order``) all
        the weights and the index of each row in them."""
        if self.order is None:
            return self.weights[sl], None
        return self.weights, self.order[sl]

    def take(self, sl: slice) -> np.ndarray:
        """The weights of rows *sl*: a view, or (``order``) a gathered copy to
        :meth:`put` back (NumPy's passes)."""
        return self.weights[sl] if self.order is None else self.weights[self.order[sl]]

    def put(self, sl: slice, rows: np.ndarray) -> None:
        """Write back rows *sl* changed in a copy from :meth:`take` (a view: nothing)."""
        if self.order is not None:
            self.weights[self.order[sl]] = rows


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


def _matrix(
    weights: np.ndarray, tail: bool, order: np.ndarray | None = None, *, depth: int
) -> _Matrix:
    """A synchronised matrix: its agreed rows (``order``: those rows alone) and, with
    ``depth`` > 1, room for this rank's changes under way."""
    if order is not None:
        order = np.ascontiguousarray(order, np.intp)
    base = weights.copy() if order is None else weights[order]
    sent = np.zeros_like(base) if depth > 1 else np.zeros((0, 0), np.float32)
    return _Matrix(weights, base, tail, sent, order)


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

    *matrices* are ``(weights, tail)`` (``tail``: the most frequent rows last), or
    ``(weights, tail, order)``: only the rows ``order`` lists are synchronised, in that
    order (the ``n`` most frequent are its first ``n``; the subword model's n-gram
    buckets: those its words use, never the whole bucket matrix). ``n`` may be a list,
    one count per matrix (those given as None left out).
    """

    def __init__(
        self,
        group: Group,
        matrices: list[tuple],
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
        self.mats = [_matrix(*spec, depth=depth) for spec in matrices if spec[0] is not None]
        self.syncs = 0
        # depth + 1 sets of payload buffers, reused in turn (up to depth exchanges may
        # still run while the next payload is taken): fresh pages each sync cost more
        # than the snapshot's arithmetic
        self._arenas: list[dict[str, np.ndarray]] = [{} for _ in range(depth + 1)]
        self._turn = 0

    @property
    def n_rows(self) -> int:
        """The most rows any matrix synchronises (a sync of that many: the whole model)."""
        return max(m.length for m in self.mats)

    def row_bytes(self, d: int) -> float:
        """Bytes a synchronised row of *d* coordinates puts in the payload."""
        return (d + self.extra) * self.dtype.itemsize + (4 if self.quantized else 0)

    @property
    def model_bytes(self) -> int:
        """Bytes of the synchronised float32 rows of every matrix."""
        return sum(m.length * m.weights.shape[1] * 4 for m in self.mats)

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
                rows, idx = m.indexed(sl)
                _sync.snapshot_rows(rows, m.base[sl], sent, delta, part, self.coherent, top, idx)
            else:
                delta = m.take(sl) - m.base[sl]
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
                rows, idx = m.indexed(sl)
                ok = _sync.apply_rows(
                    part, delta, m.base[sl], rows, self.cap, self.coherent, exact, idx
                )
            else:
                weights = m.take(sl)
                ok = self._apply_numpy(m, sl, weights, delta, part, exact)
                m.put(sl, weights)
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

    def _apply_numpy(self, m: _Matrix, sl: slice, weights, delta, part, exact: bool) -> bool:
        """:meth:`apply` for float16 payloads (scaled), in NumPy: *weights* are rows *sl*
        (from :meth:`_Matrix.take`)."""
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
            weights[...] = m.base[sl]
        else:
            change -= delta
            weights += change
        return True

    def sync(self, n: int) -> None:
        """Snapshot, exchange and apply, with training stopped."""
        payload = self.snapshot(n)
        self.exchange(payload)
        self.apply(payload, exact=True)

    def reset(self) -> None:
        """Take the current weights as agreed (after a checkpoint was loaded into them)."""
        for m in self.mats:
            np.copyto(m.base, m.take(slice(None)))
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
