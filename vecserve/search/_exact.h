/* The C of exact search (vecserve/search/_exact.pyx declares and calls it).
 *
 * The float32 stream: the k largest of a stream of scores (one query's, or each row of a
 * batch's score blocks), kept in the shared top-k heap (_topk.h) as they go by; a chunk
 * of 16 scores is skipped after one vectorised compare with the worst kept.
 *
 * The int8 first pass of a batch: every row of the matrix quantised once to int8 codes
 * of its unit vector (one scale a row), every query to int8 codes, and the integer dot
 * products taken with AVX-512 VNNI (64 multiply-adds an instruction, four times float32's
 * rate), 16 rows by 12 queries a register tile, no score matrix. What each query keeps is
 * not the approximate score but an UPPER BOUND of the true cosine, proven per row:
 *
 *   |u.q - s t (c.d)| <= e_r |q| + |s c| e_q
 *
 * (u the unit row, s c its codes times its scale, e_r = |u - s c|; q the query, t d its
 * codes times its scale, e_q = |q - t d|; Cauchy-Schwarz twice), plus a slack for the
 * float32 arithmetic of the bound itself. The caller re-scores the kept rows exactly;
 * every row not kept has an upper bound no larger than the worst kept one's.
 *
 * A row's codes are stored plus 128 (unsigned, as VNNI multiplies unsigned by signed
 * bytes); the query's 128 times the sum of its codes is taken off the sums. Rows lie in
 * panels of 16: for each group of 4 dimensions, 16 rows x 4 bytes (64 bytes, one zmm).
 */
#ifndef VECSERVE_EXACT_H
#define VECSERVE_EXACT_H

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_topk.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(VS_NO_SIMD)
#include <immintrin.h>
#define VS_EXACT_X86 1
#endif

#define VS_CHUNK 16

/* Stream x[0:n] (times scale[i] when scale is not NULL) into the heap h of capacity k
 * holding *len hits; positions are base + i, above every position already in h (so a
 * chunk whose best key is no better than the worst kept cannot enter). */
static void vs_topk_stream(const float *x, const float *scale, int64_t n, int64_t base, vs_hit *h,
                           int64_t *len, int64_t k) {
    int32_t keys[VS_CHUNK];
    int64_t i = 0;
    if (k <= 0) return;
    for (; i + VS_CHUNK <= n; i += VS_CHUNK) {
        int32_t best = INT32_MIN;
        if (scale) {
            for (int j = 0; j < VS_CHUNK; j++) keys[j] = vs_key(x[i + j] * scale[i + j]);
        } else {
            for (int j = 0; j < VS_CHUNK; j++) keys[j] = vs_key(x[i + j]);
        }
        for (int j = 0; j < VS_CHUNK; j++) best = keys[j] > best ? keys[j] : best;
        if (*len == k && best <= h[0].key) continue; /* the common case */
        for (int j = 0; j < VS_CHUNK; j++) vs_heap_offer(h, len, k, keys[j], base + i + j);
    }
    for (; i < n; i++) {
        float s = scale ? x[i] * scale[i] : x[i];
        vs_heap_offer(h, len, k, vs_key(s), base + i);
    }
}

/* One block of a batch: rows q of the score block S (m x b, row stride ld), each times
 * scale[0:b], into heap q (capacity k, stride k in heaps). */
static void vs_topk_block(const float *S, int64_t m, int64_t b, int64_t ld, const float *scale,
                          int64_t base, vs_hit *heaps, int64_t *lens, int64_t k) {
    for (int64_t q = 0; q < m; q++)
        vs_topk_stream(S + q * ld, scale, b, base, heaps + q * k, lens + q, k);
}

/* -- the int8 first pass of a batch -------------------------------------------------- */

#define VS_PANEL 16          /* rows a panel: one zmm of int32 sums */
#define VS_QT 12             /* queries a register tile (2 panels x 12 queries: 24 zmm sums) */
#define VS_CHUNK_PANELS 32   /* panels scanned by every query tile in turn (in L2) */
#define VS_NO_UB (-1e29f)    /* the threshold of a heap not yet full: below every real bound */
#define VS_ZERO_ERR (-1e30f) /* the err of a row that never ranks (zero, never offered) */

