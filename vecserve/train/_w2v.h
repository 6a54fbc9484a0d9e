/* The word2vec kernels' inner loops in C (vecserve/train/_kernels.pyx declares and calls
 * them). Only the extension includes this file, once: every function is static.
 *
 * Output chains (vs_chain): inputs in[0..B-1] (a centre's contexts, or CBOW's mean)
 * against output rows o[0..n_out-1] (a Huffman path, or the centre and its negatives),
 * in output-major order: each output row meets the inputs one after another, each pair
 * seeing the row as the pairs before it left it; an input's update goes into its row of
 * `work` (the caller adds it to the input row after the chain).
 *
 * Plain C loops that the compiler vectorises (-O3 -ffast-math). With GCC on x86-64
 * Linux each entry point is also built for AVX2+FMA (x86-64-v3), and the CPU picks its
 * version once, at load time; VS_NO_SIMD builds the baseline only. */
#ifndef VECSERVE_W2V_H
#define VECSERVE_W2V_H

#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) &&       \
    !defined(VS_NO_SIMD)
#define VS_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define VS_CLONES
#endif

/* xorshift64*: one 64-bit draw from a thread's generator state *rng (never zero). */
static inline uint64_t vs_rng_next(uint64_t *rng) {
    uint64_t x = *rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *rng = x;
    return x * 2685821657736338717ULL;
}

/* A uniform draw in [0, n) from the high 32 bits (multiply-shift, no modulo). */
static inline uint32_t vs_rand_below(uint64_t *rng, uint32_t n) {
    return (uint32_t)(((vs_rng_next(rng) >> 32) * (uint64_t)n) >> 32);
}

/* One word of the alias table (prob, alias) over n words: the negative-sampling
 * distribution in O(1), one 64-bit draw for both the column and the coin. */
static inline int32_t vs_draw_alias(uint64_t *rng, const uint32_t *prob, const int32_t *alias,
                                    int32_t n) {
    uint64_t r = vs_rng_next(rng);
    int32_t i = (int32_t)(((r >> 32) * (uint64_t)n) >> 32);
    return (uint32_t)r < prob[i] ? i : alias[i];
}

/* Start loading nbytes at p into cache, for writing. */
static inline void vs_prefetch(const void *p, int nbytes) {
    const char *c = (const char *)p;
    for (int k = 0; k < nbytes; k += 64) __builtin_prefetch(c + k, 1, 3);
}

/* Start loading nbytes at p into cache, for reading (tables every thread shares: a
 * prefetch for writing would take the lines from the other cores). */
static inline void vs_prefetch_read(const void *p, int nbytes) {
    const char *c = (const char *)p;
    for (int k = 0; k < nbytes; k += 64) __builtin_prefetch(c + k, 0, 3);
    __builtin_prefetch(c + nbytes - 1, 0, 3);
}

/* The gradient of one pair from its score f: hierarchical softmax (hs) skips a score
 * outside +-max_exp (0), negative sampling clamps it; label < 0: no gradient. `table`
 * is the sigmoid over [-max_exp, max_exp), `scale` its entries per unit of f. */
static inline float vs_grad(float f, float label, float alpha, int hs, const float *table,
                            float max_exp, int scale) {
    if (label < 0.0f) return 0.0f;
    if (f >= max_exp) return hs ? 0.0f : (label - 1.0f) * alpha;
    if (f <= -max_exp) return hs ? 0.0f : label * alpha;
    return (label - table[(int)((f + max_exp) * (float)scale)]) * alpha;
}

/* y += a x */
VS_CLONES static void vs_axpy(int n, float a, const float *restrict x, float *restrict y) {
    for (int d = 0; d < n; d++) y[d] += a * x[d];
}

/* A group of R distinct output rows o0..o{R-1} against the inputs, input by input:
 * input c's scores f are taken with the rows as the inputs before it left them; then
 * work[c] += sum_r g[r] o[r] and o[r] += g[r] in[c]. The R rows' chains are
 * independent, so they run interleaved in one pass over the vectors (hiding the
 * latency of each), and that pass also takes input c+1's scores. The rows are separate
 * restrict pointers, not an array, so that GCC vectorises the loops; the functions for
 * R = 1, 2 and 4 are generated from one template below:
 *   vs_passR: w += sum_r g_r o_r; o_r += g_r x; f_r = y . o_r (the updated o_r)
 *   vs_updR:  the same without the next scores (the chain's last input)
 *   vs_dotsR: f_r = y . o_r alone (no row changes: every gradient was 0)
 *   vs_groupR: the chain of the R rows over all B inputs. */
