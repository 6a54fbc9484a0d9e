/* The IVF scan's C loops (vecserve/search/_ivfscan.pyx declares and calls them): the
 * inner products of one query with spans of stored rows, and the k best kept in the shared
 * top-k heap (_topk.h) as the rows stream by.
 *
 * Rows are stored as float32, float16 or int8 codes with one float32 scale a row.
 * float16 rows are widened to float32 in registers (F16C) and multiplied in float32 (FMA)
 * on x86-64 CPUs that have AVX2; elsewhere in portable C (through a 65,536-entry table).
 * int8 rows are multiplied in integers: the query is coded once as int16 codes with a
 * power-of-two scale (vs_query_codes), a row's score is the exact int32 inner product of
 * the two codes times the row's scale times the query's (AVX2: eight rows a step, sixteen
 * products an instruction; else portable C). Only the extension includes this file,
 * once: every function is static. */
#ifndef VECSERVE_IVFSCAN_H
#define VECSERVE_IVFSCAN_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_topk.h"
/* VS_NO_SIMD: build the portable loops only (they also run where the CPU lacks AVX2). */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(VS_NO_SIMD)
#include <immintrin.h>
#define VS_X86 1
#endif

/* How the rows are stored (the kind argument of every loop). */
enum { VS_F32 = 0, VS_F16 = 1, VS_I8 = 2 };

static inline size_t vs_row_bytes(int kind, int d) {
    return (size_t)d * (kind == VS_F32 ? 4 : kind == VS_F16 ? 2 : 1);
}

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

/* Portable inner products of a stored float row with a query (four sums, then added). */
static float vs_dot_plain(const char *r, int kind, const float *q, int d) {
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    int j = 0;
#define VS_PLAIN(X)                                                                                \
    for (; j + 4 <= d; j += 4) {                                                                   \
        a0 += X(j) * q[j];                                                                         \
        a1 += X(j + 1) * q[j + 1];                                                                 \
        a2 += X(j + 2) * q[j + 2];                                                                 \
        a3 += X(j + 3) * q[j + 3];                                                                 \
    }                                                                                              \
    for (; j < d; j++) a0 += X(j) * q[j];
#define VS_F32_AT(j) (((const float *)r)[j])
#define VS_F16_AT(j) (vs_half_table[((const uint16_t *)r)[j]])
    if (kind == VS_F16) {
        VS_PLAIN(VS_F16_AT)
    } else {
        VS_PLAIN(VS_F32_AT)
    }
#undef VS_PLAIN
    return (a0 + a1) + (a2 + a3);
}

#ifdef VS_X86
#define VS_AVX2 __attribute__((target("avx2,fma,f16c")))
#define VS_INLINE __attribute__((always_inline)) inline
VS_AVX2 static inline float vs_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
/* The last d % 8 products of a row added to s, one at a time in order, each by an explicit
   fused multiply-add: every AVX2 loop ends its sums here, and the compiler may neither
   contract nor reorder these (plain arithmetic is contracted, or not, as the build's flags
   say: under -ffast-math it was, differently in different loops), so a query's score is
   the same float whichever loop computed it. */
VS_AVX2 static VS_INLINE float vs_tail(const char *r, int kind, const float *q, int j, int d,
                                       float s) {
    __m128 acc = _mm_set_ss(s);
    for (; j < d; j++) {
        float x = kind == VS_F16 ? VS_F16_AT(j) : VS_F32_AT(j);
        acc = _mm_fmadd_ss(_mm_set_ss(x), _mm_set_ss(q[j]), acc);
    }
    return _mm_cvtss_f32(acc);
}
/* Eight elements of a row from element j, as float32. */
VS_AVX2 static VS_INLINE __m256 vs_load8(const char *r, int kind, int j) {
    if (kind == VS_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)r + j)));
    return _mm256_loadu_ps((const float *)r + j);
}
/* One row, one query: two sums of eight lanes, then the tail. */
VS_AVX2 static VS_INLINE float vs_dot_avx2(const char *r, int kind, const float *q, int d) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int j = 0;
    for (; j + 16 <= d; j += 16) {
        a0 = _mm256_fmadd_ps(vs_load8(r, kind, j), _mm256_loadu_ps(q + j), a0);
        a1 = _mm256_fmadd_ps(vs_load8(r, kind, j + 8), _mm256_loadu_ps(q + j + 8), a1);
    }
    for (; j + 8 <= d; j += 8)
        a0 = _mm256_fmadd_ps(vs_load8(r, kind, j), _mm256_loadu_ps(q + j), a0);
    float s = vs_hsum(_mm256_add_ps(a0, a1));
    return j < d ? vs_tail(r, kind, q, j, d, s) : s;
}
#endif
#undef VS_F32_AT
#undef VS_F16_AT

