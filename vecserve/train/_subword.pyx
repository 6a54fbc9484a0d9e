# cython: language_level=3
"""fastText's subword kernels: skip-gram and CBOW with negative sampling on n-gram rows.

A word's *input* is the mean of its rows in the input matrix ``wi`` (fastText's layout:
``nwords`` word rows, then ``bucket`` n-gram rows): its own row and the rows of its
n-grams' buckets, in fastText's order, a bucket met twice counted twice
(``Dictionary::getSubwords``). ``sub_rows[sub_ptr[w]:sub_ptr[w + 1]]`` lists them (the
word's own row first). As in fastText's ``Model::update``, the gradient of that mean
goes *whole* to every one of its rows (not divided by their number).

Skip-gram (fastText's orientation, not word2vec's): the *centre*'s input predicts each
context word of the window against ``negative`` negatives drawn per pair (a negative
equal to its pair's target is skipped), pair after pair, each pair seeing the input as
the pairs before it left it, as in fastText. fastText re-reads and updates the centre's
``1 + n`` rows after every pair; here the mean is read once per window, each pair's
gradient is added to the mean at once (times ``sg_gain``: the mean's change when every
row gets the gradient, 1 unless a bucket repeats) and to the rows once, summed, after
the window: the same vectors for one thread, ``1 + n`` row reads and writes per centre
instead of per pair. Each pair's outputs run as an output chain (``vs_chain`` of
``_w2v.h``, the word2vec kernels' inner loops): output rows updated at once, up to 4
interleaved.

CBOW: the mean of every row of every context word (their own rows and n-gram rows)
predicts the centre against ``negative`` negatives; the gradient goes to each of those
rows (``cbow_mean=0``: their sum, as word2vec's CBOW). Each window position keeps its
word's sum of rows while it stays in the window, and the gradient its rows are owed
(:c:func:`cbow_cached`): a centre adds its contexts' sums instead of all their rows, and
a position's rows get their gradient once, when it leaves the last window it is in,
instead of after every centre (a position is a context of ~6 centres at window 5). The
sums carry this thread's updates at once, so the centres see what the rows would hold;
what other threads and other words sharing a bucket row change reaches a sum when its
word next enters a window. ``cbow_cache=0`` sums and updates every row for every
centre, as fastText.

Subsampling, window shrinking, the alias table of negatives and the random numbers are
the word2vec kernels' (:mod:`vecserve.train._kernels`), so one thread with a seed trains
the same vectors every time. While a centre trains, the input rows it will need next
are prefetched (skip-gram: the next centre's; CBOW: those of the word entering the
window two centres on), and so are the output rows of the negatives the next centre
will use: they are drawn a centre ahead, into a ring (``draw_ahead``), as the word2vec
kernels do. CBOW on the whole of wiki100m, one thread: 1.3x the words/CPU-s of the
same kernel drawing each centre's negatives as it trains, prefetching a centre ahead.
"""

import numpy as np

cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from vecserve.train._kernels cimport (
    EXP_TABLE_SIZE,
    MAX_EXP,
    MAX_SENTENCE,
    check_array,
    check_range,
    fill_sigmoid,
    real,
)

cnp.import_array()

cdef extern from "_w2v.h" nogil:
    uint64_t vs_rng_next(uint64_t *rng) noexcept
    uint32_t vs_rand_below(uint64_t *rng, uint32_t n) noexcept
    int32_t vs_draw_alias(uint64_t *rng, const uint32_t *prob, const int32_t *alias,
                          int32_t n) noexcept
    void prefetch "vs_prefetch"(const void *p, int nbytes) noexcept
    void vs_chain(int n, int B, const real **inp, real **o, const real *lab, int n_out,
                  real *work, real alpha, int hs, const real *table, real max_exp,
                  int scale) noexcept
    void vs_sum_rows(int n, int m, real **rows, int mean, real *out) noexcept
    void vs_scaled_sum(int n, int m, real **rows, real scale, real *out) noexcept
    void vs_add_rows(int n, int m, real **rows, const real *work, int per_row) noexcept
    void vs_axpy(int n, real a, const real *x, real *y) noexcept

