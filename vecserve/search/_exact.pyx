# cython: language_level=3
"""The top-k kernels of exact search (:mod:`vecserve.search.exact`): the ``k`` largest
scores of a stream, kept in a heap as the scores go by, without the GIL.

One score array (:func:`top_k`) replaces ``numpy.argpartition`` over every row of the
model (a few ns a row there, well under one here: a chunk of 16 scores is skipped after
one vectorised compare with the worst kept); a batch streams each block of its scores
matrix into one heap per query (:class:`Heaps`). The C is in ``_exact.h``. NaN never
ranks; of equal scores the earlier position is kept.
"""

cimport cython
from libc.stdint cimport int32_t, int64_t

import numpy as np

cdef extern from "_exact.h":
    ctypedef struct vs_hit:
        int32_t key
        int64_t pos
    void vs_topk_stream(const float *x, const float *scale, int64_t n, int64_t base,
                        vs_hit *h, int64_t *len, int64_t k) nogil
    int64_t vs_topk_drain(vs_hit *h, int64_t len, int64_t *pos, float *val) nogil
    void vs_topk_block(const float *S, int64_t m, int64_t b, int64_t ld, const float *scale,
                       int64_t base, vs_hit *heaps, int64_t *lens, int64_t k) nogil


def top_k(const float[::1] x, Py_ssize_t k):
    """The ``k`` largest finite-or-infinite values of ``x``: ``(positions, values)``, best
    first (fewer when ``x`` holds fewer that are not NaN; ties: the earlier position).

    >>> top_k(np.array([0.5, np.nan, 2.0, 0.5, -1.0], dtype=np.float32), 3)
    (array([2, 0, 3]), array([2. , 0.5, 0.5], dtype=float32))
    """
    k = max(0, min(k, x.shape[0]))
    heap = np.empty(max(k, 1) * sizeof(vs_hit), dtype=np.uint8)
    pos = np.empty(k, dtype=np.int64)
    val = np.empty(k, dtype=np.float32)
    cdef unsigned char[::1] h = heap
    cdef int64_t[::1] p = pos
    cdef float[::1] v = val
    cdef int64_t n = 0
    if k == 0:
        return pos, val
    with nogil:
        vs_topk_stream(&x[0], NULL, x.shape[0], 0, <vs_hit *>&h[0], &n, k)
        vs_topk_drain(<vs_hit *>&h[0], n, &p[0], &v[0])
    return pos[:n], val[:n]


cdef class Heaps:
    """One top-``k`` heap per query of a batch, fed block after block of scores.

    >>> hs = Heaps(2, 2)
    >>> hs.push(np.array([[1, 3, 2], [0, 0, 5]], dtype=np.float32),
    ...         np.ones(3, dtype=np.float32), 10)
    >>> hs.result()[0]
    array([[11, 12],
           [12, 10]])
    """

    cdef public Py_ssize_t m, k
    cdef object _heap
    cdef object _lens

    def __init__(self, Py_ssize_t m, Py_ssize_t k):
        self.m = m
        self.k = max(k, 1)
        self._heap = np.empty(m * self.k * sizeof(vs_hit), dtype=np.uint8)
        self._lens = np.zeros(m, dtype=np.int64)

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def push(self, scores, const float[::1] scale, int64_t base, Py_ssize_t lo=0,
             Py_ssize_t hi=-1):
        """Stream ``scores[q] * scale`` (rows ``lo:hi`` of the block, each a query's scores
        of rows ``base ...``) into those queries' heaps. ``scores``: float32, m x b, rows
        contiguous. Threads may push disjoint query ranges of one block at once."""
        cdef const float[:, ::1] s = scores
        if hi < 0:
            hi = self.m
        if s.shape[0] != self.m or s.shape[1] != scale.shape[0]:
            raise ValueError(f"scores {tuple(scores.shape)} for {self.m} queries and "
                             f"{scale.shape[0]} scales")
        if not 0 <= lo <= hi <= self.m:
            raise ValueError(f"query range [{lo}, {hi}) outside {self.m}")
        cdef unsigned char[::1] h = self._heap
        cdef int64_t[::1] lens = self._lens
        cdef int64_t b = s.shape[1], k = self.k
        if b == 0 or hi == lo:
            return
        with nogil:
            vs_topk_block(&s[lo, 0], hi - lo, b, b, &scale[0], base,
                          <vs_hit *>&h[0] + lo * k, &lens[lo], k)

    def result(self):
        """``(positions, values)``: m x k arrays, each row best first; rows with fewer
        hits than ``k`` are padded with position -1 and value NaN. Empties the heaps."""
        pos = np.full((self.m, self.k), -1, dtype=np.int64)
        val = np.full((self.m, self.k), np.nan, dtype=np.float32)
        cdef int64_t[:, ::1] p = pos
        cdef float[:, ::1] v = val
        cdef unsigned char[::1] h = self._heap
        cdef int64_t[::1] lens = self._lens
        cdef Py_ssize_t q
        cdef int64_t k = self.k
        with nogil:
            for q in range(self.m):
                vs_topk_drain(<vs_hit *>&h[0] + q * k, lens[q], &p[q, 0], &v[q, 0])
                lens[q] = 0
        return pos, val