typedef struct {
    const uint8_t *codes;             /* npanels x groups x 64 bytes */
    const float *scale, *err, *unorm; /* per row (npanels x 16): s, e_r, |s c| */
    int64_t npanels, groups;
} vs_i8_rows;

typedef struct {
    const int8_t *codes;   /* tiles x groups x VS_QT x 4: 4 dimensions of a tile's queries */
    const float *scale;    /* t */
    const int32_t *offset; /* 128 x the sum of the codes */
    const float *norm;     /* |q|, rounded up */
    const float *err;      /* e_q, rounded up */
} vs_i8_queries;

/* Quantise rows [row0, row0 + n) of v (d columns, row stride ld) with their norms into
 * R's panels (whose arrays the caller owns, zeroed past the last row). A row whose norm is
 * zero never ranks (gensim scores it NaN). Returns how many rows hold a NaN or infinity
 * (their codes are a zero row's; the caller must not use the pass then). */
static int64_t vs_i8_pack(const float *v, int64_t ld, const float *norms, int64_t n, int d,
                          int64_t row0, uint8_t *codes, float *scale, float *err, float *unorm,
                          int64_t groups) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *x = v + i * ld;
        int64_t r = row0 + i;
        uint8_t *c = codes + (r / VS_PANEL) * groups * 64 + (r % VS_PANEL) * 4;
        int finite = isfinite(norms[i]);
        double norm = norms[i], top = 0.0, e2 = 0.0, n2 = 0.0;
        for (int j = 0; j < d; j++) {
            if (!isfinite(x[j])) finite = 0;
            double a = fabs((double)x[j]);
            top = a > top ? a : top;
        }
        for (int j = 0; j < 4 * groups; j++) c[(j / 4) * 64 + j % 4] = 128;
        if (!finite || !(norm > 0.0) || !(top > 0.0)) {
            bad += !finite;
            scale[r] = 0.0f;
            err[r] = VS_ZERO_ERR;
            unorm[r] = 0.0f;
            continue;
        }
        double inv = 1.0 / norm;
        float s = (float)(top * inv / 127.0);
        double sd = s, to_code = 1.0 / sd; /* any rounding: the errors are of the codes */
        for (int j = 0; j < d; j++) {
            double u = (double)x[j] * inv, q = nearbyint(u * to_code);
            q = q > 127.0 ? 127.0 : (q < -127.0 ? -127.0 : q);
            c[(j / 4) * 64 + j % 4] = (uint8_t)(int)(q + 128.0);
            e2 += (u - sd * q) * (u - sd * q);
            n2 += (sd * q) * (sd * q);
        }
        /* rounded up: the double sums' own errors and float32's rounding */
        scale[r] = s;
        err[r] = (float)(sqrt(e2) * (1.0 + 1e-6) + 1e-9);
        unorm[r] = (float)(sqrt(n2) * (1.0 + 1e-6) + 1e-9);
    }
    return bad;
}

/* The int32 sums of 2 panels (a, b) x one tile of VS_QT queries (q: groups x VS_QT x 4
 * bytes): out[2 j] is query j against panel a, out[2 j + 1] against b, 16 sums each. */
static void vs_i8_tile_plain(const uint8_t *a, const uint8_t *b, int64_t groups, const int8_t *q,
                             int32_t *out) {
    memset(out, 0, 2 * VS_QT * VS_PANEL * sizeof *out);
    for (int64_t g = 0; g < groups; g++) {
        for (int j = 0; j < VS_QT; j++) {
            const int8_t *w = q + (g * VS_QT + j) * 4;
            int32_t *oa = out + 2 * j * VS_PANEL, *ob = oa + VS_PANEL;
            for (int i = 0; i < VS_PANEL; i++) {
                const uint8_t *ra = a + g * 64 + 4 * i, *rb = b + g * 64 + 4 * i;
                for (int t = 0; t < 4; t++) {
                    oa[i] += (int32_t)ra[t] * w[t];
                    ob[i] += (int32_t)rb[t] * w[t];
                }
            }
        }
    }
}

