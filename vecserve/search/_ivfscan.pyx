# cython: language_level=3
"""The scan of an IVF query: the inner products of one unit query with the rows of
its ``nprobe`` lists, and the ``k`` best of them, in one C pass without the GIL; and of
a batch (:func:`top_rows_grouped`), each list read once for all the queries that probe it.

The lists' rows are read straight from the memory-mapped file, as float32 or as
float16 (half the bytes: the scan is bound by memory bandwidth, so half the time).
float16 rows are widened to float32 in registers (F16C) and multiplied in float32
(FMA) on x86-64 CPUs that have AVX2; elsewhere, through a 65,536-entry table. The
best ``k`` are kept in a heap as the rows stream by: no score array, no sort of the
whole scan. Scores of float16 rows are those of the rounded rows (a relative error
of ~1e-3 on a coordinate): the caller re-scores its candidates exactly.

The C loops are in ``_ivfscan.h`` beside this file; this module validates the arguments
and runs them in one ``nogil`` block. It knows nothing of files or models;
:class:`vecserve.search.ivf.IvfIndex` calls it.
"""

cimport cython
from libc.stdint cimport int32_t, int64_t, uint16_t

import numpy as np

cdef extern from "_ivfscan.h":
    ctypedef struct vs_hit:
        pass
    void vs_scan_init()
    int vs_have_avx2()
    int vs_portable
    int64_t vs_scan(const void *rows, int half, int d, const int64_t *lo, const int64_t *hi,
                    int64_t nspans, const float *q, int64_t k, vs_hit *heap, int64_t *pos,
                    float *score) nogil
    void vs_scan_groups(const void *rows, int half, int d, const int64_t *lo, const int64_t *hi,
                        const int64_t *qptr, const int32_t *qidx, int64_t ngroups,
                        const float *Q, int64_t k, vs_hit *heaps, int64_t *lens) nogil
    int64_t vs_heap_drain(vs_hit *heap, int64_t n, int64_t *pos, float *score) nogil


vs_scan_init()

#: Whether this CPU runs the AVX2 + FMA + F16C loops (else portable C).
SIMD = bool(vs_have_avx2())


def _portable(on: bool) -> None:
    """Run the portable C loops even where the CPU has AVX2 (for the tests)."""
    global vs_portable
    vs_portable = 1 if on else 0


@cython.boundscheck(False)
@cython.wraparound(False)
def top_rows(rows, const int64_t[::1] lo, const int64_t[::1] hi, const float[::1] query,
             Py_ssize_t k):
    """The ``k`` rows of ``rows[lo[i]:hi[i]]`` (all spans) with the largest inner product
    with ``query``, best first: ``(positions, scores)`` (int64, float32; fewer than ``k``
    if the spans hold fewer rows; ties: the earlier position first).

    ``rows``: a C-contiguous float32 or float16 matrix of ``len(query)`` columns.

    >>> r = np.array([[1, 0], [0, 1], [0.6, 0.8], [1, 1]], dtype=np.float16)
    >>> spans = np.array([0, 3]), np.array([2, 4])
    >>> top_rows(r, *spans, np.array([1, 0], dtype=np.float32), 2)
    (array([0, 3]), array([1., 1.], dtype=float32))
    >>> top_rows(r.astype(np.float32), *spans, np.array([0, 1], dtype=np.float32), 5)[0]
    array([1, 3, 0])
    """
    if rows.ndim != 2 or rows.shape[1] != query.shape[0]:
        raise ValueError(f"rows of shape {rows.shape} against a query of {query.shape[0]}")
    if rows.dtype not in (np.float16, np.float32) or not rows.flags.c_contiguous:
        raise ValueError(f"rows must be C-contiguous float16 or float32, not {rows.dtype}")
    if lo.shape[0] != hi.shape[0]:
        raise ValueError("lo and hi must name the same number of spans")
    cdef Py_ssize_t i, n_rows = rows.shape[0]
    for i in range(lo.shape[0]):
        if not 0 <= lo[i] <= hi[i] <= n_rows:
            raise ValueError(f"span [{lo[i]}, {hi[i]}) is outside the {n_rows} rows")
    k = max(0, k)
    heap = np.empty(k * sizeof(vs_hit), dtype=np.uint8)
    pos = np.empty(k, dtype=np.int64)
    score = np.empty(k, dtype=np.float32)
    cdef unsigned char[::1] h = heap
    cdef int64_t[::1] p = pos
    cdef float[::1] s = score
    cdef const unsigned char[:, ::1] raw = rows.view(np.uint8)
    cdef int half = rows.dtype == np.float16
    cdef int d = query.shape[0]
    cdef int64_t n = 0
    if k == 0 or lo.shape[0] == 0 or n_rows == 0 or d == 0:
        return pos[:0], score[:0]
    with nogil:
        n = vs_scan(&raw[0, 0], half, d, &lo[0], &hi[0], lo.shape[0], &query[0], k,
                    <vs_hit *>&h[0], &p[0], &s[0])
    return pos[:n], score[:n]