cdef real EXP_TABLE[EXP_TABLE_SIZE]
cdef int EXP_SCALE = EXP_TABLE_SIZE // MAX_EXP // 2
fill_sigmoid(EXP_TABLE)


# One worker thread's state. Weights and tables are shared by every thread (Hogwild);
# the buffers after ``rng`` belong to one thread.
cdef struct SubState:
    real *wi                    # (nwords + bucket, size) input rows: words, then n-grams
    real *wo                    # (nwords, size) negative sampling's output rows, or NULL
    real *syn1                  # (nwords - 1, size) hierarchical softmax's inner nodes, or NULL
    int size
    int window
    int negative
    int hs                      # hierarchical softmax instead of negative sampling
    const uint8_t *codes        # (nwords, max_code) Huffman codes
    const int32_t *points       # (nwords, max_code) inner nodes on the path
    const int32_t *codelens     # (nwords,)
    int max_code
    int sg
    int cbow_mean
    int32_t vocab_size
    const int64_t *sub_ptr      # (nwords + 1,) each word's span of sub_rows
    const int32_t *sub_rows     # the input rows of every word, its own first
    const real *sg_gain         # (nwords,) sum of each row's multiplicity squared / rows
    const uint32_t *sample_int  # keep word w if sample_int[w] >= a uniform uint32
    const uint32_t *alias_prob  # unigram^ns_exponent alias table: threshold ...
    const int32_t *alias_idx    # ... and alias
    # per thread
    uint64_t rng
    real alpha
    real *neu1                  # (size,) the input: a mean of rows
    real *work                  # (size,) the input's gradient
    real *pwork                 # (size,) skip-gram: one pair's share of it
    int32_t *sent               # (MAX_SENTENCE,) the subsampled sentence
    real **rows                 # (2 * window * max_rows,) input row pointers
    const real **inp            # (1,) -> neu1
    real **outr                 # (2 * window * (1 + negative),) output rows
    real *labels                # (same,) 1 target, 0 negative, -1 skipped
    int cbow_cache              # CBOW: keep each window word's sum of rows (see cbow_cached)
    real *csum                  # (2 * window + 1, size) the sums, by position % (2w + 1)
    int64_t *cpos               # (2 * window + 1,) the position each sum is of (-1: none)
    int *cn                     # (2 * window + 1,) its number of rows
    real *gacc                  # (2 * window + 1, size) the gradient its rows are owed
    int *cdup                   # (2 * window + 1,) 1: another slot held the same word
    int *cslot                  # (2 * window,) a centre's contexts' slots ...
    real **crow                 # (2 * window,) ... and their sums (then owed gradients)
    int32_t *nq                 # (nq_mask + 1,) ring of negatives drawn ahead ...
    int nq_head, nq_len, nq_mask
    int nq_ahead                # ... this many, their output rows being loaded


cdef inline uint64_t rng_next(SubState *s) noexcept nogil:
    return vs_rng_next(&s.rng)

cdef inline uint32_t rand_below(SubState *s, uint32_t n) noexcept nogil:
    return vs_rand_below(&s.rng, n)

cdef inline int32_t draw_negative(SubState *s) noexcept nogil:
    """One word from the unigram^0.75 distribution (the alias table, O(1))."""
    return vs_draw_alias(&s.rng, s.alias_prob, s.alias_idx, s.vocab_size)


cdef inline void draw_ahead(SubState *s) noexcept nogil:
    """Top the ring up to nq_ahead negatives and start loading their output rows, so
    that the next centre's are in cache when it trains."""
    cdef int32_t w
    while s.nq_len < s.nq_ahead:
        w = draw_negative(s)
        s.nq[(s.nq_head + s.nq_len) & s.nq_mask] = w
        s.nq_len += 1
        prefetch(&s.wo[<int64_t>w * s.size], s.size * sizeof(real))