/* Offer the 16 rows of one panel (first row r0) to query j's heap: their upper bounds from
 * their sums, those above the worst kept (*thr) only. */
static void vs_i8_offer_plain(const int32_t *sums, int64_t r0, const vs_i8_rows *R,
                              const vs_i8_queries *Q, int64_t j, float slack, vs_hit *h,
                              int64_t *len, int64_t k, float *thr) {
    float t = Q->scale[j], nq = Q->norm[j], eq = Q->err[j];
    for (int i = 0; i < VS_PANEL; i++) {
        int64_t r = r0 + i;
        float ub = (float)(sums[i] - Q->offset[j]) * R->scale[r] * t + R->err[r] * nq +
                   R->unorm[r] * eq + slack;
        if (!(ub > *thr)) continue;
        vs_heap_offer(h, len, k, vs_key(ub), r);
        *thr = *len == k ? vs_unkey(h[0].key) : VS_NO_UB;
    }
}

/* The cut-off below which a row of a chunk cannot enter query j's heap, on its int32 sum
 * (codes + 128 against the query's codes, before the offset is taken off): with s, e_r and
 * |s c| at most smax, emax and umax over the chunk, a row whose sum is at most the cut-off
 * has an upper bound at most thr - 1e-6 (so its float32 bound is at most thr too).
 * INT32_MIN: no cut-off (the heap is not full, or thr is too low for one). */
static int32_t vs_i8_cut(const vs_i8_queries *Q, int64_t j, float thr, float smax, float emax,
                         float umax, float slack) {
    double w = (double)emax * Q->norm[j] + (double)umax * Q->err[j] + slack + 1e-6;
    double room = (double)thr - w, step = (double)Q->scale[j] * smax * (1.0 + 1e-6);
    if (thr == VS_NO_UB || !(room >= 0.0)) return INT32_MIN;
    if (!(step > 0.0)) return INT32_MAX; /* only zero rows */
    double c = floor(room / step) + (double)Q->offset[j];
    return c >= (double)INT32_MAX ? INT32_MAX : (c <= (double)INT32_MIN ? INT32_MIN : (int32_t)c);
}

/* vs_i8_offers_vnni's portable twin. */
static void vs_i8_offers_plain(const int32_t *sums, int nt, int64_t p, const vs_i8_rows *R,
                               const vs_i8_queries *Q, int64_t j0, float slack, vs_hit *heaps,
                               int64_t *lens, int64_t k, float *thr, int32_t *cut,
                               const float *chunk) {
    for (int j = 0; j < nt; j++) {
        const int32_t *s = sums + 2 * j * VS_PANEL;
        vs_hit *h = heaps + (j0 + j) * k;
        float before = thr[j];
        for (int half = 0; half < 2; half++) {
            const int32_t *sh = s + half * VS_PANEL;
            int above = 0;
            for (int i = 0; i < VS_PANEL; i++) above |= sh[i] > cut[j];
            if (above)
                vs_i8_offer_plain(sh, (p + half) * VS_PANEL, R, Q, j0 + j, slack, h, lens + j0 + j,
                                  k, &thr[j]);
        }
        if (thr[j] != before)
            cut[j] = vs_i8_cut(Q, j0 + j, thr[j], chunk[0], chunk[1], chunk[2], slack);
    }
}

#ifdef VS_EXACT_X86
#define VS_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

/* vs_i8_tile_plain with VNNI: 24 sums in registers, each group of 4 dimensions one load of
 * each panel and one broadcast of each query's 4 bytes. */
#define VS_DECL(j) __m512i a##j = _mm512_setzero_si512(), b##j = _mm512_setzero_si512()
#define VS_STEP(j)                                                                                 \
    do {                                                                                           \
        int32_t w;                                                                                 \
        memcpy(&w, q + (g * VS_QT + j) * 4, sizeof w);                                             \
        __m512i wq = _mm512_set1_epi32(w);                                                         \
        a##j = _mm512_dpbusd_epi32(a##j, ra, wq);                                                  \
        b##j = _mm512_dpbusd_epi32(b##j, rb, wq);                                                  \
    } while (0)
