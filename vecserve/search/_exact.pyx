# cython: language_level=3
"""The top-k kernels of exact search (:mod:`vecserve.search.exact`): the ``k`` largest
scores of a stream, kept in a heap as the scores go by, without the GIL.

One score array (:func:`top_k`) replaces ``numpy.argpartition`` over every row of the
model (a few ns a row there, well under one here: a chunk of 16 scores is skipped after
one vectorised compare with the worst kept); a batch streams each block of its scores
matrix into one heap per query (:class:`Heaps`); or a batch's int8 first pass
(:class:`QuantizedRows`) keeps in those heaps each query's rows of the largest proven
upper bounds of the cosine. The C is in ``_exact.h`` (the heap: ``_topk.h``). NaN never
ranks; of equal scores the earlier position is kept.
"""

cimport cython
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t

import numpy as np

cdef extern from "_exact.h":
    ctypedef struct vs_hit:
        int32_t key
        int64_t pos
    ctypedef struct vs_i8_rows:
        const uint8_t *codes
        const float *scale
        const float *err
        const float *unorm
        int64_t npanels, groups
    ctypedef struct vs_i8_queries:
        const int8_t *codes
        const float *scale
        const int32_t *offset
        const float *norm
        const float *err
    int VS_PANEL
    int VS_QT
    void vs_topk_stream(const float *x, const float *scale, int64_t n, int64_t base,
                        vs_hit *h, int64_t *len, int64_t k) nogil
    int64_t vs_heap_drain(vs_hit *h, int64_t len, int64_t *pos, float *val) nogil
    int32_t vs_key(float f) nogil
    int32_t VS_KEY_PINF
    int32_t VS_KEY_NINF
    int64_t vs_i8_pack(const float *v, int64_t ld, const float *norms, int64_t n, int d,
                       int64_t row0, uint8_t *codes, float *scale, float *err, float *unorm,
                       int64_t groups) nogil
    void vs_i8_scan(const vs_i8_rows *R, const vs_i8_queries *Q, int64_t t0, int64_t t1,
                    int64_t m, float slack, vs_hit *heaps, int64_t *lens, int64_t k,
                    int simd) nogil
    int vs_have_vnni()
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
        vs_heap_drain(<vs_hit *>&h[0], n, &p[0], &v[0])
    return pos[:n], val[:n]


cdef inline int32_t _rank_key(float f) nogil:
    """The shared heap's order-preserving key of f (_topk.h's vs_key), NaN below every number
    (vs_key maps a NaN beyond the infinities' keys)."""
    cdef int32_t key = vs_key(f)
    if key > VS_KEY_PINF or key < VS_KEY_NINF:
        return -0x7fffffff - 1
    return key


@cython.boundscheck(False)
@cython.wraparound(False)
def best_candidates(const float[:, ::1] scores, const int64_t[:, ::1] cand, excludes, tops):
    """Each query's answer from its candidates' exact scores: of row ``i``'s candidates
    ``cand[i]`` (-1: none), those not in ``excludes[i]`` (a list of row numbers), the best
    ``tops[i]`` by ``scores[i]``, best first; ties (and NaN, which ranks last) to the
    earlier candidate, as ``numpy.argsort(-scores, kind="stable")`` orders them.

    Returns ``(rows, values, counts)``: the answers' rows and scores (Python ints and
    floats) one query after another, and each query's count.

    >>> s = np.array([[0.5, 0.9, 0.5, np.nan, 0.7]], dtype=np.float32)
    >>> best_candidates(s, np.array([[4, 8, 3, 6, -1]]), [[8]], [4])
    ([4, 3, 6], [0.5, 0.5, nan], [3])
    """
    cdef Py_ssize_t m = scores.shape[0], k = scores.shape[1], i, j, t, n, top, at, w
    cdef int64_t c
    cdef int32_t key
    if cand.shape[0] != m or cand.shape[1] != k or len(excludes) != m or len(tops) != m:
        raise ValueError(f"{m} x {k} scores against {cand.shape[0]} x {cand.shape[1]} "
                         f"candidates, {len(excludes)} exclusions and {len(tops)} counts")
    width = 0
    for ex in excludes:
        width = max(width, len(ex))
    # one scratch: the kept candidates' keys and slots, best first, and a query's own rows
    scratch = np.empty(max(k, 1) * 12 + max(width, 1) * 8, dtype=np.uint8)
    cdef unsigned char[::1] raw = scratch
    cdef int64_t *sl = <int64_t *>&raw[0]
    cdef int64_t *ow = sl + max(k, 1)
    cdef int32_t *bk = <int32_t *>(ow + max(width, 1))
    rows, values, counts = [], [], []
    for i in range(m):
        top = max(0, min(<Py_ssize_t>tops[i], k))
        ex = excludes[i]
        w = len(ex)
        for t in range(w):
            ow[t] = ex[t]
        n = 0
        for j in range(k if top > 0 else 0):
            c = cand[i, j]
            if c < 0:
                continue
            for t in range(w):
                if ow[t] == c:
                    break
            else:
                key = _rank_key(scores[i, j])
                if n == top and key <= bk[n - 1]:
                    continue  # no better than the worst kept, and later
                at = n if n < top else top - 1
                while at > 0 and key > bk[at - 1]:
                    bk[at] = bk[at - 1]
                    sl[at] = sl[at - 1]
                    at -= 1
                bk[at] = key
                sl[at] = j
                if n < top:
                    n += 1
        for t in range(n):
            rows.append(cand[i, sl[t]])
            values.append(scores[i, sl[t]])
        counts.append(n)
    return rows, values, counts


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
                vs_heap_drain(<vs_hit *>&h[0] + q * k, lens[q], &p[q, 0], &v[q, 0])
                lens[q] = 0
        return pos, val