static int vs_portable = 0; /* tests: the portable loops on any CPU */
static int vs_have_avx2(void) {
#ifdef VS_X86
    static int have = -1;
    if (vs_portable) return 0;
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    }
    return have;
#else
    return 0;
#endif
}

/* Offer one score to a heap of the shared kind (_topk.h): here NaN and infinities never
   rank. Of tied scores, the lower position ranks first. */
static inline void vs_offer(vs_hit *h, int64_t *n, int64_t k, float s, int64_t p) {
    int32_t key = vs_key(s);
    if (key < VS_KEY_PINF && key > VS_KEY_NINF) vs_heap_offer(h, n, k, key, p);
}

#ifndef VS_AHEAD
#define VS_AHEAD 8
#endif
static inline void vs_prefetch_row(const char *r, int64_t p, int64_t hi, size_t bytes) {
    if (p + VS_AHEAD < hi) {
        const char *c = r + (size_t)VS_AHEAD * bytes;
        for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b, 0, 0);
    }
}

/* A batch of queries (the rows of Q, m x d), each list read once for all the queries
   that probe it: the rows [lo, hi) and the queries qs[0:nq]. Query i's k best (score,
   position) pairs are kept in heaps[i * k:], lens[i] of them; callers empty each heap with
   vs_heap_drain. A query's scores are the same floats as vs_scan's for it alone. */
static inline void vs_offer_row(vs_hit *heaps, int64_t *lens, int64_t k, int32_t q, float s,
                                int64_t p) {
    vs_offer(heaps + (size_t)q * k, lens + q, k, s, p);
}

static void vs_float_portable(const char *rows, int kind, int d, int64_t lo, int64_t hi,
                              const int32_t *qs, int64_t nq, const float *Q, int64_t k,
                              vs_hit *heaps, int64_t *lens) {
    size_t bytes = vs_row_bytes(kind, d);
    for (int64_t p = lo; p < hi; p++) {
        const char *r = rows + (size_t)p * bytes;
        vs_prefetch_row(r, p, hi, bytes);
        for (int64_t t = 0; t < nq; t++)
            vs_offer_row(heaps, lens, k, qs[t], vs_dot_plain(r, kind, Q + (size_t)qs[t] * d, d), p);
    }
}

/* ---- int8 rows: integer inner products with an int16-coded query ----
   A query q is coded once (vs_query_codes) as int16 codes c_q and a power-of-two scale t,
   |q - t c_q| <= t / 2 an element. A row's score is (float)(c . c_q) * scale[p] * t: the
   inner product of the row's codes c with c_q is an exact int32 (no rounding, so every loop
   and every order of summation gives the same integer, and a query's scores are the same
   floats alone or in a batch, on the AVX2 loops or the portable ones), and a power-of-two t
   makes the two products the same float in either order. */

/* int16 entries a coded query takes: its d codes, then the 16 of a row's last chunk. */
#define VS_QLD(d) ((int64_t)(d) + 16)
/* The largest code a query of d elements may take: |c . c_q| <= 128 d qmax fits int32. */
static int32_t vs_qmax(int d) {
    int64_t m = INT32_MAX / (128 * (int64_t)(d > 0 ? d : 1));
    return (int32_t)(m > 32767 ? 32767 : m < 1 ? 1 : m);
}

/* Code q (d elements) into cq[0:VS_QLD(d)] and *t: cq[j] = round(q[j] / t), t the least
   power of two that keeps every |cq[j]| within vs_qmax(d); cq[d:d + 16] is the last chunk's
   query for the AVX2 loops (a row's last d % 16 elements are read as the 16 that end the
   row: the ones a full chunk already took are multiplied by 0). Returns 0 (and codes
   nothing) if q holds a NaN or an infinity. */
static int vs_query_codes(const float *q, int d, int16_t *cq, float *t) {
    float m = 0.0f;
    for (int j = 0; j < d; j++) {
        if (!isfinite(q[j])) return 0;
        m = fabsf(q[j]) > m ? fabsf(q[j]) : m;
    }
    int e = 0;
    if (m > 0.0f) frexpf(m / (float)vs_qmax(d), &e); /* m / qmax < 2^e */
    *t = ldexpf(1.0f, e);
    for (int j = 0; j < d; j++) cq[j] = (int16_t)lrintf(ldexpf(q[j], -e));
    int full = d - d % 16;
    for (int j = 0; j < 16; j++) {
        int at = d - 16 + j;
        cq[d + j] = (int16_t)(d % 16 && at >= full && at >= 0 ? cq[at] : 0);
    }
    return 1;
}

