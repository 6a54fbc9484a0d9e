# cython: language_level=3
"""Declarations of the word2vec kernels (see _kernels.pyx)."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

ctypedef float real

cdef enum:
    EXP_TABLE_SIZE = 1000
    MAX_EXP = 6
    MAX_SENTENCE = 10000

# All the state one worker thread needs. Weights and tables are shared by every thread
# (Hogwild: read and written with no lock); the buffers after ``rng`` belong to one thread.
cdef struct W2VState:
    real *syn0                  # (vocab, size) input vectors: the result
    real *syn1                  # (vocab - 1, size) hierarchical-softmax inner nodes, or NULL
    real *syn1neg               # (vocab, size) negative-sampling output vectors, or NULL
    int size
    int window
    int negative
    int hs
    int sg
    int cbow_mean
    int batch                   # HogBatch: one sgemm-based update per window (sg + negative)
    int32_t vocab_size
    const uint32_t *sample_int  # keep word w if sample_int[w] >= a uniform uint32
    const uint32_t *alias_prob  # unigram^0.75 alias table: threshold ...
    const int32_t *alias_idx    # ... and alias
    const uint8_t *codes        # (vocab, max_code) Huffman codes
    const int32_t *points       # (vocab, max_code) inner-node ids on the path
    const int32_t *codelens     # (vocab,)
    int max_code
    # per thread
    uint64_t rng
    real alpha
    real *neu1                  # (size,)
    real *work                  # (size,)
    int32_t *sent               # (MAX_SENTENCE,) the subsampled sentence
    int32_t *ctx                # (2 * window,) context word ids
    int32_t *outs               # (1 + negative,) target then negatives
    real *inputM                # (2 * window, size)   HogBatch gathered syn0 rows
    real *outputM               # (1 + negative, size) HogBatch gathered syn1neg rows
    real *corrM                 # (2 * window, 1 + negative) scores, then gradients
    real *inputMd               # (2 * window, size)   updates of syn0 rows
    real *outputMd              # (1 + negative, size) updates of syn1neg rows

cdef void sg_pair(W2VState *s, int32_t inp, int32_t target, int n_out) noexcept nogil
cdef void cbow_window(W2VState *s, int n_ctx, int32_t target, int n_out) noexcept nogil
cdef void hogbatch_window(W2VState *s, int n_ctx, int n_out) noexcept nogil
cdef int64_t train_sentences(W2VState *s, const int32_t *words, const int64_t *bounds,
                             int64_t s0, int64_t s1, real alpha0, real alpha1) noexcept nogil
