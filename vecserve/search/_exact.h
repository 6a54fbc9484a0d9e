/* Streaming top-k of float32 scores: the k largest of a stream, kept in a min-heap.
 *
 * Used by vecserve/search/_exact.pyx. Scores are compared through an order-preserving
 * map of their bits onto int32 (vs_key), not as floats: the extensions are built with
 * -ffast-math, under which float comparisons may assume that no NaN exists, and an
 * integer compare is also what lets the compiler vectorise the cheap "is anything in
 * this chunk better than the worst kept?" test that skips almost every chunk.
 *
 * NaN never ranks. Of equal keys the earlier position is kept (a later equal one never
 * displaces it). -0.0 ranks just below +0.0 here; callers that need float equality
 * semantics (gensim's order of ties) look at the kept values themselves.
 */
#ifndef VECSERVE_EXACT_H
#define VECSERVE_EXACT_H

#include <stdint.h>
#include <string.h>

typedef struct {
    int32_t key;
    int64_t pos;
} vs_hit;

/* +inf's key; a positive NaN maps above it, a negative NaN below -inf's. */
#define VS_KEY_PINF ((int32_t)0x7f800000)
#define VS_KEY_NINF ((int32_t)0x807fffff)
#define VS_CHUNK 16

static inline int32_t vs_key(float f) {
    int32_t b;
    memcpy(&b, &f, sizeof b);
    return b ^ ((b >> 31) & 0x7fffffff);
}

static inline float vs_unkey(int32_t k) {
    int32_t b = k ^ ((k >> 31) & 0x7fffffff);
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static inline int vs_hit_worse(vs_hit a, vs_hit b) {
    return a.key < b.key || (a.key == b.key && a.pos > b.pos);
}

static void vs_heap_down(vs_hit *h, int64_t n, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && vs_hit_worse(h[l], h[m])) m = l;
        if (r < n && vs_hit_worse(h[r], h[m])) m = r;
        if (m == i) return;
        vs_hit t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* Offer one (key, pos); NaN keys are refused. */
static inline void vs_heap_offer(vs_hit *h, int64_t *n, int64_t k, int32_t key, int64_t pos) {
    if (key > VS_KEY_PINF || key < VS_KEY_NINF) return;
    if (*n < k) {
        int64_t i = (*n)++;
        h[i].key = key;
        h[i].pos = pos;
        while (i > 0) {
            int64_t up = (i - 1) / 2;
            if (!vs_hit_worse(h[i], h[up])) break;
            vs_hit t = h[i];
            h[i] = h[up];
            h[up] = t;
            i = up;
        }
    } else if (key > h[0].key) { /* positions only grow: an equal key never enters */
        h[0].key = key;
        h[0].pos = pos;
        vs_heap_down(h, *n, 0);
    }
}

/* Stream x[0:n] (times scale[i] when scale is not NULL) into the heap h of capacity k
 * holding *len hits; positions are base + i. */
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

/* Empty the heap into pos/val, best first; returns how many. */
static int64_t vs_topk_drain(vs_hit *h, int64_t len, int64_t *pos, float *val) {
    for (int64_t m = len; m > 0; m--) {
        pos[m - 1] = h[0].pos;
        val[m - 1] = vs_unkey(h[0].key);
        h[0] = h[m - 1];
        vs_heap_down(h, m - 1, 0);
    }
    return len;
}

/* One block of a batch: rows q of the score block S (m x b, row stride ld), each times
 * scale[0:b], into heap q (capacity k, stride k in heaps). */
static void vs_topk_block(const float *S, int64_t m, int64_t b, int64_t ld, const float *scale,
                          int64_t base, vs_hit *heaps, int64_t *lens, int64_t k) {
    for (int64_t q = 0; q < m; q++)
        vs_topk_stream(S + q * ld, scale, b, base, heaps + q * k, lens + q, k);
}

#endif
