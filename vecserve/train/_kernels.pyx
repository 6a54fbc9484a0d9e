# cython: language_level=3
"""word2vec kernels: skip-gram / CBOW, negative sampling / hierarchical softmax, HogBatch.

Everything here runs without the GIL on raw pointers held in one :c:type:`W2VState`.
:class:`KernelWorker` is the Python face: one per thread, it owns that thread's buffers
and trains a range of sentences of the encoded corpus in ONE ``with nogil:`` block.
Weights are shared between workers and updated with no lock (Hogwild).

The ``*_step`` functions run a single update on given indices, so tests can compare the
kernels with NumPy reference implementations.

Semantics follow the original C word2vec and gensim: the input of a skip-gram pair is
the *context* word's syn0 row and the predicted word is the window's centre; subsampling
keeps word ``w`` with probability ``(sqrt(f/t) + 1) * t/f`` (``t = sample * total``);
windows shrink by a uniform random ``b`` in ``[0, window)``; gradients go through a
sigmoid table clamped at +-6 (negative sampling) or skip the node (hierarchical softmax).

Skip-gram with ``batch=1`` (the default of :class:`~vecserve.train.Word2Vec`): for one
centre, its contexts share the centre and K negatives as outputs (HogBatch's sharing)
but run pair after pair like the per-pair kernel, as an output chain (below): no rows
gathered into matrices and back, no BLAS call overhead on matrices this small.
``batch=2`` runs the ``sgemm`` form (HogBatch proper), kept for comparison.

Output chains (:c:func:`out_chain`): inputs (a centre's contexts, or CBOW's mean) against
output rows (a Huffman path, or the centre and its negatives), in output-major order:
each output row meets the inputs one after another, each pair seeing the row as the
pairs before it left it, and an input's row changes only after the chain (as a pair's
input changes after its outputs). Output rows are independent of each other, so up to 4
run interleaved in one pass over the vectors (which also computes the next input's
scores); the passes are the C loops of ``_w2v.h`` (built for AVX2+FMA and for baseline
x86-64, the CPU picking once at load time). For skip-gram HS the chain is exactly the
pairs of a window run one after another. Measured and dropped (11-26, single thread,
20 MB): the same chain as small matrix products (scores ``in . o^T``, the inputs' Gram
matrix for the rows' changes within the window, three passes per row instead of one
per input) trained skip-gram+HS 35% slower, an AVX-512 build of these loops no faster,
groups of 8 rows 28% slower: at 100 components a pass is short, and the chain already
overlaps four rows' gradients.

HogBatch (Ji et al., 2016): for one centre word, its ``B`` context rows of syn0 and the
``1 + K`` output rows of syn1neg (the centre and K negatives shared by all contexts) are
gathered into small matrices; scores ``(B, 1+K)``, the syn0 updates ``(B, D)`` and the
syn1neg updates ``(1+K, D)`` are three ``sgemm`` calls; the updates are added back.
CBOW HogBatch does the same for ``cbow_batch`` consecutive windows of a sentence: their
context means are the inputs, their centres plus K shared negatives the outputs (a
centre is no negative for the other windows: its gradient there is zero).

While one update runs, the next one's negatives are already drawn and their rows
prefetched (``draw_ahead``), as are the next centre's row and its new context row.
"""

import numpy as np

cimport numpy as cnp
from libc.math cimport exp
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset
from scipy.linalg.cython_blas cimport saxpy, sgemm, sscal

cnp.import_array()

cdef extern from "_w2v.h" nogil:
    uint64_t vs_rng_next(uint64_t *rng) noexcept
    uint32_t vs_rand_below(uint64_t *rng, uint32_t n) noexcept
    int32_t vs_draw_alias(uint64_t *rng, const uint32_t *prob, const int32_t *alias,
                          int32_t n) noexcept
    void prefetch "vs_prefetch"(const void *p, int nbytes) noexcept
    void prefetch_read "vs_prefetch_read"(const void *p, int nbytes) noexcept
    real vs_grad(real f, real label, real alpha, int hs, const real *table, real max_exp,
                 int scale) noexcept
    void vs_axpy(int n, real a, const real *x, real *y) noexcept
    void vs_chain(int n, int B, const real **inp, real **o, const real *lab, int n_out,
                  real *work, real alpha, int hs, const real *table, real max_exp,
                  int scale) noexcept
    void vs_sum_rows(int n, int m, real **rows, int mean, real *out) noexcept
    void vs_add_rows(int n, int m, real **rows, const real *work, int per_row) noexcept
    void vs_merge_rows(int n, int m, real *shared, real *priv, real *snap) noexcept