static inline float vs_i8_score(int32_t dot, const float *scale, int64_t p, float t) {
    return (float)dot * scale[p] * t;
}

static int32_t vs_i8_dot_plain(const int8_t *r, const int16_t *cq, int d) {
    int32_t s = 0;
    for (int j = 0; j < d; j++) s += (int32_t)r[j] * cq[j];
    return s;
}

static void vs_i8_portable(const int8_t *rows, const float *scale, int d, int64_t lo, int64_t hi,
                           const int32_t *qs, int64_t nq, const int16_t *QC, const float *QT,
                           int64_t k, vs_hit *heaps, int64_t *lens) {
    for (int64_t p = lo; p < hi; p++) {
        const int8_t *r = rows + (size_t)p * d;
        for (int64_t t = 0; t < nq; t++) {
            int32_t dot = vs_i8_dot_plain(r, QC + (size_t)qs[t] * VS_QLD(d), d);
            vs_offer_row(heaps, lens, k, qs[t], vs_i8_score(dot, scale, p, QT[qs[t]]), p);
        }
    }
}

#ifdef VS_X86
/* acc + the 16 products of a row's chunk at r with the query's codes at cq, as 8 int32. */
VS_AVX2 static VS_INLINE __m256i vs_i8_chunk(const int8_t *r, const int16_t *cq, __m256i acc) {
    __m256i x = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)r));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(x, _mm256_loadu_si256((const __m256i *)cq)));
}
/* The int32 inner products of eight rows (d >= 16) with the coded query: two consecutive
   rows from each of r0, r1, r2, r3, lanes (r0, r0 + d, r1, r1 + d, ...); full chunks of 16,
   then the chunk that ends each row. */
VS_AVX2 static VS_INLINE __m256i vs_i8_dot8(const int8_t *r0, const int8_t *r1, const int8_t *r2,
                                            const int8_t *r3, int d, const int16_t *cq) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
            a7 = a0;
    int j = 0;
#define VS_ROWS8(J, CQ)                                                                            \
    a0 = vs_i8_chunk(r0 + (J), CQ, a0);                                                            \
    a1 = vs_i8_chunk(r0 + d + (J), CQ, a1);                                                        \
    a2 = vs_i8_chunk(r1 + (J), CQ, a2);                                                            \
    a3 = vs_i8_chunk(r1 + d + (J), CQ, a3);                                                        \
    a4 = vs_i8_chunk(r2 + (J), CQ, a4);                                                            \
    a5 = vs_i8_chunk(r2 + d + (J), CQ, a5);                                                        \
    a6 = vs_i8_chunk(r3 + (J), CQ, a6);                                                            \
    a7 = vs_i8_chunk(r3 + d + (J), CQ, a7);
    for (; j + 16 <= d; j += 16) {
        VS_ROWS8(j, cq + j)
    }
    if (j < d) {
        VS_ROWS8(d - 16, cq + d)
    }
#undef VS_ROWS8
    /* eight sums of eight lanes into one register: pairs, quads, then the two halves */
    __m256i b0 = _mm256_hadd_epi32(a0, a1), b1 = _mm256_hadd_epi32(a2, a3);
    __m256i b2 = _mm256_hadd_epi32(a4, a5), b3 = _mm256_hadd_epi32(a6, a7);
    __m256i c0 = _mm256_hadd_epi32(b0, b1), c1 = _mm256_hadd_epi32(b2, b3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(c0, c1, 0x20),
                            _mm256_permute2x128_si256(c0, c1, 0x31));
}
/* One row's inner product with the coded query (d >= 16), as vs_i8_dot8's lanes. */
VS_AVX2 static VS_INLINE int32_t vs_i8_dot1(const int8_t *r, int d, const int16_t *cq) {
    __m256i a = _mm256_setzero_si256();
    int j = 0;
    for (; j + 16 <= d; j += 16) a = vs_i8_chunk(r + j, cq + j, a);
    if (j < d) a = vs_i8_chunk(r + d - 16, cq + d, a);
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    return _mm_cvtsi128_si32(h);
}
/* One int8 row's score offered to query q's heap. */
VS_AVX2 static VS_INLINE void vs_i8_one(const int8_t *rows, const float *scale, int d, int64_t p,
                                        int32_t q, const int16_t *QC, const float *QT, int64_t k,
                                        vs_hit *heaps, int64_t *lens) {
    int32_t dot = vs_i8_dot1(rows + (size_t)p * d, d, QC + (size_t)q * VS_QLD(d));
    vs_offer_row(heaps, lens, k, q, vs_i8_score(dot, scale, p, QT[q]), p);
}
/* Eight rows' scores for each of the queries qs, offered to their heaps: rows p, p + 1 of
   p = p0 + u gap for u = 0..3 (gap a constant 2 where the eight are consecutive). */