cdef inline void take_negatives(SubState *s, int32_t *negs, int n) noexcept nogil:
    """negs[:n] = the oldest n negatives of the ring (n <= nq_ahead: the ring is filled
    first when a call starts); then the ring is topped up for the next centre."""
    cdef int d
    if s.nq_len < n:
        draw_ahead(s)
    for d in range(n):
        negs[d] = s.nq[(s.nq_head + d) & s.nq_mask]
    s.nq_head = (s.nq_head + n) & s.nq_mask
    s.nq_len -= n
    draw_ahead(s)

cdef inline int gather_rows(SubState *s, int32_t word, int at) noexcept nogil:
    """s.rows[at:] = word's input rows; returns how many."""
    cdef int64_t k
    cdef int n = 0
    for k in range(s.sub_ptr[word], s.sub_ptr[word + 1]):
        s.rows[at + n] = &s.wi[<int64_t>s.sub_rows[k] * s.size]
        n += 1
    return n

cdef inline void prefetch_rows(SubState *s, int32_t word) noexcept nogil:
    cdef int64_t k
    cdef int nbytes = s.size * sizeof(real)
    for k in range(s.sub_ptr[word], s.sub_ptr[word + 1]):
        prefetch(&s.wi[<int64_t>s.sub_rows[k] * s.size], nbytes)

cdef inline int add_outputs(SubState *s, int at, int32_t target, const int32_t *negs) noexcept nogil:
    """s.outr / s.labels from ``at`` on: target, then its negatives (one equal to the
    target skipped); returns the next free slot."""
    cdef int d
    s.outr[at] = &s.wo[<int64_t>target * s.size]
    s.labels[at] = 1.0
    for d in range(s.negative):
        s.outr[at + 1 + d] = &s.wo[<int64_t>negs[d] * s.size]
        s.labels[at + 1 + d] = -1.0 if negs[d] == target else 0.0
    return at + 1 + s.negative

cdef inline int add_path(SubState *s, int at, int32_t target) noexcept nogil:
    """s.outr / s.labels from ``at`` on: target's Huffman path (root first), labels
    1 - code; returns the next free slot."""
    cdef int k
    cdef const uint8_t *code = &s.codes[<int64_t>target * s.max_code]
    cdef const int32_t *point = &s.points[<int64_t>target * s.max_code]
    for k in range(s.codelens[target]):
        s.outr[at + k] = &s.syn1[<int64_t>point[k] * s.size]
        s.labels[at + k] = 1.0 - code[k]
    return at + s.codelens[target]

cdef inline int add_target(SubState *s, int at, int32_t target, const int32_t *negs) noexcept nogil:
    if s.hs:
        return add_path(s, at, target)
    return add_outputs(s, at, target, negs)

cdef inline void input_step(SubState *s, int n_rows, int n_out) noexcept nogil:
    """CBOW: the input = the mean (or sum) of s.rows[:n_rows] predicts s.outr[:n_out];
    the gradient goes whole to every input row."""
    vs_sum_rows(s.size, n_rows, s.rows, s.cbow_mean, s.neu1)
    memset(s.work, 0, s.size * sizeof(real))
    s.inp[0] = s.neu1
    vs_chain(s.size, 1, s.inp, s.outr, s.labels, n_out, s.work, s.alpha, s.hs, EXP_TABLE,
             MAX_EXP, EXP_SCALE)
    vs_add_rows(s.size, n_rows, s.rows, s.work, 0)