#: Whether this CPU runs the int8 first pass with AVX-512 VNNI (else portable C, slow:
#: :mod:`vecserve.search.exact` uses float32 GEMM blocks there instead).
VNNI = bool(vs_have_vnni())

#: Rows packed at a time (a multiple of a panel pair's 32 rows).
PACK_ROWS = 1 << 16
#: Rows a panel of :class:`QuantizedRows` (its per-row arrays hold whole panels).
PANEL = VS_PANEL


def layout(Py_ssize_t n, Py_ssize_t d):
    """``(groups, npanels)`` of :class:`QuantizedRows` of ``n`` x ``d``: groups of 4
    dimensions, and panels of :data:`PANEL` rows (an even number): its ``codes`` are
    ``npanels * groups * 64`` bytes, its per-row arrays ``npanels * PANEL`` floats.

    >>> layout(33, 300)
    (75, 4)
    """
    return (d + 3) // 4, (max(n, 1) + 2 * VS_PANEL - 1) // (2 * VS_PANEL) * 2


cdef class QuantizedRows:
    """Every row of a matrix as int8 codes of its unit vector (``vectors[r] / norms[r]``),
    with each row's scale, its quantisation error ``|u - s c|`` and ``|s c|`` (both
    rounded up): the data of the int8 first pass. About a quarter of the float32 matrix.

    ``usable`` is False when a row holds a NaN or an infinity (the pass must not be used).

    >>> v = np.array([[3, 4], [0, 0], [1, 0]], dtype=np.float32)
    >>> qr = QuantizedRows(v, np.linalg.norm(v, axis=1).astype(np.float32))
    >>> qr.n, qr.usable, bool(qr.err[1] < 0), bool(0 < qr.err[2] < 1e-8)  # [1, 0] is exact
    (3, True, True, True)
    """

    cdef public object codes, scale, err, unorm
    cdef public Py_ssize_t n, d, groups, npanels
    cdef public bint usable

    def __init__(self, vectors, norms, map=map, out=None):
        """``map``: runs the packing of chunks of rows (a thread pool's ``map`` packs
        them in parallel: the C releases the GIL). ``out``: the four arrays to pack into
        (``codes``, ``scale``, ``err``, ``unorm``, of :func:`layout`'s sizes: a file's
        memory map, say), else new ones."""
        self.n, self.d = vectors.shape
        self.groups, self.npanels = layout(self.n, self.d)
        rows = self.npanels * VS_PANEL
        if out is None:
            out = (np.empty(self.npanels * self.groups * 64, dtype=np.uint8),
                   np.empty(rows, dtype=np.float32), np.empty(rows, dtype=np.float32),
                   np.empty(rows, dtype=np.float32))
        self.codes, self.scale, self.err, self.unorm = out
        if self.codes.shape != (self.npanels * self.groups * 64,) or any(
                a.shape != (rows,) for a in out[1:]):
            raise ValueError(f"arrays of the wrong sizes for {self.n} x {self.d} rows")
        self.codes[:] = 128
        self.scale[:] = 0
        self.err[:] = -1e30  # VS_ZERO_ERR: a row that never ranks
        self.unorm[:] = 0
        bad = sum(map(lambda lo: self._pack(vectors, norms, lo), range(0, self.n, PACK_ROWS)))
        self.usable = bad == 0

    @staticmethod
    def mapped(codes, scale, err, unorm, Py_ssize_t n, Py_ssize_t d, bint usable):
        """Rows packed before (by :meth:`__init__` into these arrays, read-only maps of
        a file welcome), checked for their sizes only."""
        groups, npanels = layout(n, d)
        rows = npanels * VS_PANEL
        if codes.shape != (npanels * groups * 64,) or any(
                a.shape != (rows,) for a in (scale, err, unorm)):
            raise ValueError(f"arrays of the wrong sizes for {n} x {d} rows")
        cdef QuantizedRows qr = QuantizedRows.__new__(QuantizedRows)
        qr.n, qr.d, qr.groups, qr.npanels = n, d, groups, npanels
        qr.codes, qr.scale, qr.err, qr.unorm = codes, scale, err, unorm
        qr.usable = usable
        return qr

    def _pack(self, vectors, norms, int64_t lo):
        """Rows ``lo:lo + PACK_ROWS`` (whole panels: chunks may be packed at once)."""
        cdef int64_t hi = min(lo + PACK_ROWS, self.n), bad = 0
        cdef uint8_t[::1] c = self.codes
        cdef float[::1] s = self.scale, e = self.err, u = self.unorm
        cdef const float[:, ::1] v = np.ascontiguousarray(vectors[lo:hi], dtype=np.float32)
        cdef const float[::1] nv = np.ascontiguousarray(norms[lo:hi], dtype=np.float32)
        with nogil:
            bad = vs_i8_pack(&v[0, 0], v.shape[1], &nv[0], hi - lo, self.d, lo, &c[0], &s[0],
                             &e[0], &u[0], self.groups)
        return bad

    def pack_queries(self, codes):
        """Queries' int8 codes (m x d) laid out for :meth:`scan`: tiles of :data:`TILE`
        queries, each 4 dimensions at a time (zeros past the last query and dimension)."""
        m, d = codes.shape
        tiles = (m + VS_QT - 1) // VS_QT
        out = np.zeros((tiles * VS_QT, 4 * self.groups), dtype=np.int8)
        out[:m, :d] = codes
        out = out.reshape(tiles, VS_QT, self.groups, 4).transpose(0, 2, 1, 3)
        return np.ascontiguousarray(out).reshape(tiles, -1)

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def scan(self, Heaps heaps, const int8_t[:, ::1] codes, const float[::1] scale,
             const int32_t[::1] offset, const float[::1] norm, const float[::1] err,
             Py_ssize_t lo, Py_ssize_t hi, float slack, bint simd=True):
        """The query tiles ``lo:hi`` (``codes`` from :meth:`pack_queries`; per query
        ``scale``, ``offset`` = 128 x the codes' sum, ``norm`` and ``err``, both rounded
        up) against every row: each query's heap in ``heaps`` keeps the rows of the ``k``
        largest upper bounds of the cosine (plus ``slack``). Threads may scan disjoint
        tiles at once."""
        cdef Py_ssize_t m = heaps.m
        cdef Py_ssize_t tiles = (m + VS_QT - 1) // VS_QT
        if codes.shape[0] != tiles or codes.shape[1] != 4 * VS_QT * self.groups:
            raise ValueError(f"query codes {codes.shape[0]} x {codes.shape[1]} are not "
                             f"{m} queries packed by pack_queries")
        if not scale.shape[0] == offset.shape[0] == norm.shape[0] == err.shape[0] == m:
            raise ValueError(f"query scales, offsets, norms and errors for {m} queries")
        if not 0 <= lo <= hi <= tiles:
            raise ValueError(f"tile range [{lo}, {hi}) outside {tiles}")
        cdef const uint8_t[::1] c = self.codes
        cdef const float[::1] s = self.scale, e = self.err, u = self.unorm
        cdef vs_i8_rows R
        cdef vs_i8_queries Q
        cdef unsigned char[::1] h = heaps._heap
        cdef int64_t[::1] lens = heaps._lens
        if hi == lo or self.n == 0:
            return
        R.codes = &c[0]
        R.scale = &s[0]
        R.err = &e[0]
        R.unorm = &u[0]
        R.npanels = self.npanels
        R.groups = self.groups
        Q.codes = &codes[0, 0]
        Q.scale = &scale[0]
        Q.offset = &offset[0]
        Q.norm = &norm[0]
        Q.err = &err[0]
        cdef int use_simd = 1 if simd and VNNI else 0
        with nogil:
            vs_i8_scan(&R, &Q, lo, hi, m, slack, <vs_hit *>&h[0], &lens[0], heaps.k, use_simd)


#: Queries a tile of the int8 pass (:meth:`QuantizedRows.pack_queries`).
TILE = VS_QT