#define VS_STORE(j)                                                                                \
    do {                                                                                           \
        _mm512_storeu_si512((void *)(out + 2 * j * VS_PANEL), a##j);                               \
        _mm512_storeu_si512((void *)(out + (2 * j + 1) * VS_PANEL), b##j);                         \
    } while (0)

VS_VNNI static void vs_i8_tile_vnni(const uint8_t *a, const uint8_t *b, int64_t groups,
                                    const int8_t *q, int32_t *out) {
    VS_DECL(0);
    VS_DECL(1);
    VS_DECL(2);
    VS_DECL(3);
    VS_DECL(4);
    VS_DECL(5);
    VS_DECL(6);
    VS_DECL(7);
    VS_DECL(8);
    VS_DECL(9);
    VS_DECL(10);
    VS_DECL(11);
    for (int64_t g = 0; g < groups; g++) {
        __m512i ra = _mm512_loadu_si512((const void *)(a + g * 64));
        __m512i rb = _mm512_loadu_si512((const void *)(b + g * 64));
        VS_STEP(0);
        VS_STEP(1);
        VS_STEP(2);
        VS_STEP(3);
        VS_STEP(4);
        VS_STEP(5);
        VS_STEP(6);
        VS_STEP(7);
        VS_STEP(8);
        VS_STEP(9);
        VS_STEP(10);
        VS_STEP(11);
    }
    VS_STORE(0);
    VS_STORE(1);
    VS_STORE(2);
    VS_STORE(3);
    VS_STORE(4);
    VS_STORE(5);
    VS_STORE(6);
    VS_STORE(7);
    VS_STORE(8);
    VS_STORE(9);
    VS_STORE(10);
    VS_STORE(11);
}

VS_VNNI static void vs_i8_offer_vnni(const int32_t *sums, int64_t r0, const vs_i8_rows *R,
                                     const vs_i8_queries *Q, int64_t j, float slack, vs_hit *h,
                                     int64_t *len, int64_t k, float *thr) {
    __m512 d = _mm512_cvtepi32_ps(
        _mm512_sub_epi32(_mm512_loadu_si512((const void *)sums), _mm512_set1_epi32(Q->offset[j])));
    __m512 ub = _mm512_mul_ps(_mm512_mul_ps(d, _mm512_loadu_ps(R->scale + r0)),
                              _mm512_set1_ps(Q->scale[j]));
    __m512 e = _mm512_fmadd_ps(_mm512_loadu_ps(R->unorm + r0), _mm512_set1_ps(Q->err[j]),
                               _mm512_set1_ps(slack));
    e = _mm512_fmadd_ps(_mm512_loadu_ps(R->err + r0), _mm512_set1_ps(Q->norm[j]), e);
    ub = _mm512_add_ps(ub, e);
    __mmask16 m = _mm512_cmp_ps_mask(ub, _mm512_set1_ps(*thr), _CMP_GT_OQ);
    if (!m) return;
    float v[VS_PANEL];
    _mm512_storeu_ps(v, ub);
    while (m) {
        int i = __builtin_ctz(m);
        m &= (__mmask16)(m - 1);
        if (!(v[i] > *thr)) continue;
        vs_heap_offer(h, len, k, vs_key(v[i]), r0 + i);
        *thr = *len == k ? vs_unkey(h[0].key) : VS_NO_UB;
    }
}

/* The offers of one tile's sums (nt queries from j0, panels p and p + 1): a panel whose
 * sums are all at most the query's cut-off is skipped after one compare; a query's cut-off
 * is computed again when its threshold moves. chunk: the chunk's most s, e_r and |s c|. */
VS_VNNI static void vs_i8_offers_vnni(const int32_t *sums, int nt, int64_t p, const vs_i8_rows *R,
                                      const vs_i8_queries *Q, int64_t j0, float slack,
                                      vs_hit *heaps, int64_t *lens, int64_t k, float *thr,
                                      int32_t *cut, const float *chunk) {
    for (int j = 0; j < nt; j++) {
        const int32_t *s = sums + 2 * j * VS_PANEL;
        __m512i c = _mm512_set1_epi32(cut[j]);
        __mmask16 ma = _mm512_cmpgt_epi32_mask(_mm512_loadu_si512((const void *)s), c);
        __mmask16 mb = _mm512_cmpgt_epi32_mask(_mm512_loadu_si512((const void *)(s + VS_PANEL)), c);
        if (!(ma | mb)) continue;
        vs_hit *h = heaps + (j0 + j) * k;
        float before = thr[j];
        if (ma)
            vs_i8_offer_vnni(s, p * VS_PANEL, R, Q, j0 + j, slack, h, lens + j0 + j, k, &thr[j]);
        if (mb)
            vs_i8_offer_vnni(s + VS_PANEL, (p + 1) * VS_PANEL, R, Q, j0 + j, slack, h,
                             lens + j0 + j, k, &thr[j]);
        if (thr[j] != before)
            cut[j] = vs_i8_cut(Q, j0 + j, thr[j], chunk[0], chunk[1], chunk[2], slack);
    }
}

static int vs_have_vnni(void) {
    static int have = -1;
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vnni");
    }
    return have;
}
#else
static int vs_have_vnni(void) {
    return 0;
}
#endif

/* The query tiles [t0, t1) (tile t: queries t VS_QT ..., those below m real) against every
 * row of R: each query's heap (capacity k, stride k in heaps, *lens hits) keeps the rows of
 * the k largest upper bounds. simd: the VNNI loops (only where vs_have_vnni()), else the
 * portable ones. R->npanels is even; a chunk of panels is scanned by every tile in turn,
 * and a panel whose sums are all at most a query's cut-off (vs_i8_cut) is not offered. */
static void vs_i8_scan(const vs_i8_rows *R, const vs_i8_queries *Q, int64_t t0, int64_t t1,
                       int64_t m, float slack, vs_hit *heaps, int64_t *lens, int64_t k, int simd) {
    int32_t sums[2 * VS_QT * VS_PANEL], cut[VS_QT];
    (void)simd;
    float thr[VS_QT];
    int64_t pbytes = R->groups * 64;
    if (k <= 0) return;
    for (int64_t c0 = 0; c0 < R->npanels; c0 += VS_CHUNK_PANELS) {
        int64_t c1 = c0 + VS_CHUNK_PANELS < R->npanels ? c0 + VS_CHUNK_PANELS : R->npanels;
        float chunk[3] = {0.0f, VS_ZERO_ERR, 0.0f}; /* the most s, e_r and |s c| */
        for (int64_t r = c0 * VS_PANEL; r < c1 * VS_PANEL; r++) {
            chunk[0] = R->scale[r] > chunk[0] ? R->scale[r] : chunk[0];
            chunk[1] = R->err[r] > chunk[1] ? R->err[r] : chunk[1];
            chunk[2] = R->unorm[r] > chunk[2] ? R->unorm[r] : chunk[2];
        }
        for (int64_t t = t0; t < t1; t++) {
            int64_t j0 = t * VS_QT;
            int nt = m - j0 < VS_QT ? (int)(m - j0) : VS_QT;
            const int8_t *q = Q->codes + t * R->groups * VS_QT * 4;
            for (int j = 0; j < nt; j++) {
                vs_hit *h = heaps + (j0 + j) * k;
                thr[j] = lens[j0 + j] == k ? vs_unkey(h[0].key) : VS_NO_UB;
                cut[j] = vs_i8_cut(Q, j0 + j, thr[j], chunk[0], chunk[1], chunk[2], slack);
            }
            for (int64_t p = c0; p < c1; p += 2) {
                const uint8_t *a = R->codes + p * pbytes, *b = a + pbytes;
#ifdef VS_EXACT_X86
                if (simd) {
                    vs_i8_tile_vnni(a, b, R->groups, q, sums);
                    vs_i8_offers_vnni(sums, nt, p, R, Q, j0, slack, heaps, lens, k, thr, cut,
                                      chunk);
                    continue;
                }
#endif
                vs_i8_tile_plain(a, b, R->groups, q, sums);
                vs_i8_offers_plain(sums, nt, p, R, Q, j0, slack, heaps, lens, k, thr, cut, chunk);
            }
        }
    }
}

#endif /* VECSERVE_EXACT_H */