cdef void sg_centre(SubState *s, int32_t centre, const int32_t *ctx, int n_ctx,
                    const int32_t *negs) noexcept nogil:
    """Skip-gram: the centre's input predicts each of ctx[:n_ctx], each against its own
    negatives negs[c * negative:(c + 1) * negative]."""
    cdef int c, n_out
    cdef int D = s.size
    cdef int n_rows = gather_rows(s, centre, 0)
    vs_sum_rows(D, n_rows, s.rows, 1, s.neu1)
    memset(s.work, 0, D * sizeof(real))
    s.inp[0] = s.neu1
    for c in range(n_ctx):
        n_out = add_target(s, 0, ctx[c], &negs[c * s.negative])
        memset(s.pwork, 0, D * sizeof(real))
        vs_chain(D, 1, s.inp, s.outr, s.labels, n_out, s.pwork, s.alpha, s.hs, EXP_TABLE,
                 MAX_EXP, EXP_SCALE)
        vs_axpy(D, 1.0, s.pwork, s.work)
        vs_axpy(D, s.sg_gain[centre], s.pwork, s.neu1)
    vs_add_rows(D, n_rows, s.rows, s.work, 0)

cdef void cbow_centre(SubState *s, int32_t centre, const int32_t *ctx, int n_ctx,
                      const int32_t *negs) noexcept nogil:
    """CBOW: every row of the contexts ctx[:n_ctx] together predict the centre."""
    cdef int c, n_rows = 0
    for c in range(n_ctx):
        n_rows += gather_rows(s, ctx[c], n_rows)
    input_step(s, n_rows, add_target(s, 0, centre, negs))

cdef inline void flush_slot(SubState *s, int q) noexcept nogil:
    """Window slot q's position has left every window: its word's rows get the gradient
    the position gathered, and the slot is free."""
    cdef int n = gather_rows(s, s.sent[s.cpos[q]], 0)
    vs_add_rows(s.size, n, s.rows, &s.gacc[q * s.size], 0)
    s.cpos[q] = -1

cdef void flush_window(SubState *s) noexcept nogil:
    """The sentence ends: every position still in a window gets its gradient."""
    cdef int q
    for q in range(2 * s.window + 1):
        if s.cpos[q] >= 0:
            flush_slot(s, q)

cdef void cbow_cached(SubState *s, int i, int lo, int hi, const int32_t *negs) noexcept nogil:
    """CBOW for the centre at position i of s.sent, its contexts at [lo, hi) less i, each
    context position's sum of rows and owed gradient kept in slot ``position % (2w+1)``
    (``cbow_cache``).

    A sum is taken when its position enters the window: from the rows, or copied from a
    slot holding the same word (whose sum carries the gradient its rows are still owed).
    Each centre sums its contexts' sums, and adds its gradient to each context's owed
    gradient and, times the rows' number and the word's count among the contexts, to the
    sums of the slots holding that word: the sums are what the rows would be if updated
    at once (a word met k times among the contexts gets k x work on each of its rows).
    ``cdup`` marks the slots whose word another slot held when they were filled: the
    others' word is once among the contexts (k = 1), so only marked slots are counted.
    A position's rows get their owed gradient when it leaves the last window it can be
    in (position < i - window) or the sentence ends (:c:func:`flush_window`).
    """
    cdef int D = s.size
    cdef int W = 2 * s.window + 1
    cdef int j, q, r, c, k, n, m = 0, n_rows = 0, shared = 0
    cdef int32_t w
    cdef real *acc
    for q in range(W):  # positions no later centre can reach
        if 0 <= s.cpos[q] < i - s.window:
            flush_slot(s, q)
    for j in range(lo, hi):
        if j == i:
            continue
        q = j % W
        acc = &s.csum[q * D]
        if s.cpos[q] != j:
            if s.cpos[q] >= 0:
                flush_slot(s, q)
            w = s.sent[j]
            for r in range(W):
                if s.cpos[r] >= 0 and s.sent[s.cpos[r]] == w:
                    break
            else:
                r = -1
            if r >= 0:
                memcpy(acc, &s.csum[r * D], D * sizeof(real))
                s.cn[q] = s.cn[r]
                s.cdup[q] = s.cdup[r] = 1
            else:
                n = gather_rows(s, w, 0)
                vs_sum_rows(D, n, s.rows, 0, acc)
                s.cn[q] = n
                s.cdup[q] = 0
            memset(&s.gacc[q * D], 0, D * sizeof(real))
            s.cpos[q] = j
        s.cslot[m] = q
        s.crow[m] = acc
        m += 1
        n_rows += s.cn[q]
        shared |= s.cdup[q]
    vs_scaled_sum(D, m, s.crow, 1.0 / n_rows if s.cbow_mean and n_rows > 1 else 1.0, s.neu1)
    memset(s.work, 0, D * sizeof(real))
    s.inp[0] = s.neu1
    vs_chain(D, 1, s.inp, s.outr, s.labels, add_target(s, 0, s.sent[i], negs), s.work,
             s.alpha, s.hs, EXP_TABLE, MAX_EXP, EXP_SCALE)
    for c in range(m):
        q = s.cslot[c]
        s.crow[c] = &s.gacc[q * D]
        if not s.cdup[q]:  # its word is in no other slot, so once among the contexts
            vs_axpy(D, <real>s.cn[q], s.work, &s.csum[q * D])
    vs_add_rows(D, m, s.crow, s.work, 0)
    if not shared:
        return
    for q in range(W):  # a word in two slots or more: count it among the contexts
        if s.cpos[q] < 0 or not s.cdup[q]:
            continue
        k = 0
        for c in range(m):
            if s.sent[s.cpos[s.cslot[c]]] == s.sent[s.cpos[q]]:
                k += 1
        if k:
            vs_axpy(D, <real>(k * s.cn[q]), s.work, &s.csum[q * D])