cdef int ONE = 1
cdef real ONEF = 1.0
cdef real ZEROF = 0.0
cdef char TRANS = b"T"
cdef char NOTRANS = b"N"

#: the sigmoid over [-MAX_EXP, MAX_EXP), EXP_SCALE entries per unit
cdef real EXP_TABLE[EXP_TABLE_SIZE]
cdef int EXP_SCALE = EXP_TABLE_SIZE // MAX_EXP // 2


cdef bint check_range(const int32_t[::1] words, const int64_t[::1] bounds, int64_t s0,
                      int64_t s1) except -1:
    """Sentences ``[s0, s1)`` of ``bounds`` over ``words``, checked before a GIL-free
    ``train``: ``ValueError`` where they reach outside the arrays or a sentence is longer
    than ``MAX_SENTENCE``; False where the range holds no word."""
    if s0 < 0 or s1 < s0 or s1 >= bounds.shape[0]:
        raise ValueError(f"sentence range [{s0}, {s1}) outside 0..{bounds.shape[0] - 1}")
    if bounds[s1] > words.shape[0]:
        raise ValueError("bounds point past the end of words")
    if s1 == s0 or bounds[s1] == bounds[s0]:
        return False
    lengths = np.diff(np.asarray(bounds[s0 : s1 + 1]))
    if lengths.min() < 0 or lengths.max() > MAX_SENTENCE:
        raise ValueError(f"sentence lengths must be 0..{MAX_SENTENCE}, bounds out of order")
    return True


cdef fill_sigmoid(real *table):
    """table[:EXP_TABLE_SIZE] = the sigmoid over [-MAX_EXP, MAX_EXP) (the kernels' and
    the subword kernels' one table)."""
    for i in range(EXP_TABLE_SIZE):
        e = np.exp((i / <double>EXP_TABLE_SIZE * 2.0 - 1.0) * MAX_EXP)
        table[i] = <real>(e / (e + 1.0))


fill_sigmoid(EXP_TABLE)

cdef inline real neg_gradient(real f, real label, real alpha) noexcept nogil:
    """A negative-sampling pair's gradient from its score (clamped at +-MAX_EXP)."""
    return vs_grad(f, label, alpha, 0, EXP_TABLE, MAX_EXP, EXP_SCALE)


# ---------------------------------------------------------------- random numbers

cdef inline uint64_t rng_next(W2VState *s) noexcept nogil:
    return vs_rng_next(&s.rng)

cdef inline uint32_t rand_below(W2VState *s, uint32_t n) noexcept nogil:
    return vs_rand_below(&s.rng, n)

cdef inline int32_t draw_negative(W2VState *s) noexcept nogil:
    """One word from the unigram^0.75 distribution (the alias table, O(1))."""
    return vs_draw_alias(&s.rng, s.alias_prob, s.alias_idx, s.vocab_size)

cpdef uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b):
    """A well-mixed non-zero 64-bit seed from (seed, a, b) (splitmix64 rounds)."""
    cdef uint64_t z = seed
    cdef uint64_t part
    for part in (a, b, 0x5EED):
        z += part * <uint64_t>0x9E3779B97F4A7C15ULL + <uint64_t>0x632BE59BD9B4E019ULL
        z = (z ^ (z >> 30)) * <uint64_t>0xBF58476D1CE4E5B9ULL
        z = (z ^ (z >> 27)) * <uint64_t>0x94D049BB133111EBULL
        z = z ^ (z >> 31)
    return z if z else <uint64_t>0x9E3779B97F4A7C15ULL


# ---------------------------------------------------------------- kernels

cdef void out_chain(W2VState *s, int n_in, int n_out, real *work, bint hs) noexcept nogil:
    """Inputs s.inp[:n_in] predict outputs s.outr[:n_out] (labels s.labels).

    Every output row meets the inputs in order, each pair seeing the row as the pairs
    before it left it (as when the pairs run one after another); an input's update
    goes into ``work[c * size]`` (added to the input rows by the caller, after the
    chain). Rows are independent of each other, so up to 4 run interleaved, and one
    pass over the vectors updates them and computes the next input's scores. ``hs``: a
    score outside +-MAX_EXP skips the pair (hierarchical softmax); otherwise the
    gradient is clamped there (negative sampling). A label < 0 skips the output.
    """
    vs_chain(s.size, n_in, s.inp, s.outr, s.labels, n_out, work, s.alpha, hs, EXP_TABLE,
             MAX_EXP, EXP_SCALE)