VS_AVX2 static VS_INLINE void vs_i8_step(const int8_t *rows, const float *scale, int d, int64_t p0,
                                         int64_t gap, const int32_t *qs, int64_t nq,
                                         const int16_t *QC, const float *QT, int64_t k,
                                         vs_hit *heaps, int64_t *lens) {
    int64_t p1 = p0 + gap, p2 = p1 + gap, p3 = p2 + gap;
    __m256 sc = gap == 2 ? _mm256_loadu_ps(scale + p0)
                         : _mm256_setr_ps(scale[p0], scale[p0 + 1], scale[p1], scale[p1 + 1],
                                          scale[p2], scale[p2 + 1], scale[p3], scale[p3 + 1]);
    const int8_t *r0 = rows + (size_t)p0 * d, *r1 = rows + (size_t)p1 * d;
    const int8_t *r2 = rows + (size_t)p2 * d, *r3 = rows + (size_t)p3 * d;
    for (int64_t t = 0; t < nq; t++) {
        int32_t q = qs[t];
        __m256i dot = vs_i8_dot8(r0, r1, r2, r3, d, QC + (size_t)q * VS_QLD(d));
        __m256 f = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(dot), sc), _mm256_set1_ps(QT[q]));
        vs_hit *h = heaps + (size_t)q * k;
        /* a full heap: only the scores at least its worst (NaN never is); else all */
        int more = lens[q] < k ? 0xff
                               : _mm256_movemask_ps(_mm256_cmp_ps(
                                     f, _mm256_set1_ps(vs_unkey(h[0].key)), _CMP_GE_OQ));
        if (!more) continue;
        float s[8];
        _mm256_storeu_ps(s, f);
        for (; more; more &= more - 1) {
            int u = __builtin_ctz((unsigned)more);
            vs_offer(h, lens + q, k, s[u], p0 + (u >> 1) * gap + (u & 1));
        }
    }
}
/* A span of at least this many bytes is read as four streams (below). */
#define VS_STREAMS_FROM 65536
/* The rows [lo, hi) against the queries qs, eight rows a step: a large span (rows coming
   from memory) two rows from each quarter, so that the reads are four sequential streams
   (which the hardware prefetches side by side: one stream of a 3M x 300 file's lists is
   ~20% slower); a small one eight consecutive rows. The eight are read once from memory,
   then from the first-level cache for each query, and each query's eight scores are
   offered together. */
VS_AVX2 static void vs_i8_avx2(const int8_t *rows, const float *scale, int d, int64_t lo,
                               int64_t hi, const int32_t *qs, int64_t nq, const int16_t *QC,
                               const float *QT, int64_t k, vs_hit *heaps, int64_t *lens) {
    if (d < 16) {
        vs_i8_portable(rows, scale, d, lo, hi, qs, nq, QC, QT, k, heaps, lens);
        return;
    }
    int64_t n = hi - lo, gap = 2, step = 8, blocks = n / 8;
    if ((size_t)n * d >= VS_STREAMS_FROM) {
        gap = n / 4;
        step = 2;
        blocks = gap / 2;
        for (int64_t i = 0; i < blocks; i++)
            vs_i8_step(rows, scale, d, lo + 2 * i, gap, qs, nq, QC, QT, k, heaps, lens);
    } else {
        for (int64_t i = 0; i < blocks; i++)
            vs_i8_step(rows, scale, d, lo + 8 * i, 2, qs, nq, QC, QT, k, heaps, lens);
    }
    /* the rows left: four streams, each quarter's odd last row, then the span's last rows */
    int64_t rest = lo + blocks * step;
    if (step == 2) {
        for (int u = 0; u < 4 && 2 * blocks < gap; u++)
            for (int64_t t = 0; t < nq; t++)
                vs_i8_one(rows, scale, d, lo + u * gap + 2 * blocks, qs[t], QC, QT, k, heaps, lens);
        rest = lo + 4 * gap;
    }
    for (int64_t p = rest; p < hi; p++)
        for (int64_t t = 0; t < nq; t++)
            vs_i8_one(rows, scale, d, p, qs[t], QC, QT, k, heaps, lens);
}
#endif