cdef int64_t train_sentences(SubState *s, const int32_t *words, const int64_t *bounds,
                             int64_t s0, int64_t s1, real alpha0, real alpha1,
                             int32_t *ctx, int32_t *negs) noexcept nogil:
    """Train sentences [s0, s1), alpha falling linearly from alpha0 to alpha1; returns
    the words left after subsampling."""
    cdef int64_t sent, k, total = bounds[s1] - bounds[s0], done = 0, effective = 0
    cdef int n, i, j, b, lo, hi, n_ctx
    cdef int32_t w
    cdef int window = s.window
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
        for j in range(2 * window + 1):
            s.cpos[j] = -1
        for i in range(n):
            b = <int>rand_below(s, window)
            lo = i - window + b
            if lo < 0:
                lo = 0
            hi = i + window + 1 - b
            if hi > n:
                hi = n
            n_ctx = 0
            for j in range(lo, hi):
                if j != i:
                    ctx[n_ctx] = s.sent[j]
                    n_ctx += 1
            if n_ctx == 0:
                continue
            if s.negative:
                take_negatives(s, negs, s.negative * (n_ctx if s.sg else 1))
            if s.sg:
                if i + 1 < n:
                    prefetch_rows(s, s.sent[i + 1])
                sg_centre(s, s.sent[i], ctx, n_ctx, negs)
            else:
                if i + window + 2 < n:
                    prefetch_rows(s, s.sent[i + window + 2])
                if s.negative and i + 1 < n:
                    prefetch(&s.wo[<int64_t>s.sent[i + 1] * s.size], s.size * sizeof(real))
                if s.cbow_cache:
                    cbow_cached(s, i, lo, hi, negs)
                else:
                    cbow_centre(s, s.sent[i], ctx, n_ctx, negs)
        if s.cbow_cache and not s.sg:
            flush_window(s)
    return effective