cdef inline int hs_outputs(W2VState *s, int32_t target) noexcept nogil:
    """s.outr / s.labels = target's Huffman path (root first) and its labels 1 - code."""
    cdef int k, n = s.codelens[target]
    cdef const uint8_t *code = &s.codes[<int64_t>target * s.max_code]
    cdef const int32_t *point = &s.points[<int64_t>target * s.max_code]
    for k in range(n):
        if point[k] >= s.hot_lo:
            s.outr[k] = &s.hot[<int64_t>(point[k] - s.hot_lo) * s.size]
        else:
            s.outr[k] = &s.syn1[<int64_t>point[k] * s.size]
        s.labels[k] = 1.0 - code[k]
    return n

cdef inline void hot_load(W2VState *s) noexcept nogil:
    """Take the thread's copies of the top nodes from the shared rows."""
    cdef size_t nbytes = <size_t>s.hot_n * s.size * sizeof(real)
    memcpy(s.hot, &s.syn1[<int64_t>s.hot_lo * s.size], nbytes)
    memcpy(s.hot0, s.hot, nbytes)
    s.hot_count = 0

cdef inline void hot_merge(W2VState *s) noexcept nogil:
    """Add this thread's changes to the top nodes into the shared rows, and take theirs.

    Every Huffman path starts at the root, so with two threads or more the top nodes'
    rows, written after every pair, would move from core to core all the time (with two
    threads, skip-gram + HS trained no faster than with one). Each thread works on its
    own copy of the ``hot_n`` top nodes and merges it every ``hot_every`` centres (and
    at the end of a call): a Hogwild update of those rows, ``hot_every`` centres late."""
    vs_merge_rows(s.size, s.hot_n, &s.syn1[<int64_t>s.hot_lo * s.size], s.hot, s.hot0)
    s.hot_count = 0

cdef inline int neg_outputs(W2VState *s, int n_out) noexcept nogil:
    """s.outr / s.labels = s.outs[:n_out] (the target, then negatives; a negative that
    is the target is skipped)."""
    cdef int d
    cdef int32_t target = s.outs[0]
    for d in range(n_out):
        s.outr[d] = &s.syn1neg[<int64_t>s.outs[d] * s.size]
        s.labels[d] = 1.0 if d == 0 else (-1.0 if s.outs[d] == target else 0.0)
    return n_out

cdef void sg_pair(W2VState *s, int32_t inp, int32_t target, int n_out) noexcept nogil:
    """One skip-gram pair: syn0[inp] predicts target (HS if s.hs; negatives s.outs[:n_out])."""
    cdef int D = s.size
    cdef real *l1 = &s.syn0[<int64_t>inp * D]
    memset(s.work, 0, D * sizeof(real))
    s.inp[0] = l1
    if s.hs:
        out_chain(s, 1, hs_outputs(s, target), s.work, True)
    if n_out > 0:
        out_chain(s, 1, neg_outputs(s, n_out), s.work, False)
    vs_axpy(D, 1.0, s.work, l1)

cdef void sg_window(W2VState *s, int n_ctx, int n_rows, bint hs) noexcept nogil:
    """Skip-gram, one centre: every context s.ctx[:n_ctx] predicts the output rows
    s.outr[:n_rows] set by hs_outputs (``hs``: the centre's Huffman path, node by node)
    or neg_outputs (the centre and the negatives the contexts share, pair after pair).
    A context's row changes only after all of them, as per pair it changes after its
    outputs: the same updates as pair after pair."""
    cdef int D = s.size
    cdef int c
    memset(s.cwork, 0, n_ctx * D * sizeof(real))
    for c in range(n_ctx):
        s.inp[c] = &s.syn0[<int64_t>s.ctx[c] * D]
    out_chain(s, n_ctx, n_rows, s.cwork, hs)
    vs_add_rows(D, n_ctx, <real **>s.inp, s.cwork, 1)

cdef void cbow_window(W2VState *s, int n_ctx, int32_t target, int n_out) noexcept nogil:
    """One CBOW window: the mean (or sum) of syn0[s.ctx[:n_ctx]] predicts target."""
    cdef int D = s.size
    cdef int c
    for c in range(n_ctx):
        s.inp[c] = &s.syn0[<int64_t>s.ctx[c] * D]
    vs_sum_rows(D, n_ctx, <real **>s.inp, s.cbow_mean, s.neu1)
    memset(s.work, 0, D * sizeof(real))
    s.inp[2 * s.window] = s.neu1
    if s.hs:
        vs_chain(D, 1, &s.inp[2 * s.window], s.outr, s.labels, hs_outputs(s, target),
                 s.work, s.alpha, True, EXP_TABLE, MAX_EXP, EXP_SCALE)
    if n_out > 0:
        vs_chain(D, 1, &s.inp[2 * s.window], s.outr, s.labels, neg_outputs(s, n_out),
                 s.work, s.alpha, False, EXP_TABLE, MAX_EXP, EXP_SCALE)
    # like word2vec.c and gensim, every context row gets the whole error (mean or sum)
    vs_add_rows(D, n_ctx, <real **>s.inp, s.work, 0)