#define VS_EACH_1(X) X(0)
#define VS_EACH_2(X) X(0) X(1)
#define VS_EACH_4(X) X(0) X(1) X(2) X(3)

#define VS_G_PARAM(r) , float g##r
#define VS_O_PARAM(r) , float *restrict o##r
#define VS_G_ARG(r) , g[r]
#define VS_O_ARG(r) , o[r]
#define VS_ACC(r) float a##r = 0.0f;
#define VS_LOAD(r) float v##r = o##r[d];
#define VS_GV(r) +(g##r * v##r)
#define VS_STEP(r) v##r += g##r * xd;
#define VS_STORE(r) o##r[d] = v##r;
#define VS_DOT_UPDATED(r) a##r += yd * v##r;
#define VS_STEP_STORE(r) o##r[d] = v##r + g##r * xd;
#define VS_DOT(r) a##r += y[d] * o##r[d];
#define VS_RESULT(r) f[r] = a##r;

#define VS_DEFINE_GROUP(R, EACH)                                                                   \
    static inline void vs_pass##R(int n EACH(VS_G_PARAM), const float *restrict x,                 \
                                  const float *restrict y, float *restrict w EACH(VS_O_PARAM),     \
                                  float *restrict f) {                                             \
        EACH(VS_ACC)                                                                               \
        for (int d = 0; d < n; d++) {                                                              \
            float xd = x[d], yd = y[d], wd = w[d];                                                 \
            EACH(VS_LOAD)                                                                          \
            wd += EACH(VS_GV);                                                                     \
            EACH(VS_STEP)                                                                          \
            EACH(VS_STORE)                                                                         \
            EACH(VS_DOT_UPDATED)                                                                   \
            w[d] = wd;                                                                             \
        }                                                                                          \
        EACH(VS_RESULT)                                                                            \
    }                                                                                              \
    static inline void vs_upd##R(int n EACH(VS_G_PARAM), const float *restrict x,                  \
                                 float *restrict w EACH(VS_O_PARAM)) {                             \
        for (int d = 0; d < n; d++) {                                                              \
            float xd = x[d];                                                                       \
            EACH(VS_LOAD)                                                                          \
            w[d] += EACH(VS_GV);                                                                   \
            EACH(VS_STEP_STORE)                                                                    \
        }                                                                                          \
    }                                                                                              \
    static inline void vs_dots##R(int n, const float *restrict y EACH(VS_O_PARAM),                 \
                                  float *restrict f) {                                             \
        EACH(VS_ACC)                                                                               \
        for (int d = 0; d < n; d++) {                                                              \
            EACH(VS_DOT)                                                                           \
        }                                                                                          \
        EACH(VS_RESULT)                                                                            \
    }                                                                                              \
    static inline void vs_group##R(int n, int B, const float *const *in, float *const *o,          \
                                   const float *lab, float *work, float alpha, int hs,             \
                                   const float *table, float max_exp, int scale) {                 \
        float f[R], g[R];                                                                          \
        vs_dots##R(n, in[0] EACH(VS_O_ARG), f);                                                    \
        for (int c = 0; c < B; c++) {                                                              \
            int any = 0;                                                                           \
            for (int r = 0; r < R; r++) {                                                          \
                g[r] = vs_grad(f[r], lab[r], alpha, hs, table, max_exp, scale);                    \
                any |= g[r] != 0.0f;                                                               \
            }                                                                                      \
            float *w = work + (long)c * n;                                                         \
            if (c + 1 == B) {                                                                      \
                if (any) vs_upd##R(n EACH(VS_G_ARG), in[c], w EACH(VS_O_ARG));                     \
            } else if (any) {                                                                      \
                vs_pass##R(n EACH(VS_G_ARG), in[c], in[c + 1], w EACH(VS_O_ARG), f);               \
            } else {                                                                               \
                vs_dots##R(n, in[c + 1] EACH(VS_O_ARG), f);                                        \
            }                                                                                      \
        }                                                                                          \
    }

VS_DEFINE_GROUP(1, VS_EACH_1)
VS_DEFINE_GROUP(2, VS_EACH_2)
VS_DEFINE_GROUP(4, VS_EACH_4)

/* The rows o[0..n_out-1] in groups of 4, 2 or 1 distinct rows (a row met twice in one
 * group would have its two chains race). */