def _check_rows(rows, Py_ssize_t d):
    if rows.ndim != 2 or rows.shape[1] != d:
        raise ValueError(f"rows of shape {rows.shape} against queries of {d}")
    if rows.dtype not in (np.float16, np.float32) or not rows.flags.c_contiguous:
        raise ValueError(f"rows must be C-contiguous float16 or float32, not {rows.dtype}")


@cython.boundscheck(False)
@cython.wraparound(False)
def top_rows_grouped(rows, const int64_t[::1] lo, const int64_t[::1] hi,
                     const int64_t[::1] qptr, const int32_t[::1] qidx,
                     const float[:, ::1] queries, Py_ssize_t k):
    """The ``k`` best rows of each query of a batch among the groups it is named in:
    group ``g`` is the rows ``rows[lo[g]:hi[g]]`` and the queries
    ``qidx[qptr[g]:qptr[g + 1]]`` (rows of ``queries``). Each group's rows are read
    once for all its queries, four queries at a time.

    Returns ``(positions, scores)``: ``len(queries) x k`` arrays, each row best first
    (ties: the earlier position), padded with position -1 and score -inf. A query's
    scores are the floats :func:`top_rows` gives it alone.

    >>> r = np.array([[1, 0], [0, 1], [0.6, 0.8], [1, 1]], dtype=np.float16)
    >>> q = np.array([[1, 0], [0, 1]], dtype=np.float32)
    >>> lo, hi = np.array([0, 2]), np.array([2, 4])  # two lists
    >>> qptr, qidx = np.array([0, 2, 3]), np.array([0, 1, 1], dtype=np.int32)  # 0: the first
    >>> top_rows_grouped(r, lo, hi, qptr, qidx, q, 2)[0]
    array([[0, 1],
           [1, 3]])
    """
    cdef Py_ssize_t m = queries.shape[0], d = queries.shape[1], g, i
    _check_rows(rows, d)
    cdef Py_ssize_t ngroups = lo.shape[0], n_rows = rows.shape[0], nidx = qidx.shape[0]
    if hi.shape[0] != ngroups or qptr.shape[0] != ngroups + 1:
        raise ValueError("lo, hi and qptr must describe the same groups")
    if ngroups and not (qptr[0] == 0 and qptr[ngroups] == nidx):
        raise ValueError("qptr must run from 0 to len(qidx)")
    for g in range(ngroups):
        if not 0 <= lo[g] <= hi[g] <= n_rows:
            raise ValueError(f"span [{lo[g]}, {hi[g]}) is outside the {n_rows} rows")
        if qptr[g] > qptr[g + 1]:
            raise ValueError("qptr must not decrease")
    for i in range(nidx):
        if not 0 <= qidx[i] < m:
            raise ValueError(f"query {qidx[i]} is outside the {m} queries")
    k = max(0, k)
    pos = np.full((m, k), -1, dtype=np.int64)
    score = np.full((m, k), -np.inf, dtype=np.float32)
    if k == 0 or m == 0 or ngroups == 0 or n_rows == 0 or d == 0:
        return pos, score
    heaps = np.empty(m * k * sizeof(vs_hit), dtype=np.uint8)  # k hits a query
    lens = np.zeros(m, dtype=np.int64)
    cdef unsigned char[::1] h = heaps
    cdef int64_t[::1] n = lens
    cdef int64_t[:, ::1] p = pos
    cdef float[:, ::1] s = score
    cdef const unsigned char[:, ::1] raw = rows.view(np.uint8)
    cdef int half = rows.dtype == np.float16
    cdef vs_hit *hp = <vs_hit *>&h[0]
    with nogil:
        vs_scan_groups(&raw[0, 0], half, <int>d, &lo[0], &hi[0], &qptr[0], &qidx[0], ngroups,
                       &queries[0, 0], k, hp, &n[0])
        for i in range(m):
            vs_heap_drain(hp + i * k, n[i], &p[i, 0], &s[i, 0])
    return pos, score