#ifdef VS_X86
/* Four queries against one row: the row's elements are loaded (and widened) once for the
   four. Each sum runs in vs_dot_avx2's order. */
VS_AVX2 static VS_INLINE void vs_dot4(const char *r, int kind, const float *q0, const float *q1,
                                      const float *q2, const float *q3, int d, float *out) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, e0 = a0, e1 = a0;
    int j = 0;
    for (; j + 16 <= d; j += 16) {
        __m256 r0 = vs_load8(r, kind, j), r1 = vs_load8(r, kind, j + 8);
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
        __m256 r0 = vs_load8(r, kind, j);
        a0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q0 + j), a0);
        b0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q1 + j), b0);
        c0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q2 + j), c0);
        e0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q3 + j), e0);
    }
    out[0] = vs_hsum(_mm256_add_ps(a0, a1));
    out[1] = vs_hsum(_mm256_add_ps(b0, b1));
    out[2] = vs_hsum(_mm256_add_ps(c0, c1));
    out[3] = vs_hsum(_mm256_add_ps(e0, e1));
    if (j < d) {
        out[0] = vs_tail(r, kind, q0, j, d, out[0]);
        out[1] = vs_tail(r, kind, q1, j, d, out[1]);
        out[2] = vs_tail(r, kind, q2, j, d, out[2]);
        out[3] = vs_tail(r, kind, q3, j, d, out[3]);
    }
}
/* One query against four rows r[0..3]: the query's elements are loaded once for the four,
   and four sums are in flight. Each sum runs in vs_dot_avx2's order. */
VS_AVX2 static VS_INLINE void vs_dot_rows4(const char *const *r, int kind, const float *q, int d,
                                           float *out) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, e0 = a0, e1 = a0;
    int j = 0;
    for (; j + 16 <= d; j += 16) {
        __m256 x0 = _mm256_loadu_ps(q + j), x1 = _mm256_loadu_ps(q + j + 8);
        a0 = _mm256_fmadd_ps(vs_load8(r[0], kind, j), x0, a0);
        a1 = _mm256_fmadd_ps(vs_load8(r[0], kind, j + 8), x1, a1);
        b0 = _mm256_fmadd_ps(vs_load8(r[1], kind, j), x0, b0);
        b1 = _mm256_fmadd_ps(vs_load8(r[1], kind, j + 8), x1, b1);
        c0 = _mm256_fmadd_ps(vs_load8(r[2], kind, j), x0, c0);
        c1 = _mm256_fmadd_ps(vs_load8(r[2], kind, j + 8), x1, c1);
        e0 = _mm256_fmadd_ps(vs_load8(r[3], kind, j), x0, e0);
        e1 = _mm256_fmadd_ps(vs_load8(r[3], kind, j + 8), x1, e1);
    }
    for (; j + 8 <= d; j += 8) {
        __m256 x0 = _mm256_loadu_ps(q + j);
        a0 = _mm256_fmadd_ps(vs_load8(r[0], kind, j), x0, a0);
        b0 = _mm256_fmadd_ps(vs_load8(r[1], kind, j), x0, b0);
        c0 = _mm256_fmadd_ps(vs_load8(r[2], kind, j), x0, c0);
        e0 = _mm256_fmadd_ps(vs_load8(r[3], kind, j), x0, e0);
    }
    out[0] = vs_hsum(_mm256_add_ps(a0, a1));
    out[1] = vs_hsum(_mm256_add_ps(b0, b1));
    out[2] = vs_hsum(_mm256_add_ps(c0, c1));
    out[3] = vs_hsum(_mm256_add_ps(e0, e1));
    for (int u = 0; u < 4 && j < d; u++) out[u] = vs_tail(r[u], kind, q, j, d, out[u]);
}
/* The rows [lo, hi) against the queries qs: four queries a row while four remain; each of
   the others against four rows at a time, one from each quarter of the span, so that the
   reads are four sequential streams (which the hardware prefetches; rows read side by side
   are not). */
