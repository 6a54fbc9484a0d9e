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
    void vs_ivf_batch(const float *ct, int64_t nlist, const void *rows, int half, int d,
                      const int64_t *offsets, const int64_t *ids, const float *Q, int64_t m,
                      int64_t nprobe, int64_t k, int64_t *near, int64_t *out, vs_hit *heaps,
                      int64_t *lens, int64_t *cnt, int32_t *qidx, float *sc) nogil


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


def pack_centroids(centroids):
    """``centroids`` (nlist x d) as :func:`search_batch` reads them: blocks of 8 centroids,
    dimension-major (``packed[b, j, l]`` is centroid ``8 b + l``'s coordinate ``j``), the
    last block padded with zero rows.

    >>> pack_centroids(np.arange(6, dtype=np.float32).reshape(3, 2))[0, :, :4]
    array([[0., 2., 4., 0.],
           [1., 3., 5., 0.]], dtype=float32)
    """
    c = np.asarray(centroids, dtype=np.float32)
    nlist, d = c.shape
    padded = np.zeros((-(-nlist // 8) * 8, d), dtype=np.float32)
    padded[:nlist] = c
    return np.ascontiguousarray(padded.reshape(-1, 8, d).transpose(0, 2, 1))


@cython.boundscheck(False)
@cython.wraparound(False)
def search_batch(const float[:, :, ::1] packed, Py_ssize_t nlist, rows,
                 const int64_t[::1] offsets, const int64_t[::1] ids,
                 const float[:, ::1] queries, Py_ssize_t nprobe, Py_ssize_t k):
    """An IVF search of a batch in one C call without the GIL: each query's ``nprobe``
    lists of the best centroid scores (``packed``: the ``nlist`` centroids as
    :func:`pack_centroids` gives them), then those lists' rows (list ``l`` is
    ``rows[offsets[l]:offsets[l + 1]]``) read once for all the queries probing them, and
    each query's ``k`` best rows by inner product kept.

    Returns ``(found, near)``: ``found[i]`` the ``ids`` of query ``i``'s ``k`` best rows,
    best first (ties: the earlier stored row), padded with -1; ``near[i]`` its lists,
    best first (ties: the lower list), padded with -1 (a query with NaN scores scans
    nothing). A query's centroid and row scores are the same floats alone or in a batch,
    so its answer is too.

    >>> c = np.array([[1, 0], [0, 1]], dtype=np.float32)
    >>> r = np.array([[1, 0], [0.8, 0.6], [0, 1], [0.6, 0.8]], dtype=np.float16)
    >>> offsets, ids = np.array([0, 2, 4]), np.array([10, 11, 12, 13])
    >>> q = np.array([[0.6, 0.8], [1, 0]], dtype=np.float32)
    >>> found, near = search_batch(pack_centroids(c), 2, r, offsets, ids, q, 1, 3)
    >>> found.tolist(), near.tolist()
    ([[13, 12, -1], [10, 11, -1]], [[1], [0]])
    """
    cdef Py_ssize_t m = queries.shape[0], d = queries.shape[1], l
    _check_rows(rows, d)
    cdef Py_ssize_t n_rows = rows.shape[0]
    if packed.shape[0] != (nlist + 7) // 8 or packed.shape[1] != d or packed.shape[2] != 8:
        raise ValueError(f"packed centroids of shape {packed.shape[0]} x {packed.shape[1]} x "
                         f"{packed.shape[2]} are not "
                         f"{nlist} centroids of {d} dimensions")
    if offsets.shape[0] != nlist + 1 or ids.shape[0] != n_rows:
        raise ValueError("offsets must have nlist + 1 entries and ids one per row")
    if offsets[0] != 0 or offsets[nlist] != n_rows:
        raise ValueError(f"offsets must run from 0 to the {n_rows} rows")
    for l in range(nlist):
        if offsets[l] > offsets[l + 1]:
            raise ValueError("offsets must not decrease")
    nprobe = max(0, min(nprobe, nlist))
    k = max(0, k)
    found = np.full((m, k), -1, dtype=np.int64)
    near = np.full((m, nprobe), -1, dtype=np.int64)
    if m == 0 or nprobe == 0 or d == 0:
        return found, near
    heaps = np.empty(m * max(k, nprobe) * sizeof(vs_hit), dtype=np.uint8)
    lens = np.empty(m, dtype=np.int64)
    cnt = np.empty(nlist + 1, dtype=np.int64)
    qidx = np.empty(m * nprobe, dtype=np.int32)
    sc = np.empty(4 * packed.shape[0] * 8, dtype=np.float32)
    cdef unsigned char[::1] h = heaps
    cdef int64_t[::1] ln = lens, ct = cnt
    cdef int32_t[::1] qi = qidx
    cdef float[::1] s = sc
    cdef int64_t[:, ::1] f = found, nr = near
    cdef const unsigned char[:, ::1] raw = rows.view(np.uint8)
    cdef int half = rows.dtype == np.float16
    cdef const void *rp = &raw[0, 0] if n_rows else NULL
    cdef const int64_t *ip = &ids[0] if n_rows else NULL
    cdef int64_t *fp = &f[0, 0] if k else NULL
    with nogil:
        vs_ivf_batch(&packed[0, 0, 0], nlist, rp, half, <int>d, &offsets[0], ip,
                     &queries[0, 0], m, nprobe, k, &nr[0, 0], fp, <vs_hit *>&h[0], &ln[0],
                     &ct[0], &qi[0], &s[0])
    return found, near