def _check_arrays(wi, wo, sub_ptr, sub_rows, sample_int, alias_prob, alias_idx, syn1, codes,
                  points, codelens, *, int negative, int window, int hs):
    """:class:`SubwordWorker`'s arrays: their types, shapes and row ids (a ``ValueError``
    names the first one that is wrong)."""
    check_array("wi", wi, np.float32, 2, True)
    check_array("sub_ptr", sub_ptr, np.int64, 1)
    check_array("sub_rows", sub_rows, np.int32, 1)
    check_array("sample_int", sample_int, np.uint32, 1)
    check_array("alias_prob", alias_prob, np.uint32, 1)
    check_array("alias_idx", alias_idx, np.int32, 1)
    size, nwords = wi.shape[1], sample_int.shape[0]
    if window < 1 or size < 1 or wi.shape[0] < nwords:
        raise ValueError("window and vector size must be >= 1, wi hold every word")
    if hs:
        if negative or syn1 is None or codes is None:
            raise ValueError("hs=1 needs negative=0, syn1 and a Huffman tree")
        check_array("syn1", syn1, np.float32, 2, True)
        check_array("codes", codes, np.uint8, 2)
        check_array("points", points, np.int32, 2)
        check_array("codelens", codelens, np.int32, 1)
        if (syn1.shape[1] != size or points.max(initial=0) >= syn1.shape[0]
                or codes.shape[0] != nwords or points.shape != codes.shape
                or codelens.shape[0] != nwords or codelens.max(initial=0) > codes.shape[1]):
            raise ValueError("syn1 and the Huffman tree do not match the vocabulary")
    else:
        if negative < 1:
            raise ValueError("negative must be >= 1 (or hs=1)")
        check_array("wo", wo, np.float32, 2, True)
        if wo.shape != (nwords, size):
            raise ValueError(f"wo {wo.shape} does not match {nwords} words x {size}")
    if sub_ptr.shape[0] != nwords + 1 or sub_ptr[0] != 0 or sub_ptr[nwords] != len(sub_rows):
        raise ValueError("sub_ptr must be (nwords + 1,) from 0 to len(sub_rows)")
    counts = np.diff(sub_ptr)
    if nwords and counts.min() < 1:
        raise ValueError("every word needs at least its own row")
    if len(sub_rows) and (sub_rows.min() < 0 or sub_rows.max() >= wi.shape[0]):
        raise ValueError("sub_rows points outside wi")
    for name, a in (("sample_int", sample_int), ("alias_prob", alias_prob),
                    ("alias_idx", alias_idx)):
        if a.shape[0] != nwords:
            raise ValueError(f"{name} has {a.shape[0]} entries for {nwords} words")


def sg_gain(sub_ptr, sub_rows):
    """Per word, how much the mean of its rows moves when each of its row slots gets
    the same gradient: the sum over its distinct rows of their multiplicity squared,
    over its number of slots (1 when no bucket repeats)."""
    nwords = len(sub_ptr) - 1
    counts = np.diff(sub_ptr)
    owner = np.repeat(np.arange(nwords, dtype=np.int64), counts)
    stride = int(sub_rows.max(initial=0)) + 1
    pairs, mult = np.unique(owner * stride + sub_rows, return_counts=True)
    square = np.bincount(pairs // stride,
                         weights=mult.astype(np.float64) ** 2, minlength=nwords)
    return (square / np.maximum(counts, 1)).astype(np.float32)


