"""Exact search over one matrix: gensim's scores and order, with the top n found in one
streaming pass instead of a partition of every score, and batches as one pass over the
matrix (int8 with a proven bound, or blocked float32 GEMM).

One query (:meth:`ExactScan.top_rows`): the scores are gensim's own arithmetic
(``dot(vectors[lo:hi], mean) / norms[lo:hi]``, one ``sgemv`` on the same slice, so the
same floats), but the best ``w`` rows come from a heap the scores stream through
(:func:`vecserve.search._exact.top_k`), not from ``numpy.argpartition`` over all of them:
a partition of every score would cost most of a query, the stream a fraction of it.
The heap also keeps the ``w + 1``-th best: when the first ``w + 1`` scores are all
different, gensim's ``matutils.argsort`` can only return these rows in this order; when
two are equal (a tie, or a NaN among too few rows), gensim's own ``argsort`` decides, on
the same scores, so ties come out in gensim's order.

A batch (:meth:`ExactScan.batch`): one pass over the matrix for all queries, no
``queries x rows`` matrix ever. For a large matrix on a CPU with AVX-512 VNNI the pass is
in int8 (:class:`vecserve.search._exact.QuantizedRows`: every unit row as int8 codes,
made once, a quarter of the float32 bytes; four times float32's peak multiply rate on
AMD Zen 4): each query keeps the rows of its ``w + 1 +`` :data:`CANDIDATES` largest
UPPER BOUNDS of the cosine, each bound proven from the row's and the query's
quantisation errors (Cauchy-Schwarz, see ``_exact.h``). Elsewhere the pass is float32:
one ``sgemm`` per block of rows, each block's scores streamed into one heap per query
(:class:`vecserve.search._exact.Heaps`), ``w + 1 +`` :data:`EXTRA` candidates kept by
their GEMM scores. Either way the candidates are then scored again exactly as the
single query scores them, and the answer is kept only when it is proven to be the single
query's:

- an int8 upper bound is at least the true cosine; a GEMM score and gensim's ``sgemv``
  score of the same row differ by at most :func:`score_bound` (``(4 d + 32) 2**-24``:
  both are float32 dot products of the same unit-scaled vectors, whose error is at most
  ``d u |v| |q|`` each, Cauchy-Schwarz, plus the division by the norm), which also
  bounds gensim's score against the true cosine. So every row outside the candidates
  scores below the worst candidate's bound (or GEMM score) plus :func:`score_bound`;
  when that is below the ``w + 1``-th exact score, the exact top ``w + 1`` are all
  candidates;
- ``sgemv`` (OpenBLAS here) gives a row the same float whether it is scored among all
  rows or among any four, except for the few rows that end a block of its own threading
  or unrolling (at most a handful per matrix): :meth:`ExactScan.odd_rows` finds those
  once per matrix by scoring probe queries both ways, and a query whose candidates hold
  one is answered the single way;
- ties among the first ``w + 1`` exact scores are answered the single way too.

A query the int8 pass cannot prove is tried again with eight times the candidates
(and a scan whose batches keep leaving many unproven widens its first pass: real
embeddings' neighbourhoods are dense), then by the float32 pass; anything still not
proven (rare: ties, odd rows) by the single query path, so a batch's answers always
equal the single answers, scores to the bit.

>>> rng = np.random.default_rng(0)
>>> v = rng.standard_normal((30000, 16)).astype(np.float32)
>>> scan = ExactScan(v, np.linalg.norm(v, axis=1))
>>> q = v[:3] / np.linalg.norm(v[:3], axis=1, keepdims=True)
>>> one = [scan.top_rows(scan.scores(x), 5) for x in q]
>>> both = scan.batch(q, [5, 5, 5])
>>> all(list(o) == list(b[0]) for o, b in zip(one, both))
True
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from . import i8rows
from ._exact import VNNI, Heaps, QuantizedRows, top_k

__all__ = [
    "CANDIDATES",
    "EXTRA",
    "INT8_FROM_ROWS",
    "MAX_CANDIDATES",
    "ExactScan",
    "gensim_argsort",
    "score_bound",
]

REAL = np.float32

#: Candidates a batch keeps per query beyond the ``w + 1`` it needs: room for the
#: proof that no row outside them can rank (:func:`score_bound`).
EXTRA = 16
#: Candidates the int8 first pass keeps per query beyond the ``w + 1`` it needs (its
#: upper bounds are ~0.02 wide at 300 dims: a dense neighbourhood needs many).
CANDIDATES = 256
#: The most candidates the first int8 pass widens to (:meth:`ExactScan._widen`), when a
#: batch of at least ``WIDEN_FROM`` queries had fewer than ``WIDEN_BELOW`` proven by it.
MAX_CANDIDATES = 1024
WIDEN_FROM = 32
WIDEN_BELOW = 0.9
#: Matrices of fewer rows than this take the float32 pass: there its fewer candidates,
#: fixed costs and tighter bound answer a batch as fast or faster. Rows, not values: both
#: passes' cost a row grows with the dimensions, the int8 one's proof a query too. Set
#: from real embeddings, whose dense neighbourhoods need many int8 candidates: around
#: 200k rows trained on wiki100m the two passes answer about as fast, while generated
#: clusters favour int8 from far fewer rows; BENCHMARKS.md holds the figures.
INT8_FROM_ROWS = 300_000
#: What the float32 arithmetic of an int8 upper bound may lose (see ``_exact.h``).
I8_SLACK = 2.0**-18
#: Bytes of one block of rows a batch multiplies at a time (it and its scores stay in
#: the 32 MB L3 of this machine kind).
BLOCK_BYTES = 6 << 20
#: Below this many rows, or for fewer queries than this, a batch is answered query by
#: query (the single path is as fast there, and needs no probe).
BATCH_FROM_ROWS = 20_000
BATCH_FROM_QUERIES = 2
#: Random probe queries (besides one of wide dynamic range) that find the odd rows.
PROBES = 3


def gensim_argsort(x: np.ndarray, topn: int | None = None, reverse: bool = False):
    """``gensim.matutils.argsort``, line for line (so that ties break the same way)."""
    x = np.asarray(x)
    if topn is None:
        topn = x.size
    if topn <= 0:
        return []
    if reverse:
        x = -x
    if topn >= x.size:
        return np.argsort(x)[:topn]
    most_extreme = np.argpartition(x, topn)[:topn]
    return most_extreme.take(np.argsort(x.take(most_extreme)))


def score_bound(dim: int) -> float:
    """How far two float32 cosines of the same unit query and row may be apart when
    computed in different summation orders (see the module docstring).

    >>> score_bound(300) < 1e-4
    True
    """
    return (4 * dim + 32) * 2.0**-24


def _strictly_falling(values: np.ndarray) -> bool:
    return bool(np.all(values[:-1] > values[1:]))


class ExactScan:
    """Exact top-n over ``vectors`` (n x d float32, memory maps welcome) with ``norms``.

    Parameters
    ----------
    vectors : numpy.ndarray
        The rows, as gensim's ``KeyedVectors.vectors``.
    norms : numpy.ndarray
        Their L2 norms (float32), as gensim's ``fill_norms`` computes them.
    rows_file : path, optional
        Where the int8 rows of batches are kept for every process (a snapshot's
        :data:`vecserve.search.i8rows.FILE`); None: packed in this process's memory.
    """

    def __init__(
        self, vectors: np.ndarray, norms: np.ndarray, *, rows_file: str | os.PathLike | None = None
    ):
        self.vectors = vectors
        self.norms = norms
        self.rows_file = None if rows_file is None else Path(rows_file)
        self._inv: np.ndarray | None = None
        self._odd: np.ndarray | None = None
        self._i8: QuantizedRows | None = None
        #: The first pass of a batch: "int8" (a large matrix, AVX-512 VNNI here) or
        #: "float32" (GEMM).
        big = vectors.shape[0] >= INT8_FROM_ROWS
        self.first_pass = "int8" if VNNI and big else "float32"
        #: The int8 pass's SIMD loops (False: the portable C, for the tests).
        self.simd = VNNI
        #: Candidates the first int8 pass keeps per query beyond the ``w + 1`` it needs:
        #: :data:`CANDIDATES`, widened by the batches that need more (:meth:`_widen`).
        self.candidates = CANDIDATES
        self._lock = threading.Lock()

    # -- one query ------------------------------------------------------------------------

    def scores(self, mean: np.ndarray, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """gensim's ``dot(vectors[lo:hi], mean) / norms[lo:hi]``, the same floats."""
        hi = len(self.vectors) if hi is None else hi
        # OpenBLAS kernels can leave the invalid-operation flag set with finite results
        # (numpy#24067), which numpy reports as a warning; a real NaN score is still
        # handled by the top-n rules (never ranked).
        with np.errstate(invalid="ignore"):
            dists = np.dot(self.vectors[lo:hi], mean)
        np.divide(dists, self.norms[lo:hi], out=dists)
        return dists

    @staticmethod
    def top_rows(dists: np.ndarray, want: int) -> np.ndarray:
        """``gensim_argsort(dists, want, reverse=True)``: the same rows in the same order,
        found by one streaming pass (gensim's own sort where ties decide)."""
        if want <= 0:
            return np.empty(0, dtype=np.int64)
        if dists.dtype == REAL and dists.flags.c_contiguous and want < dists.size:
            rows, values = top_k(dists, want + 1)
            if len(rows) == want + 1 and _strictly_falling(values):
                return rows[:want]
        return np.asarray(gensim_argsort(dists, want, reverse=True), dtype=np.int64)

    # -- many queries ---------------------------------------------------------------------

    @property
    def inv_norms(self) -> np.ndarray:
        """``1 / norms`` (NaN-making zeros stay: a zero row's score is NaN, never ranked)."""
        if self._inv is None:
            with np.errstate(divide="ignore", invalid="ignore"):
                self._inv = (1.0 / np.asarray(self.norms, dtype=REAL)).astype(REAL)
        return self._inv

    def odd_rows(self) -> np.ndarray:
        """The rows whose ``sgemv`` score over the whole matrix may differ from their score
        among four rows (sorted): found once by probe queries scored both ways (and kept
        beside ``rows_file`` for the processes whose BLAS runs like this one's)."""
        with self._lock:
            if self._odd is None and self.rows_file is not None:
                n = len(self.vectors)
                self._odd = i8rows.odd_rows(self.rows_file, n, self._find_odd_rows)
            elif self._odd is None:
                self._odd = self._find_odd_rows()
            return self._odd

    def _find_odd_rows(self) -> np.ndarray:
        from threadpoolctl import threadpool_limits

        n, d = self.vectors.shape
        rng = np.random.default_rng(0)
        probes = [rng.choice([-1.0, 1.0], d) * 2.0 ** rng.uniform(-20, 0, d)]
        probes += [rng.standard_normal(d) for _ in range(PROBES)]
        odd: set[int] = set()
        block = 4096
        for probe in probes:
            q = (probe / np.linalg.norm(probe)).astype(REAL)
            whole = np.dot(self.vectors, q)
            with threadpool_limits(1):  # one thread: every 4096-row block is 4-row groups
                for lo in range(0, n, block):
                    hi = min(lo + block, n)
                    part = self._grouped(np.arange(lo, hi), q)
                    odd.update((lo + np.flatnonzero(part != whole[lo:hi])).tolist())
        return np.array(sorted(odd), dtype=np.int64)

    def _grouped(self, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
        """``dot(vectors[rows], q)`` with every row scored in a group of four."""
        block = np.asarray(self.vectors[rows], dtype=REAL)
        pad = -len(rows) % 4
        if pad:
            block = np.concatenate([block, np.zeros((pad, block.shape[1]), dtype=REAL)])
        return np.dot(block, q)[: len(rows)]

    def _rescore(self, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
        """The single query's score of each of ``rows`` (sorted), bit for bit: four rows
        a ``sgemv`` call (too small for BLAS to split among threads)."""
        block = np.asarray(self.vectors[rows], dtype=REAL)
        pad = -len(rows) % 4
        if pad:
            block = np.concatenate([block, np.zeros((pad, block.shape[1]), dtype=REAL)])
        out = np.empty(len(block), dtype=REAL)
        for lo in range(0, len(block), 4):
            out[lo : lo + 4] = np.dot(block[lo : lo + 4], q)
        dists = out[: len(rows)]
        np.divide(dists, self.norms[rows], out=dists)
        return dists

    def quantized(self) -> QuantizedRows | None:
        """The rows as int8 codes for the first pass of a batch (a quarter of the
        float32 matrix: mapped from ``rows_file``, packed into it by the first process
        that needs them, or packed in memory once where there is none), or None where
        that pass is not used: a CPU without AVX-512 VNNI or a matrix under
        :data:`INT8_FROM_ROWS` (``first_pass`` says ``"float32"``), or a matrix
        holding NaN or infinities."""
        if self.first_pass != "int8":
            return None
        with self._lock:
            if self._i8 is None:
                pool = scan_pool().map
                if self.rows_file is None:
                    self._i8 = QuantizedRows(self.vectors, self.norms, map=pool)
                else:
                    self._i8 = i8rows.load(self.rows_file, self.vectors, self.norms, map=pool)
            return self._i8 if self._i8.usable else None

    def batch(
        self, means: np.ndarray, wants: Sequence[int], *, threads: int = 2
    ) -> list[tuple[np.ndarray, np.ndarray] | None]:
        """For each unit query row ``means[i]``, ``(rows, scores)`` of its ``wants[i]``
        best rows over the whole matrix, exactly as :meth:`top_rows` of :meth:`scores`
        gives them; None for a query this cannot prove (ask the single path).

        The first pass is the int8 one (:meth:`quantized`; ``threads`` scan disjoint
        queries, the C releases the GIL; :attr:`candidates` kept per query), kept
        candidates widened once for the queries it cannot prove; the float32 GEMM
        blocks answer the rest, and where there is no int8 pass.
        """
        means = np.ascontiguousarray(means, dtype=REAL)
        m = len(means)
        n = len(self.vectors)
        out: list = [None] * m
        if m == 0 or n < BATCH_FROM_ROWS or m < BATCH_FROM_QUERIES:
            return out
        todo = np.arange(m)
        qr = self.quantized()
        if qr is not None:
            first = self.candidates
            for extra in (first, max(8 * CANDIDATES, 2 * first)):
                got = self._batch_int8(qr, means[todo], [wants[i] for i in todo], extra, threads)
                for i, g in zip(todo.tolist(), got, strict=True):
                    out[i] = g
                todo = np.array([i for i in todo.tolist() if out[i] is None], dtype=np.int64)
                if extra == first:
                    self._widen(m, m - len(todo))
                if len(todo) == 0:
                    return out
        if len(todo) >= BATCH_FROM_QUERIES:
            got = self._batch_gemm(means[todo], [wants[i] for i in todo], threads)
            for i, g in zip(todo.tolist(), got, strict=True):
                out[i] = g
        return out

    def _widen(self, asked: int, proven: int) -> None:
        """Double :attr:`candidates` (up to :data:`MAX_CANDIDATES`) when the first int8
        pass of a batch of at least :data:`WIDEN_FROM` queries proved fewer than
        :data:`WIDEN_BELOW` of them: real embeddings' neighbourhoods are dense (219k x
        300 trained on wiki100m: 54% proven with 256 candidates, 91% with 1,024), and a
        second pass over the matrix for the rest costs more than wider heaps."""
        if asked >= WIDEN_FROM and proven < WIDEN_BELOW * asked:
            self.candidates = min(MAX_CANDIDATES, 2 * self.candidates)

    def _batch_int8(self, qr, means, wants, extra, threads):
        """The int8 first pass for ``means`` (each query keeps ``max(wants) + 1 + extra``
        rows of the largest proven upper bounds), then each one proven."""
        m, d = means.shape
        out: list = [None] * m
        q64 = means.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            norm = np.linalg.norm(q64, axis=1)
            ok = np.isfinite(q64).all(axis=1) & (norm > 0.5) & (norm < 2.0)
            top = np.where(ok, np.abs(q64).max(axis=1), 1.0)
            scale = (top / 127).astype(REAL)
            codes = np.clip(np.rint(q64 / scale[:, None].astype(np.float64)), -127, 127)
            codes[~ok] = 0
        # rounded up: the float64 sums' own errors and float32's rounding
        err = np.linalg.norm(q64 - codes * scale[:, None].astype(np.float64), axis=1)
        err = (np.where(ok, err, 0.0) * (1 + 1e-6) + 1e-9).astype(REAL)
        norm = (np.where(ok, norm, 1.0) * (1 + 1e-6) + 1e-9).astype(REAL)
        packed = qr.pack_queries(codes.astype(np.int8))
        offset = (128 * codes.sum(axis=1)).astype(np.int32)
        k = min(self.vectors.shape[0], max(wants) + 1 + extra)
        heaps = Heaps(m, k)
        tiles = len(packed)
        step = max(1, -(-tiles // threads))
        parts = [(lo, min(lo + step, tiles)) for lo in range(0, tiles, step)]

        def scan(p):
            qr.scan(heaps, packed, scale, offset, norm, err, *p, I8_SLACK, self.simd)

        if len(parts) > 1:
            list(scan_pool().map(scan, parts))
        else:
            scan(parts[0])
        pos, upper = heaps.result()
        odd = self.odd_rows()
        bound = score_bound(d)
        for i in np.flatnonzero(ok).tolist():
            want = int(wants[i])
            # rows whose upper bound is below the (want + 1)-th lower bound (less twice
            # their bounds' width) cannot rank: only the others are scored again
            kept = pos[i] >= 0
            rows = pos[i][kept]
            width = qr.err[rows] * norm[i] + qr.unorm[rows] * err[i] + I8_SLACK
            lower = upper[i][kept] - 2 * width
            if len(rows) > want + 1:
                floor = np.partition(lower, len(rows) - want - 1)[len(rows) - want - 1]
                near = upper[i][kept] >= floor - 2 * bound
            else:
                near = np.ones(len(rows), dtype=bool)
            full = bool(kept.all())
            out[i] = self._prove(rows[near], upper[i][k - 1], full, means[i], want, odd, bound)
        return out

    def _batch_gemm(self, means, wants, threads):
        """The float32 first pass: one ``sgemm`` per block of rows for all queries,
        ``threads`` streaming the blocks' scores into the queries' heaps."""
        m = len(means)
        n, d = self.vectors.shape
        k = min(n, max(wants) + 1 + EXTRA)
        heaps = Heaps(m, k)
        inv = self.inv_norms
        block = max(256, min(65536, BLOCK_BYTES // (4 * max(d, m))) // 64 * 64)
        buf = np.empty((m, block), dtype=REAL)
        parts = [(lo, min(lo + -(-m // threads), m)) for lo in range(0, m, -(-m // threads))]
        pool = scan_pool() if len(parts) > 1 else None
        for lo in range(0, n, block):
            hi = min(lo + block, n)
            s = buf if hi - lo == block else np.empty((m, hi - lo), dtype=REAL)
            np.matmul(means, np.asarray(self.vectors[lo:hi]).T, out=s)
            scale = inv[lo:hi]
            if pool is None:
                heaps.push(s, scale, lo)
            else:
                list(
                    pool.map(lambda p, s=s, scale=scale, lo=lo: heaps.push(s, scale, lo, *p), parts)
                )
        pos, approx = heaps.result()
        odd = self.odd_rows()
        bound = score_bound(d)
        out = []
        for i in range(m):
            kept = pos[i] >= 0
            full = bool(kept.all())
            out.append(
                self._prove(
                    pos[i][kept], approx[i][k - 1], full, means[i], int(wants[i]), odd, bound
                )
            )
        return out

    def _prove(self, cand, worst, full, q, want, odd, bound):
        """The query's answer from its candidates ``cand`` (every row outside them scores
        at most ``worst + bound`` when the heap was ``full``), or None if not proven."""
        if want <= 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=REAL)
        cand = np.sort(cand)
        if len(cand) < want + 1 or (len(odd) and np.isin(cand, odd).any()):
            return None
        exact = self._rescore(cand, q)
        order = np.argsort(-exact, kind="stable")[: want + 1]
        top = exact[order]
        if not _strictly_falling(top) or np.isnan(top).any():
            return None
        if full and not worst + bound < top[want]:
            return None  # a row outside the candidates might rank
        return cand[order[:want]], top[:want]


_POOL = None
_POOL_LOCK = threading.Lock()


def scan_pool():
    """The process's threads for GIL-free scans (exact batches' heaps, the IVF scan's
    parts of a file), made on first use: one pool, so concurrent queries share the cores
    instead of each bringing threads of its own."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            from concurrent.futures import ThreadPoolExecutor

            _POOL = ThreadPoolExecutor(max(2, min(8, os.cpu_count() or 2)), "vecserve-scan")
        return _POOL
