/* The IVF scan's C loops (vecserve/search/_ivfscan.pyx declares and calls them): the
 * inner products of one query with spans of float16 or float32 rows, and the k best kept
 * in the shared top-k heap (_topk.h) as the rows stream by.
 *
 * float16 rows are widened to float32 in registers (F16C) and multiplied in float32
 * (FMA) on x86-64 CPUs that have AVX2; elsewhere through a 65,536-entry table. Only the
 * extension includes this file, once: every function is static. */
#ifndef VECSERVE_IVFSCAN_H
#define VECSERVE_IVFSCAN_H

#include <stdint.h>
#include <string.h>

#include "_topk.h"
/* VS_NO_SIMD: build the portable loops only (they also run where the CPU lacks AVX2). */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(VS_NO_SIMD)
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
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400));
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
static int vs_portable = 0; /* tests: the portable loops on any CPU */
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
static int vs_have_avx2(void) {
    return 0;
}
#endif

/* Offer one score to a heap of the shared kind (_topk.h): here NaN and infinities never
   rank. Of tied scores, the lower position ranks first. */
static inline void vs_offer(vs_hit *h, int64_t *n, int64_t k, float s, int64_t p) {
    int32_t key = vs_key(s);
    if (key < VS_KEY_PINF && key > VS_KEY_NINF) vs_heap_offer(h, n, k, key, p);
}

/* The k best rows of the spans [lo[i], hi[i]) of `rows` (d columns; half = float16)
   against q: positions into *pos best first, scores into *score; returns how many. */
#ifndef VS_AHEAD
#define VS_AHEAD 8
#endif
static int64_t vs_scan(const void *rows, int half, int d, const int64_t *lo, const int64_t *hi,
                       int64_t nspans, const float *q, int64_t k, vs_hit *heap, int64_t *pos,
                       float *score) {
    int64_t n = 0;
#ifdef VS_X86
    int fast = vs_have_avx2();
#endif
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
    return vs_heap_drain(heap, n, pos, score);
}

/* A batch of queries (the rows of Q, m x d), each list read once for all the queries
   that probe it: group g is the rows [lo[g], hi[g]) and the queries
   qidx[qptr[g]:qptr[g + 1]]. Query i's k best (score, position) pairs are kept in
   heaps[i * k:], lens[i] of them; callers empty each heap with vs_heap_drain. A query's scores
   are the same floats as vs_scan's for it alone. */
static inline void vs_offer_row(vs_hit *heaps, int64_t *lens, int64_t k, int32_t q, float s,
                                int64_t p) {
    vs_offer(heaps + (size_t)q * k, lens + q, k, s, p);
}

static inline void vs_prefetch_row(const char *r, int64_t p, int64_t hi, size_t bytes) {
    if (p + VS_AHEAD < hi) {
        const char *c = r + (size_t)VS_AHEAD * bytes;
        for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b, 0, 0);
    }
}

static void vs_group_portable(const char *rows, int half, int d, int64_t lo, int64_t hi,
                              const int32_t *qs, int64_t nq, const float *Q, int64_t k,
                              vs_hit *heaps, int64_t *lens) {
    size_t bytes = (size_t)d * (half ? 2 : 4);
    for (int64_t p = lo; p < hi; p++) {
        const char *r = rows + (size_t)p * bytes;
        vs_prefetch_row(r, p, hi, bytes);
        for (int64_t t = 0; t < nq; t++) {
            const float *q = Q + (size_t)qs[t] * d;
            float s = half ? vs_dot_f16_table((const uint16_t *)r, q, d)
                           : vs_dot_f32_plain((const float *)r, q, d);
            vs_offer_row(heaps, lens, k, qs[t], s, p);
        }
    }
}

#ifdef VS_X86
/* Four queries against one row: the row's elements are loaded (and widened, for float16)
   once for the four. Each sum runs in vs_dot_f16_avx2's / vs_dot_f32_avx2's order. */
