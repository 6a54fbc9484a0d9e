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
    int batch                   # negative sampling only: 1 a skip-gram window's contexts
                                # share the negatives (CBOW: cbow_batch windows, sgemm
                                # HogBatch); 2 skip-gram sgemm HogBatch
    int cbow_batch              # CBOW HogBatch: centres per batch sharing negatives
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
    int32_t *ahead              # (negative,) the next negatives, drawn early to prefetch
    # HogBatch matrices, B = max(2 * window, cbow_batch) inputs, O = B + negative outputs
    real *inputM                # (B, size) gathered syn0 rows (CBOW: context means)
    real *outputM               # (O, size) gathered syn1neg rows
    real *corrM                 # (B, O) scores, then gradients
    real *inputMd               # (B, size) updates of the inputs
    real *outputMd              # (O, size) updates of syn1neg rows
    int32_t *bctx               # (cbow_batch, 2 * window) CBOW HogBatch contexts
    int32_t *bnctx              # (cbow_batch,) their counts
    # output chains (see out_chain): input rows, output rows, labels, work rows
    const real **inp            # (2 * window + 1,) input rows: syn0 rows, then neu1
    real **outr                 # (max(max_code, 1 + negative),) output rows
    real *labels                # (same,) label of each output row; < 0: skip it
    real *cwork                 # (2 * window, size) one update row per input
    # hierarchical softmax's top inner nodes, the thread's own copy (see hot_merge)
    int32_t hot_lo              # nodes >= hot_lo are read and written in `hot`
    int hot_n                   # their number (0: none)
    int hot_every               # centres between merges
    int hot_count               # centres since the last merge
    real *hot                   # (hot_n, size) this thread's copy of the rows
    real *hot0                  # (hot_n, size) the shared rows when last merged

cdef void out_chain(W2VState *s, int n_in, int n_out, real *work, bint hs) noexcept nogil
cdef void sg_pair(W2VState *s, int32_t inp, int32_t target, int n_out) noexcept nogil
cdef void sg_window(W2VState *s, int n_ctx, int n_rows, bint hs) noexcept nogil
cdef void cbow_window(W2VState *s, int n_ctx, int32_t target, int n_out) noexcept nogil
cdef void hogbatch_window(W2VState *s, int n_ctx, int n_out) noexcept nogil
cdef void cbow_hogbatch(W2VState *s, int m) noexcept nogil
cdef int64_t train_sentences(W2VState *s, const int32_t *words, const int64_t *bounds,
                             int64_t s0, int64_t s1, real alpha0, real alpha1) noexcept nogil


# shared with the subword kernels (vecserve/train/_subword.pyx)
cdef check_array(name, a, dtype, ndim, writable=*)
cdef fill_sigmoid(real *table)
cdef bint check_range(const int32_t[::1] words, const int64_t[::1] bounds, int64_t s0,
                      int64_t s1) except -1