VS_AVX2 static VS_INLINE void vs_group_rows(const char *rows, int kind, int d, int64_t lo,
                                            int64_t hi, const int32_t *qs, int64_t nq,
                                            const float *Q, int64_t k, vs_hit *heaps,
                                            int64_t *lens) {
    size_t bytes = vs_row_bytes(kind, d);
    int64_t t4 = nq - nq % 4, quarter = (hi - lo) / 4;
    for (int64_t p = lo; p < hi && t4 > 0; p++) {
        const char *r = rows + (size_t)p * bytes;
        vs_prefetch_row(r, p, hi, bytes);
        for (int64_t t = 0; t < t4; t += 4) {
            float s[4];
            vs_dot4(r, kind, Q + (size_t)qs[t] * d, Q + (size_t)qs[t + 1] * d,
                    Q + (size_t)qs[t + 2] * d, Q + (size_t)qs[t + 3] * d, d, s);
            for (int u = 0; u < 4; u++) vs_offer_row(heaps, lens, k, qs[t + u], s[u], p);
        }
    }
    for (int64_t t = t4; t < nq; t++) {
        const float *q = Q + (size_t)qs[t] * d;
        for (int64_t i = 0; i < quarter; i++) {
            const char *r[4];
            float s[4];
            for (int u = 0; u < 4; u++) r[u] = rows + (size_t)(lo + u * quarter + i) * bytes;
            vs_dot_rows4(r, kind, q, d, s);
            for (int u = 0; u < 4; u++) {
                int64_t p = lo + u * quarter + i;
                vs_offer_row(heaps, lens, k, qs[t], s[u], p);
            }
        }
        for (int64_t p = lo + 4 * quarter; p < hi; p++) {
            vs_offer_row(heaps, lens, k, qs[t], vs_dot_avx2(rows + (size_t)p * bytes, kind, q, d),
                         p);
        }
    }
}
VS_AVX2 static void vs_float_avx2(const char *rows, int kind, int d, int64_t lo, int64_t hi,
                                  const int32_t *qs, int64_t nq, const float *Q, int64_t k,
                                  vs_hit *heaps, int64_t *lens) {
    /* one copy of the loop for each kind of row, the kind fixed in it */
    if (kind == VS_F16)
        vs_group_rows(rows, VS_F16, d, lo, hi, qs, nq, Q, k, heaps, lens);
    else
        vs_group_rows(rows, VS_F32, d, lo, hi, qs, nq, Q, k, heaps, lens);
}
#endif

/* The queries of a scan: the float rows' loops read x (m x d), the int8 rows' loops the
   codes (m x VS_QLD(d)) and scales t (m) that vs_query_codes gave each row of x. */
typedef struct {
    const float *x;
    const int16_t *codes;
    const float *t;
} vs_queries;

/* The rows [lo, hi) of `rows` (d columns, stored as `kind`; scale: int8 rows' scales,
   else NULL) against the queries qs[0:nq] of Q, each list read once for all of them: query
   i's k best (score, position) pairs are kept in heaps[i * k:], lens[i] of them; callers
   empty each heap with vs_heap_drain. A query's scores are the same floats alone or in a
   batch. */
static void vs_scan_group(const void *rows, int kind, const float *scale, int d, int64_t lo,
                          int64_t hi, const int32_t *qs, int64_t nq, const vs_queries *Q, int64_t k,
                          vs_hit *heaps, int64_t *lens) {
#ifdef VS_X86
    if (vs_have_avx2()) {
        if (kind == VS_I8)
            vs_i8_avx2((const int8_t *)rows, scale, d, lo, hi, qs, nq, Q->codes, Q->t, k, heaps,
                       lens);
        else
            vs_float_avx2((const char *)rows, kind, d, lo, hi, qs, nq, Q->x, k, heaps, lens);
        return;
    }
#endif
    if (kind == VS_I8)
        vs_i8_portable((const int8_t *)rows, scale, d, lo, hi, qs, nq, Q->codes, Q->t, k, heaps,
                       lens);
    else
        vs_float_portable((const char *)rows, kind, d, lo, hi, qs, nq, Q->x, k, heaps, lens);
}

/* The k best rows of the spans [lo[i], hi[i]) of `rows` (d columns, stored as `kind`;
   scale: int8 rows' scales, else NULL) against q: positions into *pos best first, scores
   into *score; returns how many. Each span is read as a list probed by one query. int8
   rows: qc (VS_QLD(d) int16) holds the query's codes; a query with a NaN or an infinity
   scores nothing (as for float rows: such scores never rank). */
static int64_t vs_scan(const void *rows, int kind, const float *scale, int d, const int64_t *lo,
                       const int64_t *hi, int64_t nspans, const float *q, int16_t *qc, int64_t k,
                       vs_hit *heap, int64_t *pos, float *score) {
    int64_t n = 0;
    const int32_t only = 0;
    float t = 1.0f;
    vs_queries Q = {q, qc, &t};
    if (kind == VS_I8 && !vs_query_codes(q, d, qc, &t)) return 0;
    for (int64_t i = 0; i < nspans; i++)
        vs_scan_group(rows, kind, scale, d, lo[i], hi[i], &only, 1, &Q, k, heap, &n);
    return vs_heap_drain(heap, n, pos, score);
}

