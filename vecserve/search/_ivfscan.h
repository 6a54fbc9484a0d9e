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
            int32_t key = vs_key(s);
            /* NaN and infinities never rank */
            if (key < VS_KEY_PINF && key > VS_KEY_NINF) vs_heap_offer(heap, &n, k, key, p);
        }
    }
    return vs_heap_drain(heap, n, pos, score);
}

#endif /* VECSERVE_IVFSCAN_H */