cdef class SubwordWorker:
    """One thread's subword trainer: shared weights and tables, private buffers.

    Parameters
    ----------
    wi : float32 (nwords + bucket, size): word rows, then n-gram rows.
    wo : float32 (nwords, size): negative sampling's output rows (``None`` with hs).
    sub_ptr, sub_rows : int64 (nwords + 1,), int32: each word's input rows (rows of wi).
    sample_int : uint32 (nwords,) subsampling thresholds.
    alias_prob, alias_idx : uint32 / int32 (nwords,) negative-sampling alias table.
    syn1, codes, points, codelens : hierarchical softmax (``hs=1``): inner nodes
        (nwords - 1, size) and the Huffman tree; ``None`` otherwise.
    """

    cdef SubState st
    cdef list _keep
    cdef object _ctx, _negs

    def __init__(self, wi, wo, sub_ptr, sub_rows, sample_int, alias_prob, alias_idx,
                 syn1=None, codes=None, points=None, codelens=None, *,
                 int sg, int negative, int window, int cbow_mean=1, int hs=0,
                 int cbow_cache=1):
        _check_arrays(wi, wo, sub_ptr, sub_rows, sample_int, alias_prob, alias_idx, syn1,
                      codes, points, codelens, negative=negative, window=window, hs=hs)
        cdef int size = wi.shape[1]
        cdef int32_t nwords = sample_int.shape[0]
        counts = np.diff(sub_ptr)
        max_rows = int(counts.max()) if nwords else 1
        n_out = 2 * window * max(1 + negative, codes.shape[1] if hs else 0)
        ring = 1 << (4 * window * negative).bit_length()  # a power of 2 > 2 windows' worth
        bufs = {
            "neu1": np.zeros(size, np.float32),
            "work": np.zeros(size, np.float32),
            "pwork": np.zeros(size, np.float32),
            "sg_gain": sg_gain(sub_ptr, sub_rows),
            "sent": np.zeros(MAX_SENTENCE, np.int32),
            "rows": np.zeros(2 * window * max_rows, np.uintp),
            "inp": np.zeros(1, np.uintp),
            "outr": np.zeros(n_out, np.uintp),
            "labels": np.zeros(n_out, np.float32),
            "csum": np.zeros((2 * window + 1, size), np.float32),
            "cpos": np.full(2 * window + 1, -1, np.int64),
            "cn": np.zeros(2 * window + 1, np.intc),
            "gacc": np.zeros((2 * window + 1, size), np.float32),
            "nq": np.zeros(ring, np.int32),
            "cdup": np.zeros(2 * window + 1, np.intc),
            "cslot": np.zeros(2 * window, np.intc),
            "crow": np.zeros(2 * window, np.uintp),
        }
        self._ctx = np.zeros(2 * window, np.int32)
        self._negs = np.zeros(max(2 * window * negative, 1), np.int32)
        self._keep = [wi, wo, sub_ptr, sub_rows, sample_int, alias_prob, alias_idx, syn1,
                      codes, points, codelens, bufs]
        memset(&self.st, 0, sizeof(SubState))
        self.st.wi = <real *>cnp.PyArray_DATA(wi)
        self.st.wo = NULL if hs else <real *>cnp.PyArray_DATA(wo)
        if hs:
            self.st.hs = 1
            self.st.syn1 = <real *>cnp.PyArray_DATA(syn1)
            self.st.codes = <uint8_t *>cnp.PyArray_DATA(codes)
            self.st.points = <int32_t *>cnp.PyArray_DATA(points)
            self.st.codelens = <int32_t *>cnp.PyArray_DATA(codelens)
            self.st.max_code = codes.shape[1]
        self.st.size = size
        self.st.window = window
        self.st.negative = negative
        self.st.sg = sg
        self.st.cbow_mean = cbow_mean
        self.st.vocab_size = nwords
        self.st.sub_ptr = <int64_t *>cnp.PyArray_DATA(sub_ptr)
        self.st.sub_rows = <int32_t *>cnp.PyArray_DATA(sub_rows)
        self.st.sample_int = <uint32_t *>cnp.PyArray_DATA(sample_int)
        self.st.alias_prob = <uint32_t *>cnp.PyArray_DATA(alias_prob)
        self.st.alias_idx = <int32_t *>cnp.PyArray_DATA(alias_idx)
        self.st.rng = 1
        self.st.neu1 = <real *>cnp.PyArray_DATA(bufs["neu1"])
        self.st.work = <real *>cnp.PyArray_DATA(bufs["work"])
        self.st.pwork = <real *>cnp.PyArray_DATA(bufs["pwork"])
        self.st.sg_gain = <real *>cnp.PyArray_DATA(bufs["sg_gain"])
        self.st.sent = <int32_t *>cnp.PyArray_DATA(bufs["sent"])
        self.st.rows = <real **>cnp.PyArray_DATA(bufs["rows"])
        self.st.inp = <const real **>cnp.PyArray_DATA(bufs["inp"])
        self.st.outr = <real **>cnp.PyArray_DATA(bufs["outr"])
        self.st.labels = <real *>cnp.PyArray_DATA(bufs["labels"])
        self.st.cbow_cache = cbow_cache
        self.st.csum = <real *>cnp.PyArray_DATA(bufs["csum"])
        self.st.cpos = <int64_t *>cnp.PyArray_DATA(bufs["cpos"])
        self.st.cn = <int *>cnp.PyArray_DATA(bufs["cn"])
        self.st.gacc = <real *>cnp.PyArray_DATA(bufs["gacc"])
        self.st.nq = <int32_t *>cnp.PyArray_DATA(bufs["nq"])
        self.st.cdup = <int *>cnp.PyArray_DATA(bufs["cdup"])
        self.st.cslot = <int *>cnp.PyArray_DATA(bufs["cslot"])
        self.st.crow = <real **>cnp.PyArray_DATA(bufs["crow"])
        self.st.nq_mask = ring - 1
        self.st.nq_ahead = negative * (2 * window if sg else 1)

    def train(self, const int32_t[::1] words, const int64_t[::1] bounds, int64_t s0,
              int64_t s1, float alpha0, float alpha1, uint64_t seed):
        """Train sentences ``[s0, s1)`` (``words[bounds[i]:bounds[i+1]]`` is sentence i)
        in one GIL-free call; returns the words trained on (after subsampling)."""
        cdef int64_t effective
        cdef int32_t[::1] ctx = self._ctx
        cdef int32_t[::1] negs = self._negs
        if not check_range(words, bounds, s0, s1):
            return 0
        self.st.rng = seed if seed else 1
        self.st.nq_head = self.st.nq_len = 0  # a call's draws depend on its seed alone
        with nogil:
            effective = train_sentences(&self.st, &words[0], &bounds[0], s0, s1,
                                        alpha0, alpha1, &ctx[0], &negs[0])
        return effective

    # ------------------------------------------------------------ test wrappers

    def _ids(self, values, n, what):
        out = np.asarray(values, np.int32).ravel()
        if len(out) != n:
            raise ValueError(f"{n} {what}")
        if len(out) and (out.min() < 0 or out.max() >= self.st.vocab_size):
            raise ValueError(f"{what} outside the vocabulary")
        return out

    def sg_step(self, int centre, contexts, negatives, float alpha=0.025):
        """Skip-gram for one centre: its input predicts each context against its own
        negatives (``negatives``: ``len(contexts) x negative`` word ids)."""
        cdef int n_ctx = len(contexts)
        if not 0 < n_ctx <= 2 * self.st.window:
            raise ValueError(f"1 to {2 * self.st.window} contexts")
        ctx = self._ids(contexts, n_ctx, "contexts")
        negs = self._ids(negatives, n_ctx * self.st.negative, "negatives")
        self._ids([centre], 1, "centre")
        cdef int32_t[::1] c = ctx
        cdef int32_t[::1] g = negs
        self.st.alpha = alpha
        sg_centre(&self.st, centre, &c[0], n_ctx, &g[0])

    def cbow_step(self, int centre, contexts, negatives, float alpha=0.05):
        """CBOW for one centre: the rows of all its contexts predict it."""
        cdef int n_ctx = len(contexts)
        if not 0 < n_ctx <= 2 * self.st.window:
            raise ValueError(f"1 to {2 * self.st.window} contexts")
        ctx = self._ids(contexts, n_ctx, "contexts")
        negs = self._ids(negatives, self.st.negative, "negatives")
        self._ids([centre], 1, "centre")
        cdef int32_t[::1] c = ctx
        cdef int32_t[::1] g = negs
        self.st.alpha = alpha
        cbow_centre(&self.st, centre, &c[0], n_ctx, &g[0])