VS_CLONES static void vs_chain(int n, int B, const float *const *in, float *const *o,
                               const float *lab, int n_out, float *work, float alpha, int hs,
                               const float *table, float max_exp, int scale) {
    int k = 0;
    while (k < n_out) {
        float *const *g = o + k;
        int left = n_out - k;
        if (left >= 4 && g[0] != g[1] && g[0] != g[2] && g[0] != g[3] && g[1] != g[2] &&
            g[1] != g[3] && g[2] != g[3]) {
            vs_group4(n, B, in, g, lab + k, work, alpha, hs, table, max_exp, scale);
            k += 4;
        } else if (left >= 2 && g[0] != g[1]) {
            vs_group2(n, B, in, g, lab + k, work, alpha, hs, table, max_exp, scale);
            k += 2;
        } else {
            vs_group1(n, B, in, g, lab + k, work, alpha, hs, table, max_exp, scale);
            k += 1;
        }
    }
}

static inline void vs_add(int n, const float *restrict x, float *restrict y) {
    for (int d = 0; d < n; d++) y[d] += x[d];
}

/* y = s (y + a + b + c + e), or s (a + b + c + e) when `first`: up to four rows of a sum
 * in one pass over y (b, c or e NULL: fewer rows). */
static inline void vs_sum4(int n, int first, float s, const float *restrict a,
                           const float *restrict b, const float *restrict c,
                           const float *restrict e, float *restrict y) {
    if (e) {
        if (first)
            for (int d = 0; d < n; d++) y[d] = s * (((a[d] + b[d]) + c[d]) + e[d]);
        else
            for (int d = 0; d < n; d++) y[d] = s * ((((y[d] + a[d]) + b[d]) + c[d]) + e[d]);
    } else if (c) {
        if (first)
            for (int d = 0; d < n; d++) y[d] = s * ((a[d] + b[d]) + c[d]);
        else
            for (int d = 0; d < n; d++) y[d] = s * (((y[d] + a[d]) + b[d]) + c[d]);
    } else if (b) {
        if (first)
            for (int d = 0; d < n; d++) y[d] = s * (a[d] + b[d]);
        else
            for (int d = 0; d < n; d++) y[d] = s * ((y[d] + a[d]) + b[d]);
    } else {
        if (first)
            for (int d = 0; d < n; d++) y[d] = s * a[d];
        else
            for (int d = 0; d < n; d++) y[d] = s * (y[d] + a[d]);
    }
}

/* out = scale x the sum of rows[0..m-1] (m >= 1), added in row order four rows a pass
 * (one pass over out for every four rows, the scale in the last). */
static inline void vs_sum_scaled(int n, int m, float *const *rows, float scale,
                                 float *restrict out) {
    for (int c = 0; c < m; c += 4) {
        int k = m - c;
        vs_sum4(n, c == 0, k <= 4 ? scale : 1.0f, rows[c], k > 1 ? rows[c + 1] : NULL,
                k > 2 ? rows[c + 2] : NULL, k > 3 ? rows[c + 3] : NULL, out);
    }
}

/* out = the sum of rows[0..m-1], times 1/m if mean and m > 1. */
VS_CLONES static void vs_sum_rows(int n, int m, float *const *rows, int mean, float *restrict out) {
    vs_sum_scaled(n, m, rows, mean && m > 1 ? 1.0f / (float)m : 1.0f, out);
}

/* out = scale x the sum of rows[0..m-1]. */
VS_CLONES static void vs_scaled_sum(int n, int m, float *const *rows, float scale,
                                    float *restrict out) {
    vs_sum_scaled(n, m, rows, scale, out);
}

/* A thread's own copy `priv` of m shared rows (n components each, contiguous), taken
 * as `snap`: the shared rows get the thread's changes since (shared += priv - snap) and
 * both copies take the result, other threads' merged changes included. */
VS_CLONES static void vs_merge_rows(int n, int m, float *restrict shared, float *restrict priv,
                                    float *restrict snap) {
    for (long k = 0; k < (long)n * m; k++) {
        float v = shared[k] + (priv[k] - snap[k]);
        shared[k] = v;
        priv[k] = v;
        snap[k] = v;
    }
}

/* rows[c] += work (+ c * n if per_row) for every c < m. */
VS_CLONES static void vs_add_rows(int n, int m, float *const *rows, const float *work,
                                  int per_row) {
    for (int c = 0; c < m; c++) vs_add(n, work + (per_row ? (long)c * n : 0), rows[c]);
}

#endif