#define VS_INLINE __attribute__((always_inline)) inline
VS_AVX2 static VS_INLINE __m256 vs_load8(const char *r, int half, int j) {
    if (half) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)r + j)));
    return _mm256_loadu_ps((const float *)r + j);
}
VS_AVX2 static VS_INLINE void vs_dot4(const char *r, int half, const float *q0, const float *q1,
                                      const float *q2, const float *q3, int d, float *out) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, e0 = a0, e1 = a0;
    int j = 0;
    for (; j + 16 <= d; j += 16) {
        __m256 r0 = vs_load8(r, half, j), r1 = vs_load8(r, half, j + 8);
        a0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q0 + j), a0);
        a1 = _mm256_fmadd_ps(r1, _mm256_loadu_ps(q0 + j + 8), a1);
        b0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q1 + j), b0);
        b1 = _mm256_fmadd_ps(r1, _mm256_loadu_ps(q1 + j + 8), b1);
        c0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q2 + j), c0);
        c1 = _mm256_fmadd_ps(r1, _mm256_loadu_ps(q2 + j + 8), c1);
        e0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q3 + j), e0);
        e1 = _mm256_fmadd_ps(r1, _mm256_loadu_ps(q3 + j + 8), e1);
    }
    for (; j + 8 <= d; j += 8) {
        __m256 r0 = vs_load8(r, half, j);
        a0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q0 + j), a0);
        b0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q1 + j), b0);
        c0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q2 + j), c0);
        e0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q3 + j), e0);
    }
    out[0] = vs_hsum(_mm256_add_ps(a0, a1));
    out[1] = vs_hsum(_mm256_add_ps(b0, b1));
    out[2] = vs_hsum(_mm256_add_ps(c0, c1));
    out[3] = vs_hsum(_mm256_add_ps(e0, e1));
    for (; j < d; j++) {
        float x = half ? vs_half_table[((const uint16_t *)r)[j]] : ((const float *)r)[j];
        out[0] += x * q0[j];
        out[1] += x * q1[j];
        out[2] += x * q2[j];
        out[3] += x * q3[j];
    }
}
VS_AVX2 static VS_INLINE void vs_group_rows(const char *rows, int half, int d, int64_t lo,
                                            int64_t hi, const int32_t *qs, int64_t nq,
                                            const float *Q, int64_t k, vs_hit *heaps,
                                            int64_t *lens) {
    size_t bytes = (size_t)d * (half ? 2 : 4);
    for (int64_t p = lo; p < hi; p++) {
        const char *r = rows + (size_t)p * bytes;
        vs_prefetch_row(r, p, hi, bytes);
        int64_t t = 0;
        for (; t + 4 <= nq; t += 4) {
            float s[4];
            vs_dot4(r, half, Q + (size_t)qs[t] * d, Q + (size_t)qs[t + 1] * d,
                    Q + (size_t)qs[t + 2] * d, Q + (size_t)qs[t + 3] * d, d, s);
            for (int u = 0; u < 4; u++) vs_offer_row(heaps, lens, k, qs[t + u], s[u], p);
        }
        for (; t < nq; t++) {
            const float *q = Q + (size_t)qs[t] * d;
            float s = half ? vs_dot_f16_avx2((const uint16_t *)r, q, d)
                           : vs_dot_f32_avx2((const float *)r, q, d);
            vs_offer_row(heaps, lens, k, qs[t], s, p);
        }
    }
}
VS_AVX2 static void vs_group_avx2(const char *rows, int half, int d, int64_t lo, int64_t hi,
                                  const int32_t *qs, int64_t nq, const float *Q, int64_t k,
                                  vs_hit *heaps, int64_t *lens) {
    if (half) /* two copies of the loop, each with its row type fixed */
        vs_group_rows(rows, 1, d, lo, hi, qs, nq, Q, k, heaps, lens);
    else
        vs_group_rows(rows, 0, d, lo, hi, qs, nq, Q, k, heaps, lens);
}
#endif

static void vs_scan_groups(const void *rows, int half, int d, const int64_t *lo, const int64_t *hi,
                           const int64_t *qptr, const int32_t *qidx, int64_t ngroups,
                           const float *Q, int64_t k, vs_hit *heaps, int64_t *lens) {
#ifdef VS_X86
    int fast = vs_have_avx2();
#endif
    for (int64_t g = 0; g < ngroups; g++) {
        const int32_t *qs = qidx + qptr[g];
        int64_t nq = qptr[g + 1] - qptr[g];
#ifdef VS_X86
        if (fast) {
            vs_group_avx2((const char *)rows, half, d, lo[g], hi[g], qs, nq, Q, k, heaps, lens);
            continue;
        }
#endif
        vs_group_portable((const char *)rows, half, d, lo[g], hi[g], qs, nq, Q, k, heaps, lens);
    }
}

#endif /* VECSERVE_IVFSCAN_H */
