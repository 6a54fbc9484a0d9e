# cython: language_level=3
"""The scan of an IVF query: the inner products of one unit query with the rows of
its ``nprobe`` lists, and the ``k`` best of them, in one C pass without the GIL; and of
a batch (:func:`search_batch`), each list read once for all the queries that probe it.

The lists' rows are read straight from the memory-mapped file, as float32, float16 or
int8 codes with one float32 scale a row (a quarter of float32's bytes: a large scan is
bound by memory bandwidth). float16 rows are widened to float32 in registers and
multiplied in float32 (FMA) on x86-64 CPUs that have AVX2; int8 rows are multiplied in
integers by the query's int16 codes (:func:`query_codes`), sixteen products an
instruction; elsewhere in portable C. The best ``k`` are kept in a heap as the rows stream
by: no score array, no sort of the whole scan. Scores of float16 and int8 rows are those
of the rounded rows (and, for int8, of the coded query): the caller re-scores its
candidates exactly.

The C loops are in ``_ivfscan.h`` beside this file; this module validates the arguments
and runs them in one ``nogil`` block. It knows nothing of files or models;
:class:`vecserve.search.ivf.IvfIndex` calls it.
"""

cimport cython
from libc.stdint cimport int16_t, int32_t, int64_t

import numpy as np

cdef extern from "_ivfscan.h":
    ctypedef struct vs_hit:
        pass
    void vs_scan_init()
    int vs_have_avx2()
    int vs_portable
    int64_t vs_scan(const void *rows, int kind, const float *scale, int d, const int64_t *lo,
                    const int64_t *hi, int64_t nspans, const float *q, int16_t *qc, int64_t k,
                    vs_hit *heap, int64_t *pos, float *score) nogil
    int vs_query_codes(const float *q, int d, int16_t *cq, float *t) nogil
    void vs_ivf_batch(const float *ct, int64_t nlist, const void *rows, int kind,
                      const float *scale, int d, const int64_t *offsets, const int64_t *ids,
                      const float *Q, int64_t m, int64_t nprobe, int64_t k, int64_t *near,
                      int64_t *out, vs_hit *heaps, int64_t *lens, int64_t *cnt, int32_t *qidx,
                      float *sc, int16_t *qc, float *qt) nogil


vs_scan_init()

#: Whether this CPU runs the AVX2 + FMA + F16C loops (else portable C).
SIMD = bool(vs_have_avx2())


def _portable(on: bool) -> None:
    """Run the portable C loops even where the CPU has AVX2 (for the tests)."""
    global vs_portable
    vs_portable = 1 if on else 0


cdef dict KINDS = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(np.int8): 2}


def query_codes(const float[::1] query):
    """The int16 codes and power-of-two scale ``t`` that int8 rows are multiplied by in
    place of ``query``: ``(codes, t)``, each code ``round(query[j] / t)``, ``t`` the least
    power of two that keeps every code within ``2**31 / (128 d)`` (and 32,767), so that an
    int8 row's inner product with the codes is an exact int32. Its score is
    ``float32(float32(codes . row) * scale) * t``. A query holding a NaN or an infinity has
    no codes (None): it scores nothing.

    >>> codes, t = query_codes(np.array([0.6, -0.8], dtype=np.float32))
    >>> codes.tolist(), t
    ([19661, -26214], 3.0517578125e-05)
    """
    cdef int d = query.shape[0]
    codes = np.zeros(d + 16, dtype=np.int16)
    cdef int16_t[::1] c = codes
    cdef float t = 1.0
    if d == 0:
        return codes[:0], t
    if not vs_query_codes(&query[0], d, &c[0], &t):
        return None
    return codes[:d], float(t)


def _kind(rows, Py_ssize_t d, scales):
    """The C loops' kind of ``rows`` (d columns), and its scales as float32 (int8 rows:
    one a row; float rows: None). Bad arguments raise ValueError in one line."""
    if rows.ndim != 2 or rows.shape[1] != d:
        raise ValueError(f"rows of shape {rows.shape} against queries of {d}")
    kind = KINDS.get(rows.dtype)
    if kind is None or not rows.flags.c_contiguous:
        raise ValueError(f"rows must be C-contiguous float16, float32 or int8, not {rows.dtype}")
    if kind != 2:
        if scales is not None:
            raise ValueError(f"{rows.dtype} rows take no scales")
        return kind, None
    if scales is None or scales.ndim != 1 or scales.shape[0] != rows.shape[0]:
        raise ValueError("int8 rows need scales: one float32 a row")
    if scales.dtype != np.float32 or not scales.flags.c_contiguous:
        raise ValueError(f"scales must be C-contiguous float32, not {scales.dtype}")
    return kind, scales