cdef inline void hb_scores(W2VState *s, int B, int O) noexcept nogil:
    """HogBatch forward: gather the output rows s.outs[:O] of syn1neg into outputM, then
    corrM (B x O, row-major) = inputM . outputM^T. The caller has filled inputM."""
    cdef int D = s.size
    cdef int o
    for o in range(O):
        memcpy(&s.outputM[o * D], &s.syn1neg[<int64_t>s.outs[o] * D], D * sizeof(real))
    sgemm(&TRANS, &NOTRANS, &O, &B, &D, &ONEF, s.outputM, &D, s.inputM, &D,
          &ZEROF, s.corrM, &O)

cdef inline void hb_updates(W2VState *s, int B, int O) noexcept nogil:
    """HogBatch backward, once corrM holds the gradients G: inputMd (B x D) = G . outputM,
    outputMd (O x D) = G^T . inputM, and the output rows' updates added to syn1neg. The
    caller adds inputMd's rows to the syn0 rows its inputs came from."""
    cdef int D = s.size
    cdef int o
    sgemm(&NOTRANS, &NOTRANS, &D, &B, &O, &ONEF, s.outputM, &D, s.corrM, &O,
          &ZEROF, s.inputMd, &D)
    sgemm(&NOTRANS, &TRANS, &D, &O, &B, &ONEF, s.inputM, &D, s.corrM, &O,
          &ZEROF, s.outputMd, &D)
    for o in range(O):
        saxpy(&D, &ONEF, &s.outputMd[o * D], &ONE, &s.syn1neg[<int64_t>s.outs[o] * D], &ONE)

cdef void hogbatch_window(W2VState *s, int n_ctx, int n_out) noexcept nogil:
    """HogBatch: contexts s.ctx[:n_ctx] x outputs s.outs[:n_out] (centre + shared negatives)."""
    cdef int D = s.size
    cdef int B = n_ctx
    cdef int O = n_out
    cdef int b, o
    cdef int32_t target = s.outs[0]
    cdef real *g
    for b in range(B):
        memcpy(&s.inputM[b * D], &s.syn0[<int64_t>s.ctx[b] * D], D * sizeof(real))
    hb_scores(s, B, O)
    for b in range(B):
        g = &s.corrM[b * O]
        g[0] = neg_gradient(g[0], 1.0, s.alpha)
        for o in range(1, O):
            if s.outs[o] == target:
                g[o] = 0.0
            else:
                g[o] = neg_gradient(g[o], 0.0, s.alpha)
    hb_updates(s, B, O)
    for b in range(B):
        saxpy(&D, &ONEF, &s.inputMd[b * D], &ONE, &s.syn0[<int64_t>s.ctx[b] * D], &ONE)

cdef void cbow_hogbatch(W2VState *s, int m) noexcept nogil:
    """CBOW HogBatch: m centres (inputs: their context means in s.inputM, targets in
    s.outs[:m], contexts in s.bctx) share the negatives s.outs[m:m + negative]."""
    cdef int D = s.size
    cdef int B = m
    cdef int O = m + s.negative
    cdef int W2 = 2 * s.window
    cdef int b, o, c
    cdef int32_t target
    cdef real *g
    hb_scores(s, B, O)
    for b in range(B):
        g = &s.corrM[b * O]
        target = s.outs[b]
        for o in range(m):  # other centres' targets are not negatives for this one
            g[o] = neg_gradient(g[o], 1.0, s.alpha) if o == b else 0.0
        for o in range(m, O):
            if s.outs[o] == target:
                g[o] = 0.0
            else:
                g[o] = neg_gradient(g[o], 0.0, s.alpha)
    hb_updates(s, B, O)
    for b in range(B):
        for c in range(s.bnctx[b]):
            saxpy(&D, &ONEF, &s.inputMd[b * D], &ONE,
                  &s.syn0[<int64_t>s.bctx[b * W2 + c] * D], &ONE)

