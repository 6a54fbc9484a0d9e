/* The one top-k heap of vecserve's C scans (_exact.h, _ivfscan.h): the k best
 * (score, position) pairs of a stream, kept in a min-heap whose root is the worst kept.
 *
 * Scores are compared through an order-preserving map of their bits onto int32 (vs_key),
 * not as floats: an integer compare is what lets the compiler vectorise the cheap "is
 * anything in this chunk better than the worst kept?" test that skips almost every chunk
 * of a stream (a float max reduction vectorises only under -ffast-math's assumptions,
 * which the search kernels are not built with: setup.py), and it gives NaN one place in every loop.
 *
 * The order is the floats' own: -0.0 and +0.0 are one key; -inf and +inf rank; NaN never
 * ranks (vs_heap_offer refuses it). Of equal keys the lower position ranks first, in
 * whatever order the positions arrive. */
#ifndef VECSERVE_TOPK_H
#define VECSERVE_TOPK_H

#include <stdint.h>
#include <string.h>

typedef struct {
    int32_t key;
    int64_t pos;
} vs_hit;

/* The keys of +inf and -inf; a NaN maps above the first or below the second. */
#define VS_KEY_PINF ((int32_t)0x7f800000)
#define VS_KEY_NINF (-(int32_t)0x7f800000)

/* The float's bits for a positive float, their negated magnitude for a negative one. */
static inline int32_t vs_key(float f) {
    int32_t b, neg;
    memcpy(&b, &f, sizeof b);
    neg = b >> 31;
    return ((b & 0x7fffffff) ^ neg) - neg;
}

static inline float vs_unkey(int32_t k) {
    int32_t neg = k >> 31;
    int32_t b = ((k ^ neg) - neg) | (int32_t)((uint32_t)neg << 31);
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static inline int vs_hit_worse(int32_t akey, int64_t apos, vs_hit b) {
    return akey < b.key || (akey == b.key && apos > b.pos);
}

static void vs_heap_down(vs_hit *h, int64_t n, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && vs_hit_worse(h[l].key, h[l].pos, h[m])) m = l;
        if (r < n && vs_hit_worse(h[r].key, h[r].pos, h[m])) m = r;
        if (m == i) return;
        vs_hit t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* Offer one (key, pos) to the heap h of capacity k holding *n; NaN keys are refused. */
static inline void vs_heap_offer(vs_hit *h, int64_t *n, int64_t k, int32_t key, int64_t pos) {
    if (key > VS_KEY_PINF || key < VS_KEY_NINF || k <= 0) return;
    if (*n < k) {
        int64_t i = (*n)++;
        while (i > 0) { /* sift up */
            int64_t up = (i - 1) / 2;
            if (!vs_hit_worse(key, pos, h[up])) break;
            h[i] = h[up];
            i = up;
        }
        h[i].key = key;
        h[i].pos = pos;
    } else if (vs_hit_worse(h[0].key, h[0].pos, (vs_hit){key, pos})) {
        h[0].key = key;
        h[0].pos = pos;
        vs_heap_down(h, *n, 0);
    }
}

/* Empty the heap into pos/val (either may be NULL), best first; returns how many. */
static int64_t vs_heap_drain(vs_hit *h, int64_t len, int64_t *pos, float *val) {
    for (int64_t m = len; m > 0; m--) {
        if (pos) pos[m - 1] = h[0].pos;
        if (val) val[m - 1] = vs_unkey(h[0].key);
        h[0] = h[m - 1];
        vs_heap_down(h, m - 1, 0);
    }
    return len;
}

#endif /* VECSERVE_TOPK_H */