/* ---- A whole batch in one call: each query's probed lists chosen and scanned ---- */

/* Offer the scores s[0:cnt] of positions p0, p0 + 1, ... to a heap of capacity k. The
   positions of one stream only grow, so a score no better than the worst kept of a full
   heap (an equal one comes later: it loses the tie) is passed over without a heap step. */
static inline void vs_offer_run(vs_hit *h, int64_t *n, int64_t k, const float *s, int64_t cnt,
                                int64_t p0) {
    for (int64_t i = 0; i < cnt; i++) {
        int32_t key = vs_key(s[i]);
        if (*n == k && key <= h[0].key) continue;
        if (key < VS_KEY_PINF && key > VS_KEY_NINF) vs_heap_offer(h, n, k, key, p0 + i);
    }
}

/* The centroid scores of nq queries against centroid blocks [b0, b0 + nb) of ct (blocks of
   8 centroids, dimension-major: ct[(b * d + j) * 8 + l] is centroid 8 b + l's coordinate
   j), into out[u * ldo + 8 (b - b0) + l]. Each score is one chain of multiply-adds over
   j = 0, 1, ..., d - 1, whatever the tile: a query's scores are the same floats alone or
   in a batch. */
static void vs_cent_portable(const float *ct, int d, const float *const *q, int nq, int64_t b0,
                             int64_t nb, float *out, int64_t ldo) {
    for (int u = 0; u < nq; u++)
        for (int64_t b = b0; b < b0 + nb; b++)
            for (int l = 0; l < 8; l++) {
                const float *c = ct + (size_t)b * d * 8 + l;
                float s = 0.0f;
                for (int j = 0; j < d; j++) s += c[(size_t)j * 8] * q[u][j];
                out[(size_t)u * ldo + (b - b0) * 8 + l] = s;
            }
}

#ifdef VS_X86
VS_AVX2 static VS_INLINE void vs_cent_tile(const float *ct, int d, const float *const *q,
                                           const int nq, int64_t b0, const int nb, float *out,
                                           int64_t ldo) {
    __m256 acc[4][8];
    for (int u = 0; u < nq; u++)
        for (int v = 0; v < nb; v++) acc[u][v] = _mm256_setzero_ps();
    const float *c0 = ct + (size_t)b0 * d * 8;
    for (int j = 0; j < d; j++) {
        __m256 c[8];
        for (int v = 0; v < nb; v++) c[v] = _mm256_loadu_ps(c0 + ((size_t)v * d + j) * 8);
        for (int u = 0; u < nq; u++) {
            __m256 x = _mm256_broadcast_ss(q[u] + j);
            for (int v = 0; v < nb; v++) acc[u][v] = _mm256_fmadd_ps(c[v], x, acc[u][v]);
        }
    }
    for (int u = 0; u < nq; u++)
        for (int v = 0; v < nb; v++) _mm256_storeu_ps(out + (size_t)u * ldo + v * 8, acc[u][v]);
}
VS_AVX2 static void vs_cent_avx2(const float *ct, int d, const float *const *q, int nq, int64_t b0,
                                 int64_t nb, float *out, int64_t ldo) {
    int64_t b = 0;
    if (nq == 4) { /* four queries, two blocks: eight chains in flight */
        for (; b + 2 <= nb; b += 2) vs_cent_tile(ct, d, q, 4, b0 + b, 2, out + b * 8, ldo);
        for (; b < nb; b++) vs_cent_tile(ct, d, q, 4, b0 + b, 1, out + b * 8, ldo);
        return;
    }
    for (int u = 0; u < nq; u++) { /* one query, eight blocks */
        float *o = out + (size_t)u * ldo;
        for (b = 0; b + 8 <= nb; b += 8) vs_cent_tile(ct, d, q + u, 1, b0 + b, 8, o + b * 8, ldo);
        for (; b < nb; b++) vs_cent_tile(ct, d, q + u, 1, b0 + b, 1, o + b * 8, ldo);
    }
}
#endif

static void vs_centroids(const float *ct, int d, const float *const *q, int nq, int64_t nb,
                         float *out, int64_t ldo) {
#ifdef VS_X86
    if (vs_have_avx2()) {
        vs_cent_avx2(ct, d, q, nq, 0, nb, out, ldo);
        return;
    }
#endif
    vs_cent_portable(ct, d, q, nq, 0, nb, out, ldo);
}