cdef inline void cbow_batch_add(W2VState *s, int m, int n_ctx, int32_t target) noexcept nogil:
    """Queue centre m of a CBOW HogBatch: its contexts are in s.ctx[:n_ctx]."""
    cdef int D = s.size
    cdef int c
    cdef real inv
    cdef real *h = &s.inputM[m * D]
    memset(h, 0, D * sizeof(real))
    for c in range(n_ctx):
        saxpy(&D, &ONEF, &s.syn0[<int64_t>s.ctx[c] * D], &ONE, h, &ONE)
    if s.cbow_mean and n_ctx > 1:
        inv = 1.0 / n_ctx
        sscal(&D, &inv, h, &ONE)
    memcpy(&s.bctx[m * 2 * s.window], s.ctx, n_ctx * sizeof(int32_t))
    s.bnctx[m] = n_ctx
    s.outs[m] = target

cdef inline void cbow_batch_flush(W2VState *s, int m) noexcept nogil:
    """Run the queued CBOW HogBatch of m centres with the negatives drawn ahead."""
    if m == 0:
        return
    memcpy(&s.outs[m], s.ahead, s.negative * sizeof(int32_t))
    draw_ahead(s)
    cbow_hogbatch(s, m)

cdef inline void prefetch_path(W2VState *s, int32_t word, int row_bytes) noexcept nogil:
    """Start loading the rows of word's Huffman path below depth 4 (the nodes near the
    root are met by every word and stay in cache)."""
    cdef int k
    cdef const int32_t *point = &s.points[<int64_t>word * s.max_code]
    for k in range(4, s.codelens[word]):
        prefetch(&s.syn1[<int64_t>point[k] * s.size], row_bytes)

cdef inline void prefetch_codes(W2VState *s, int32_t word) noexcept nogil:
    """Start loading word's path length, node ids and codes: prefetch_path reads them one
    centre later, hs_outputs two (a rare word's rows of these tables are not in cache)."""
    prefetch_read(&s.codelens[word], sizeof(int32_t))
    prefetch_read(&s.points[<int64_t>word * s.max_code], s.max_code * sizeof(int32_t))
    prefetch_read(&s.codes[<int64_t>word * s.max_code], s.max_code)

cdef inline void draw_ahead(W2VState *s) noexcept nogil:
    """Draw the next update's negatives now and start loading their rows into cache."""
    cdef int d
    cdef int32_t w
    for d in range(s.negative):
        w = draw_negative(s)
        s.ahead[d] = w
        prefetch(&s.syn1neg[<int64_t>w * s.size], s.size * sizeof(real))

cdef inline int draw_outputs(W2VState *s, int32_t target) noexcept nogil:
    """s.outs = target + the negatives drawn ahead; draws the next ones."""
    if s.negative <= 0:
        return 0
    s.outs[0] = target
    memcpy(&s.outs[1], s.ahead, s.negative * sizeof(int32_t))
    draw_ahead(s)
    return s.negative + 1

cdef int64_t train_sentences(W2VState *s, const int32_t *words, const int64_t *bounds,
                             int64_t s0, int64_t s1, real alpha0, real alpha1) noexcept nogil:
    """Train sentences [s0, s1); alpha falls linearly from alpha0 to alpha1 across them.

    Returns the number of words left after subsampling (the words trained on).
    """
    cdef int64_t sent, k, total = bounds[s1] - bounds[s0], done = 0, effective = 0
    cdef int n, i, j, b, lo, hi, n_ctx, n_out, m = 0
    cdef int cbow_batch = s.cbow_batch if (s.batch and not s.sg) else 0
    cdef int32_t w, word
    cdef int window = s.window
    cdef int row_bytes = s.size * sizeof(real)
    if s.negative > 0:
        draw_ahead(s)
    if s.hot_n:
        hot_load(s)
    for sent in range(s0, s1):
        s.alpha = alpha0 + (alpha1 - alpha0) * (<real>done / <real>total)
        n = 0
        for k in range(bounds[sent], bounds[sent + 1]):
            w = words[k]
            if s.sample_int[w] < <uint32_t>(rng_next(s) >> 32):
                continue
            s.sent[n] = w
            n += 1
        done += bounds[sent + 1] - bounds[sent]
        effective += n
        for i in range(n):
            word = s.sent[i]
            if s.hot_n:
                s.hot_count += 1
                if s.hot_count >= s.hot_every:
                    hot_merge(s)
            b = <int>rand_below(s, window)
            lo = i - window + b
            if lo < 0:
                lo = 0
            hi = i + window + 1 - b
            if hi > n:
                hi = n
            # rows the next centre needs that this one does not: its own, a new context
            if i + 1 < n and s.negative > 0:
                prefetch(&s.syn1neg[<int64_t>s.sent[i + 1] * s.size], row_bytes)
            if i + window + 1 < n:
                prefetch(&s.syn0[<int64_t>s.sent[i + window + 1] * s.size], row_bytes)
            if s.hs and i + 1 < n:  # the next centre's Huffman path below the hot top
                prefetch_path(s, s.sent[i + 1], row_bytes)
                if i + 2 < n:
                    prefetch_codes(s, s.sent[i + 2])
            if s.sg and not s.batch:
                if s.hs and s.negative <= 0:  # HS alone: the window's pairs node by node
                    n_ctx = 0
                    for j in range(lo, hi):
                        if j != i:
                            s.ctx[n_ctx] = s.sent[j]
                            n_ctx += 1
                    sg_window(s, n_ctx, hs_outputs(s, word), True)
                    continue
                for j in range(lo, hi):
                    if j != i:
                        n_out = draw_outputs(s, word)
                        sg_pair(s, s.sent[j], word, n_out)
                continue
            n_ctx = 0
            for j in range(lo, hi):
                if j != i:
                    s.ctx[n_ctx] = s.sent[j]
                    n_ctx += 1
            if n_ctx == 0:
                continue
            if cbow_batch:
                cbow_batch_add(s, m, n_ctx, word)
                m += 1
                if m == cbow_batch:
                    cbow_batch_flush(s, m)
                    m = 0
                continue
            n_out = draw_outputs(s, word)
            if s.sg:
                if s.batch == 2:
                    hogbatch_window(s, n_ctx, n_out)
                else:
                    sg_window(s, n_ctx, neg_outputs(s, n_out), False)
            else:
                cbow_window(s, n_ctx, word, n_out)
        cbow_batch_flush(s, m)  # a batch never spans sentences (alpha changes between)
        m = 0
    if s.hot_n:
        hot_merge(s)
    return effective