@cython.boundscheck(False)
@cython.wraparound(False)
def top_rows(rows, const int64_t[::1] lo, const int64_t[::1] hi, const float[::1] query,
             Py_ssize_t k, scales=None):
    """The ``k`` rows of ``rows[lo[i]:hi[i]]`` (all spans) with the largest inner product
    with ``query``, best first: ``(positions, scores)`` (int64, float32; fewer than ``k``
    if the spans hold fewer rows; ties: the earlier position first).

    ``rows``: a C-contiguous float32, float16 or int8 matrix of ``len(query)`` columns;
    int8 rows' scores are their codes' inner products with the query's codes
    (:func:`query_codes`) times ``scales`` (float32, one a row) times the query's scale.

    >>> r = np.array([[1, 0], [0, 1], [0.6, 0.8], [1, 1]], dtype=np.float16)
    >>> spans = np.array([0, 3]), np.array([2, 4])
    >>> top_rows(r, *spans, np.array([1, 0], dtype=np.float32), 2)
    (array([0, 3]), array([1., 1.], dtype=float32))
    >>> top_rows(r.astype(np.float32), *spans, np.array([0, 1], dtype=np.float32), 5)[0]
    array([1, 3, 0])
    >>> codes, scales = np.array([[127, 0], [0, 127]], np.int8), np.array([0.5, 1], np.float32)
    >>> top_rows(codes, np.array([0]), np.array([2]), np.array([1, 1], np.float32), 2, scales)
    (array([1, 0]), array([127. ,  63.5], dtype=float32))
    >>> top_rows(codes, np.array([0]), np.array([2]), np.array([0.3, 0.3], np.float32), 2, scales)
    (array([1, 0]), array([38.100388, 19.050194], dtype=float32))
    """
    if rows.ndim == 2 and rows.shape[1] != query.shape[0]:
        raise ValueError(f"rows of shape {rows.shape} against a query of {query.shape[0]}")
    kind, scales = _kind(rows, query.shape[0], scales)
    if lo.shape[0] != hi.shape[0]:
        raise ValueError("lo and hi must name the same number of spans")
    cdef Py_ssize_t i, n_rows = rows.shape[0]
    for i in range(lo.shape[0]):
        if not 0 <= lo[i] <= hi[i] <= n_rows:
            raise ValueError(f"span [{lo[i]}, {hi[i]}) is outside the {n_rows} rows")
    k = max(0, k)
    heap = np.empty(k * sizeof(vs_hit), dtype=np.uint8)
    qcodes = np.empty(query.shape[0] + 16, dtype=np.int16)
    pos = np.empty(k, dtype=np.int64)
    score = np.empty(k, dtype=np.float32)
    cdef unsigned char[::1] h = heap
    cdef int64_t[::1] p = pos
    cdef float[::1] s = score
    cdef int16_t[::1] qc = qcodes
    if k == 0 or lo.shape[0] == 0 or n_rows == 0 or query.shape[0] == 0:
        return pos[:0], score[:0]
    cdef const unsigned char[:, ::1] raw = rows.view(np.uint8)
    cdef const float[::1] sc
    cdef const float *sp = NULL
    if scales is not None:
        sc = scales
        sp = &sc[0]
    cdef int c_kind = kind, d = query.shape[0]
    cdef int64_t n = 0
    with nogil:
        n = vs_scan(&raw[0, 0], c_kind, sp, d, &lo[0], &hi[0], lo.shape[0], &query[0], &qc[0],
                    k, <vs_hit *>&h[0], &p[0], &s[0])
    return pos[:n], score[:n]


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


