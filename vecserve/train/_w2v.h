/* The word2vec kernels' inner loops in C (see _kernels.pyx for the kernels around them).
 *
 * Output chains (vs_chain): inputs in[0..B-1] (a centre's contexts, or CBOW's mean)
 * against output rows o[0..n_out-1] (a Huffman path, or the centre and its negatives),
 * in output-major order: each output row meets the inputs one after another, each pair
 * seeing the row as the pairs before it left it; an input's update goes into its row of
 * `work` (the caller adds it to the input row after the chain). */
#ifndef VECSERVE_W2V_H
#define VECSERVE_W2V_H

/* Start loading nbytes at p into cache, for writing. */
static inline void vs_prefetch(const void *p, int nbytes) {
    const char *c = (const char *)p;
    for (int k = 0; k < nbytes; k += 64) __builtin_prefetch(c + k, 1, 3);
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
void vs_axpy(int n, float a, const float *x, float *y);

/* The output chain: rows o[0..n_out-1] with labels lab against inputs in[0..B-1];
 * input c's update is added to work[c * n]. */
void vs_chain(int n, int B, const float *const *in, float *const *o, const float *lab,
              int n_out, float *work, float alpha, int hs, const float *table, float max_exp,
              int scale);

/* out = the sum of rows[0..m-1] (times 1/m if mean and m > 1). */
void vs_sum_rows(int n, int m, float *const *rows, int mean, float *out);

/* rows[c] += work (+ c * n if per_row) for every c < m. */
void vs_add_rows(int n, int m, float *const *rows, const float *work, int per_row);

#endif