/* The search of a batch of m unit queries Q (m x d), all in C: each query's nprobe lists of
   the best centroid scores (ct: nlist centroids as vs_centroids reads them; ties to the
   lower list) into near[i * nprobe:], -1 where it has fewer (NaN scores); then the rows of
   those lists ([offsets[l], offsets[l + 1]) of `rows`, stored as `kind`; scale: int8 rows'
   scales, else NULL) read list by list in the file's
   order, once for all the queries probing each, and each query's k best kept: their ids
   (ids[position]) into out[i * k:], best first (ties: the earlier position), -1 padded.
   Scratch: heaps of m * max(k, nprobe) hits, lens and qidx of m * nprobe, cnt of nlist + 1,
   sc of 4 * nlist_padded floats; int8 rows: qc of m * VS_QLD(d) int16 and qt of m floats
   (the queries' codes and scales). */
static void vs_ivf_batch(const float *ct, int64_t nlist, const void *rows, int kind,
                         const float *scale, int d, const int64_t *offsets, const int64_t *ids,
                         const float *Q, int64_t m, int64_t nprobe, int64_t k, int64_t *near,
                         int64_t *out, vs_hit *heaps, int64_t *lens, int64_t *cnt, int32_t *qidx,
                         float *sc, int16_t *qc, float *qt) {
    int64_t nb = (nlist + 7) / 8, ldo = nb * 8;
    for (int64_t i = 0; i < m; i += 4) {
        int nq = m - i < 4 ? (int)(m - i) : 4;
        const float *q[4];
        for (int u = 0; u < nq; u++) q[u] = Q + (size_t)(i + u) * d;
        vs_centroids(ct, d, q, nq, nb, sc, ldo);
        for (int u = 0; u < nq; u++) {
            vs_hit *h = heaps + (size_t)(i + u) * nprobe;
            int64_t n = 0, *got = near + (size_t)(i + u) * nprobe;
            vs_offer_run(h, &n, nprobe, sc + (size_t)u * ldo, nlist, 0);
            n = vs_heap_drain(h, n, got, NULL);
            for (int64_t j = n; j < nprobe; j++) got[j] = -1;
        }
    }
    if (k <= 0) return;
    vs_queries queries = {Q, qc, qt};
    for (int64_t i = 0; kind == VS_I8 && i < m; i++) /* a query that codes nothing scans nothing */
        if (!vs_query_codes(Q + (size_t)i * d, d, qc + (size_t)i * VS_QLD(d), qt + i))
            for (int64_t j = 0; j < nprobe; j++) near[i * nprobe + j] = -1;
    memset(lens, 0, (size_t)m * sizeof *lens);
    if (m == 1) { /* its lists best first: the heap's worst rises soonest, fewer rows offered */
        const int32_t only = 0;
        for (int64_t j = 0; j < nprobe && near[j] >= 0; j++)
            vs_scan_group(rows, kind, scale, d, offsets[near[j]], offsets[near[j] + 1], &only, 1,
                          &queries, k, heaps, lens);
    } else { /* each list once for all its queries, in the file's order */
        /* group the (list, query) pairs by list: cnt[l] ends list l's queries in qidx */
        memset(cnt, 0, (size_t)(nlist + 1) * sizeof *cnt);
        for (int64_t i = 0; i < m * nprobe; i++)
            if (near[i] >= 0) cnt[near[i] + 1]++;
        for (int64_t l = 0; l < nlist; l++) cnt[l + 1] += cnt[l];
        for (int64_t i = 0; i < m * nprobe; i++)
            if (near[i] >= 0) qidx[cnt[near[i]]++] = (int32_t)(i / nprobe);
        for (int64_t l = 0, a = 0; l < nlist; a = cnt[l], l++) {
            if (cnt[l] > a)
                vs_scan_group(rows, kind, scale, d, offsets[l], offsets[l + 1], qidx + a,
                              cnt[l] - a, &queries, k, heaps, lens);
        }
    }
    for (int64_t i = 0; i < m; i++) {
        int64_t *o = out + (size_t)i * k;
        int64_t n = vs_heap_drain(heaps + (size_t)i * k, lens[i], o, NULL);
        for (int64_t j = 0; j < n; j++) o[j] = ids[o[j]];
        for (int64_t j = n; j < k; j++) o[j] = -1;
    }
}

#endif /* VECSERVE_IVFSCAN_H */