cdef class Searcher:
    """An IVF's arrays, checked once, searched by :meth:`search` in one C call without the
    GIL: each query's ``nprobe`` lists of the best centroid scores (``packed``: the
    ``nlist`` centroids as :func:`pack_centroids` gives them), then those lists' rows
    (list ``l`` is ``rows[offsets[l]:offsets[l + 1]]``) read once for all the queries
    probing them, and each query's ``k`` best rows by inner product kept (int8 rows:
    scored as :func:`top_rows` scores them). The arrays must outlive it unchanged (an
    :class:`~vecserve.search.ivf.IvfIndex` keeps both).

    >>> c = np.array([[1, 0], [0, 1]], dtype=np.float32)
    >>> r = np.array([[1, 0], [0.8, 0.6], [0, 1], [0.6, 0.8]], dtype=np.float16)
    >>> offsets, ids = np.array([0, 2, 4]), np.array([10, 11, 12, 13])
    >>> q = np.array([[0.6, 0.8], [1, 0]], dtype=np.float32)
    >>> found, near = Searcher(pack_centroids(c), 2, r, offsets, ids).search(q, 1, 3)
    >>> found.tolist(), near.tolist()
    ([[13, 12, -1], [10, 11, -1]], [[1], [0]])
    """

    cdef const float[:, :, ::1] packed
    cdef const int64_t[::1] offsets, ids
    cdef const unsigned char[:, ::1] raw
    cdef const float[::1] scv
    cdef const float *sp
    cdef const void *rp
    cdef const int64_t *ip
    cdef Py_ssize_t nlist, d
    cdef int kind

    def __init__(self, const float[:, :, ::1] packed, Py_ssize_t nlist, rows,
                 const int64_t[::1] offsets, const int64_t[::1] ids, scales=None):
        cdef Py_ssize_t l, d = packed.shape[1]
        kind, scales = _kind(rows, d, scales)
        cdef Py_ssize_t n_rows = rows.shape[0]
        if packed.shape[0] != (nlist + 7) // 8 or packed.shape[2] != 8:
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
        self.packed, self.offsets, self.ids = packed, offsets, ids
        self.raw = rows.view(np.uint8)
        self.nlist, self.d, self.kind = nlist, d, kind
        self.sp, self.rp, self.ip = NULL, NULL, NULL
        if scales is not None and n_rows:
            self.scv = scales
            self.sp = &self.scv[0]
        if n_rows:  # (the memoryviews keep the arrays the pointers point into alive)
            self.rp = &self.raw[0, 0]
            self.ip = &self.ids[0]

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def search(self, const float[:, ::1] queries, Py_ssize_t nprobe, Py_ssize_t k):
        """``(found, near)`` for the unit query rows: ``found[i]`` the ``ids`` of query
        ``i``'s ``k`` best rows, best first (ties: the earlier stored row), padded with -1;
        ``near[i]`` its lists, best first (ties: the lower list), padded with -1 (a query
        with NaN scores scans nothing). A query's centroid and row scores are the same
        floats alone or in a batch, so its answer is too (a batch of one reads its lists
        best first, a batch in the file's order: the same rows come out)."""
        cdef Py_ssize_t m = queries.shape[0], d = self.d, nlist = self.nlist
        if queries.shape[1] != d:
            raise ValueError(f"queries of {queries.shape[1]} dimensions against {d}")
        nprobe = max(0, min(nprobe, nlist))
        k = max(0, k)
        if m == 0 or nprobe == 0 or d == 0:
            return np.full((m, k), -1, dtype=np.int64), np.full((m, nprobe), -1, dtype=np.int64)
        found = np.empty((m, k), dtype=np.int64)  # the C fills every entry
        near = np.empty((m, nprobe), dtype=np.int64)
        # the C's scratch in one allocation: heaps, lens, cnt, qidx, centroid scores and (int8
        # rows) the queries' codes and scales, each part starting on 64 bytes
        cdef Py_ssize_t coded = self.kind == 2, at = 0, i
        cdef Py_ssize_t[7] size = [
            m * max(k, nprobe) * sizeof(vs_hit), m * 8, (nlist + 1) * 8, m * nprobe * 4,
            4 * self.packed.shape[0] * 8 * 4, coded * m * (d + 16) * 2, coded * m * 4]
        cdef Py_ssize_t[7] start
        for i in range(7):
            start[i] = at
            at += (size[i] + 63) // 64 * 64
        scratch = np.empty(at + 64, dtype=np.uint8)
        cdef unsigned char[::1] raw_scratch = scratch
        cdef unsigned char *base = &raw_scratch[0]
        base += (64 - <size_t>base % 64) % 64
        cdef int64_t[:, ::1] f = found, nr = near
        cdef int64_t *fp = &f[0, 0] if k else NULL
        with nogil:
            vs_ivf_batch(&self.packed[0, 0, 0], nlist, self.rp, self.kind, self.sp, <int>d,
                         &self.offsets[0], self.ip, &queries[0, 0], m, nprobe, k, &nr[0, 0], fp,
                         <vs_hit *>(base + start[0]), <int64_t *>(base + start[1]),
                         <int64_t *>(base + start[2]), <int32_t *>(base + start[3]),
                         <float *>(base + start[4]), <int16_t *>(base + start[5]),
                         <float *>(base + start[6]))
        return found, near


def search_batch(packed, Py_ssize_t nlist, rows, offsets, ids, queries, Py_ssize_t nprobe,
                 Py_ssize_t k, scales=None):
    """:meth:`Searcher.search` of ``queries`` over the arrays given, checked for this one
    call: ``(found, near)``."""
    return Searcher(packed, nlist, rows, offsets, ids, scales).search(queries, nprobe, k)