# ---------------------------------------------------------------- Python face

cdef inline real *_rows(cnp.ndarray a):
    return <real *>cnp.PyArray_DATA(a) if a is not None and a.shape[0] > 0 else NULL

cdef check_array(name, a, dtype, ndim, writable=False):
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy array")
    if a.dtype != dtype or a.ndim != ndim or not a.flags.c_contiguous:
        raise TypeError(f"{name} must be a C-contiguous {ndim}-d {np.dtype(dtype)} array, "
                        f"got {a.dtype} with shape {a.shape}")
    if writable and not a.flags.writeable:
        raise TypeError(f"{name} must be writable")


cdef class KernelWorker:
    """One thread's trainer: shared weights and tables, private buffers.

    Parameters
    ----------
    syn0, syn1, syn1neg : float32 arrays (vocab, size); syn1/syn1neg may be ``None``.
    sample_int : uint32 (vocab,) subsampling thresholds.
    alias_prob, alias_idx : uint32 / int32 (vocab,) negative-sampling alias table.
    codes, points, codelens : Huffman tree (uint8/int32 (vocab, max_code), int32 (vocab,)),
        or ``None`` without hierarchical softmax.
    """

    cdef W2VState st
    cdef list _keep

    def __init__(self, syn0, syn1, syn1neg, sample_int, alias_prob, alias_idx,
                 codes=None, points=None, codelens=None, *, int sg, int hs, int negative,
                 int window, int cbow_mean=1, int batch=0, int cbow_batch=8,
                 int hot_nodes=0, int hot_every=16):
        cdef int size = syn0.shape[1]
        check_array("syn0", syn0, np.float32, 2, True)
        if window < 1 or size < 1:
            raise ValueError("window and vector size must be >= 1")
        for name, a in (("syn1", syn1), ("syn1neg", syn1neg)):
            if a is not None:
                check_array(name, a, np.float32, 2, True)
                if a.shape[1] != size:
                    raise ValueError(f"{name} has {a.shape[1]} columns, syn0 {size}")
        check_array("sample_int", sample_int, np.uint32, 1)
        check_array("alias_prob", alias_prob, np.uint32, 1)
        check_array("alias_idx", alias_idx, np.int32, 1)
        if hs:
            if syn1 is None or codes is None:
                raise ValueError("hs=1 needs syn1 and a Huffman tree")
            check_array("codes", codes, np.uint8, 2)
            check_array("points", points, np.int32, 2)
            check_array("codelens", codelens, np.int32, 1)
        if negative and syn1neg is None:
            raise ValueError("negative > 0 needs syn1neg")
        if batch not in (0, 1, 2):
            raise ValueError("batch must be 0 (pairs), 1 (windows) or 2 (sgemm HogBatch)")
        if batch and not (negative > 0 and not hs):
            raise ValueError("HogBatch needs negative > 0 and hs=0")
        if cbow_batch < 1:
            raise ValueError("cbow_batch must be >= 1")
        cdef int B = max(2 * window, cbow_batch)
        cdef int O = B + negative
        hot_nodes = min(hot_nodes, syn1.shape[0]) if hs else 0
        if hot_nodes < 0 or hot_every < 1:
            raise ValueError("hot_nodes must be >= 0 and hot_every >= 1")
        bufs = {
            "hot": np.zeros((hot_nodes, size), np.float32),
            "hot0": np.zeros((hot_nodes, size), np.float32),
            "neu1": np.zeros(size, np.float32),
            "work": np.zeros(size, np.float32),
            "sent": np.zeros(MAX_SENTENCE, np.int32),
            "ctx": np.zeros(2 * window, np.int32),
            "outs": np.zeros(O, np.int32),
            "ahead": np.zeros(max(negative, 1), np.int32),
            "inputM": np.zeros((B, size), np.float32),
            "outputM": np.zeros((O, size), np.float32),
            "corrM": np.zeros((B, O), np.float32),
            "inputMd": np.zeros((B, size), np.float32),
            "outputMd": np.zeros((O, size), np.float32),
            "bctx": np.zeros((cbow_batch, 2 * window), np.int32),
            "bnctx": np.zeros(cbow_batch, np.int32),
            "inp": np.zeros(2 * window + 1, np.uintp),
            "outr": np.zeros(max(codes.shape[1] if hs else 0, 1 + negative), np.uintp),
            "labels": np.zeros(max(codes.shape[1] if hs else 0, 1 + negative), np.float32),
            "cwork": np.zeros((2 * window, size), np.float32),
        }
        self._keep = [syn0, syn1, syn1neg, sample_int, alias_prob, alias_idx,
                      codes, points, codelens, bufs]
        memset(&self.st, 0, sizeof(W2VState))
        self.st.syn0 = _rows(syn0)
        self.st.syn1 = _rows(syn1)
        self.st.syn1neg = _rows(syn1neg)
        self.st.size = size
        self.st.window = window
        self.st.negative = negative
        self.st.hs = hs
        self.st.sg = sg
        self.st.cbow_mean = cbow_mean
        self.st.batch = batch
        self.st.cbow_batch = cbow_batch
        self.st.vocab_size = syn0.shape[0]
        self.st.sample_int = <uint32_t *>cnp.PyArray_DATA(sample_int)
        self.st.alias_prob = <uint32_t *>cnp.PyArray_DATA(alias_prob)
        self.st.alias_idx = <int32_t *>cnp.PyArray_DATA(alias_idx)
        if hs:
            self.st.codes = <uint8_t *>cnp.PyArray_DATA(codes)
            self.st.points = <int32_t *>cnp.PyArray_DATA(points)
            self.st.codelens = <int32_t *>cnp.PyArray_DATA(codelens)
            self.st.max_code = codes.shape[1]
        self.st.rng = 1
        self.st.neu1 = <real *>cnp.PyArray_DATA(bufs["neu1"])
        self.st.work = <real *>cnp.PyArray_DATA(bufs["work"])
        self.st.sent = <int32_t *>cnp.PyArray_DATA(bufs["sent"])
        self.st.ctx = <int32_t *>cnp.PyArray_DATA(bufs["ctx"])
        self.st.outs = <int32_t *>cnp.PyArray_DATA(bufs["outs"])
        self.st.ahead = <int32_t *>cnp.PyArray_DATA(bufs["ahead"])
        self.st.inputM = <real *>cnp.PyArray_DATA(bufs["inputM"])
        self.st.outputM = <real *>cnp.PyArray_DATA(bufs["outputM"])
        self.st.corrM = <real *>cnp.PyArray_DATA(bufs["corrM"])
        self.st.inputMd = <real *>cnp.PyArray_DATA(bufs["inputMd"])
        self.st.outputMd = <real *>cnp.PyArray_DATA(bufs["outputMd"])
        self.st.bctx = <int32_t *>cnp.PyArray_DATA(bufs["bctx"])
        self.st.bnctx = <int32_t *>cnp.PyArray_DATA(bufs["bnctx"])
        self.st.inp = <const real **>cnp.PyArray_DATA(bufs["inp"])
        self.st.outr = <real **>cnp.PyArray_DATA(bufs["outr"])
        self.st.labels = <real *>cnp.PyArray_DATA(bufs["labels"])
        self.st.cwork = <real *>cnp.PyArray_DATA(bufs["cwork"])
        self.st.hot_n = hot_nodes
        self.st.hot_lo = syn1.shape[0] - hot_nodes if hot_nodes else 2**31 - 1
        self.st.hot_every = hot_every
        self.st.hot = <real *>cnp.PyArray_DATA(bufs["hot"])
        self.st.hot0 = <real *>cnp.PyArray_DATA(bufs["hot0"])

    def train(self, const int32_t[::1] words, const int64_t[::1] bounds, int64_t s0,
              int64_t s1, float alpha0, float alpha1, uint64_t seed):
        """Train sentences ``[s0, s1)`` (``words[bounds[i]:bounds[i+1]]`` is sentence i).

        The GIL is released for the whole range. Returns the number of words trained on
        (after subsampling).
        """
        cdef int64_t effective
        if not check_range(words, bounds, s0, s1):
            return 0
        self.st.rng = seed if seed else 1
        with nogil:
            effective = train_sentences(&self.st, &words[0], &bounds[0], s0, s1,
                                        alpha0, alpha1)
        return effective

    # ------------------------------------------------------------ test wrappers

    def _set_ctx(self, contexts):
        """s.ctx[:len(contexts)] = contexts (1 to 2 x window of them)."""
        if not 0 < len(contexts) <= 2 * self.st.window:
            raise ValueError(f"1 to {2 * self.st.window} contexts")
        for c in range(len(contexts)):
            self.st.ctx[c] = contexts[c]

    def _set_outs(self, target, negatives):
        cdef int n = len(negatives)
        if n > self.st.negative:
            raise ValueError(f"at most {self.st.negative} negatives")
        self.st.outs[0] = target
        for d in range(n):
            self.st.outs[d + 1] = negatives[d]
        return n + 1 if self.st.negative > 0 else 0

    def sg_step(self, int inp, int target, negatives=(), float alpha=0.025):
        """One skip-gram pair update: syn0[inp] predicts target."""
        n_out = self._set_outs(target, negatives)
        self.st.alpha = alpha
        sg_pair(&self.st, inp, target, n_out)

    def cbow_step(self, contexts, int target, negatives=(), float alpha=0.025):
        """One CBOW update: contexts predict target."""
        self._set_ctx(contexts)
        n_out = self._set_outs(target, negatives)
        self.st.alpha = alpha
        cbow_window(&self.st, len(contexts), target, n_out)

    def sg_hs_window_step(self, contexts, int target, float alpha=0.025):
        """Skip-gram HS for one centre: every context predicts target (node by node)."""
        if not self.st.hs:
            raise ValueError("needs hs=1")
        self._set_ctx(contexts)
        self.st.alpha = alpha
        sg_window(&self.st, len(contexts), hs_outputs(&self.st, target), True)

    def sg_neg_window_step(self, contexts, int target, negatives, float alpha=0.025):
        """Skip-gram, one centre: every context predicts target against the shared
        negatives, pair after pair (the ``batch=1`` kernel)."""
        self._set_ctx(contexts)
        n_out = self._set_outs(target, negatives)
        self.st.alpha = alpha
        sg_window(&self.st, len(contexts), neg_outputs(&self.st, n_out), False)

    def hogbatch_step(self, contexts, int target, negatives, float alpha=0.025):
        """One HogBatch update: every context predicts target against shared negatives."""
        self._set_ctx(contexts)
        n_out = self._set_outs(target, negatives)
        self.st.alpha = alpha
        hogbatch_window(&self.st, len(contexts), n_out)

    def cbow_hogbatch_step(self, windows, negatives, float alpha=0.025):
        """One CBOW HogBatch update: ``windows`` is a list of (contexts, target) pairs
        (at most cbow_batch) that share ``negatives``."""
        cdef int m
        if not 0 < len(windows) <= self.st.cbow_batch:
            raise ValueError(f"1 to {self.st.cbow_batch} windows")
        if len(negatives) != self.st.negative:
            raise ValueError(f"exactly {self.st.negative} negatives")
        self.st.alpha = alpha
        for m, (contexts, target) in enumerate(windows):
            self._set_ctx(contexts)
            cbow_batch_add(&self.st, m, len(contexts), target)
        for d in range(len(negatives)):
            self.st.outs[len(windows) + d] = negatives[d]
        cbow_hogbatch(&self.st, len(windows))

    def draw_negatives(self, int n, uint64_t seed):
        """n draws from the negative-sampling table (for tests of the distribution)."""
        out = np.empty(n, np.int32)
        cdef int32_t[::1] o = out
        self.st.rng = seed if seed else 1
        with nogil:
            for i in range(n):
                o[i] = draw_negative(&self.st)
        return out


def sigmoid_table():
    """The sigmoid table the kernels use: float32 array of EXP_TABLE_SIZE values."""
    return np.array([EXP_TABLE[i] for i in range(EXP_TABLE_SIZE)], dtype=np.float32)


EXP_TABLE_LEN = EXP_TABLE_SIZE
MAX_EXP_VALUE = MAX_EXP
SENTENCE_MAX = MAX_SENTENCE
