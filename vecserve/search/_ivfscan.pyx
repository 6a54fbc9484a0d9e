# cython: language_level=3
"""The scan of an IVF query: the inner products of one unit query with the rows of
its ``nprobe`` lists, and the ``k`` best of them, in one C pass without the GIL.

The lists' rows are read straight from the memory-mapped file, as float32 or as
float16 (half the bytes: the scan is bound by memory bandwidth, so half the time).
float16 rows are widened to float32 in registers (F16C) and multiplied in float32
(FMA) on x86-64 CPUs that have AVX2; elsewhere, through a 65,536-entry table. The
best ``k`` are kept in a heap as the rows stream by: no score array, no sort of the
whole scan. Scores of float16 rows are those of the rounded rows (a relative error
of ~1e-3 on a coordinate): the caller re-scores its candidates exactly.

This module knows nothing of files or models; :class:`vecserve.search.ivf.IvfIndex` calls it.
"""

cimport cython
from libc.stdint cimport int64_t, uint16_t

import numpy as np

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
    #include <immintrin.h>
    #define VS_X86 1
    #endif

    static float vs_half_table[65536];

    /* IEEE 754 binary16 -> binary32, exactly (subnormals, infinities and NaN kept). */
    static float vs_half_to_float(uint16_t h) {
        uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
        uint32_t bits;
        if (exp == 0x1f) {
            bits = sign | 0x7f800000u | (man << 13);
        } else if (exp == 0) {
            if (man == 0) {
                bits = sign;
            } else {  /* subnormal: normalise */
                int e = -1;
                do { man <<= 1; e++; } while (!(man & 0x400));
                bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
            }
        } else {
            bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
        }
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }

    static void vs_scan_init(void) {
        for (uint32_t h = 0; h < 65536; h++) vs_half_table[h] = vs_half_to_float((uint16_t)h);
    }

    static float vs_dot_f16_table(const uint16_t *r, const float *q, int d) {
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
        int j = 0;
        for (; j + 4 <= d; j += 4) {
            a0 += vs_half_table[r[j]] * q[j];
            a1 += vs_half_table[r[j + 1]] * q[j + 1];
            a2 += vs_half_table[r[j + 2]] * q[j + 2];
            a3 += vs_half_table[r[j + 3]] * q[j + 3];
        }
        for (; j < d; j++) a0 += vs_half_table[r[j]] * q[j];
        return (a0 + a1) + (a2 + a3);
    }

    static float vs_dot_f32_plain(const float *r, const float *q, int d) {
        float a = 0.0f;
        for (int j = 0; j < d; j++) a += r[j] * q[j];
        return a;
    }

    #ifdef VS_X86
    #define VS_AVX2 __attribute__((target("avx2,fma,f16c")))
    VS_AVX2 static inline float vs_hsum(__m256 v) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }
    VS_AVX2 static float vs_dot_f16_avx2(const uint16_t *r, const float *q, int d) {
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int j = 0;
        for (; j + 16 <= d; j += 16) {
            __m256 r0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(r + j)));
            __m256 r1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(r + j + 8)));
            a0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q + j), a0);
            a1 = _mm256_fmadd_ps(r1, _mm256_loadu_ps(q + j + 8), a1);
        }
        for (; j + 8 <= d; j += 8) {
            __m256 r0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(r + j)));
            a0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q + j), a0);
        }
        float s = vs_hsum(_mm256_add_ps(a0, a1));
        for (; j < d; j++) s += vs_half_table[r[j]] * q[j];
        return s;
    }
    VS_AVX2 static float vs_dot_f32_avx2(const float *r, const float *q, int d) {
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int j = 0;
        for (; j + 16 <= d; j += 16) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(r + j), _mm256_loadu_ps(q + j), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(r + j + 8), _mm256_loadu_ps(q + j + 8), a1);
        }
        for (; j + 8 <= d; j += 8)
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(r + j), _mm256_loadu_ps(q + j), a0);
        float s = vs_hsum(_mm256_add_ps(a0, a1));
        for (; j < d; j++) s += r[j] * q[j];
        return s;
    }
    static int vs_portable = 0;  /* tests: the portable loops on any CPU */
    static int vs_have_avx2(void) {
        static int have = -1;
        if (vs_portable) return 0;
        if (have < 0) {
            __builtin_cpu_init();
            have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        }
        return have;
    }
    #else
    static int vs_portable = 0;
    static int vs_have_avx2(void) { return 0; }
    #endif

    /* A min-heap of the k best (score, position) pairs seen: heap[0] is the worst kept.
       Of tied scores, the lower position ranks first. */
    typedef struct { float s; int64_t p; } vs_pair;

    static inline int vs_worse(vs_pair a, vs_pair b) {
        return a.s < b.s || (a.s == b.s && a.p > b.p);
    }

    static void vs_sift_down(vs_pair *h, int64_t n, int64_t i) {
        for (;;) {
            int64_t l = 2 * i + 1, r = l + 1, m = i;
            if (l < n && vs_worse(h[l], h[m])) m = l;
            if (r < n && vs_worse(h[r], h[m])) m = r;
            if (m == i) return;
            vs_pair t = h[i]; h[i] = h[m]; h[m] = t;
            i = m;
        }
    }

    static inline void vs_offer(vs_pair *h, int64_t *n, int64_t k, float s, int64_t p) {
        uint32_t bits;  /* NaN and infinities never rank (by their bits: -ffast-math) */
        memcpy(&bits, &s, sizeof bits);
        if ((bits & 0x7f800000u) == 0x7f800000u) return;
        if (*n < k) {  /* sift up */
            int64_t i = (*n)++;
            h[i].s = s; h[i].p = p;
            while (i > 0) {
                int64_t up = (i - 1) / 2;
                if (!vs_worse(h[i], h[up])) break;
                vs_pair t = h[i]; h[i] = h[up]; h[up] = t;
                i = up;
            }
        } else if (s > h[0].s || (s == h[0].s && p < h[0].p)) {
            h[0].s = s; h[0].p = p;
            vs_sift_down(h, *n, 0);
        }
    }

    /* The k best rows of the spans [lo[i], hi[i]) of `rows` (d columns; half = float16)
       against q: positions into *pos best first, scores into *score; returns how many. */
    #ifndef VS_AHEAD
    #define VS_AHEAD 8
    #endif
    static int64_t vs_scan(const void *rows, int half, int d, const int64_t *lo,
                           const int64_t *hi, int64_t nspans, const float *q, int64_t k,
                           vs_pair *heap, int64_t *pos, float *score) {
        int64_t n = 0;
        int fast = vs_have_avx2();
        for (int64_t i = 0; i < nspans; i++) {
            for (int64_t p = lo[i]; p < hi[i]; p++) {
                float s;
                if (half) {
                    const uint16_t *r = (const uint16_t *)rows + (size_t)p * d;
                    if (p + VS_AHEAD < hi[i]) {
                        const char *c = (const char *)(r + (size_t)VS_AHEAD * d);
                        for (int b = 0; b < 2 * d; b += 64) __builtin_prefetch(c + b, 0, 0);
                    }
    #ifdef VS_X86
                    s = fast ? vs_dot_f16_avx2(r, q, d) : vs_dot_f16_table(r, q, d);
    #else
                    s = vs_dot_f16_table(r, q, d);
    #endif
                } else {
                    const float *r = (const float *)rows + (size_t)p * d;
    #ifdef VS_X86
                    s = fast ? vs_dot_f32_avx2(r, q, d) : vs_dot_f32_plain(r, q, d);
    #else
                    s = vs_dot_f32_plain(r, q, d);
    #endif
                }
                vs_offer(heap, &n, k, s, p);
            }
        }
        for (int64_t m = n; m > 0; m--) {  /* heap sort: the worst goes last */
            pos[m - 1] = heap[0].p;
            score[m - 1] = heap[0].s;
            heap[0] = heap[m - 1];
            vs_sift_down(heap, m - 1, 0);
        }
        return n;
    }
    """
    ctypedef struct vs_pair:
        float s
        int64_t p
    void vs_scan_init()
    int vs_have_avx2()
    int vs_portable
    int64_t vs_scan(const void *rows, int half, int d, const int64_t *lo, const int64_t *hi,
                    int64_t nspans, const float *q, int64_t k, vs_pair *heap, int64_t *pos,
                    float *score) nogil


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
    heap = np.empty(k * 16, dtype=np.uint8)  # k (float, int64) pairs, padded
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
                    <vs_pair *>&h[0], &p[0], &s[0])
    return pos[:n], score[:n]
