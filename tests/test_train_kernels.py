"""The word2vec kernels against NumPy reference implementations of one update step."""

from __future__ import annotations

import numpy as np
import pytest

from vecserve.train import _kernels
from vecserve.train.tables import alias_table, huffman_tree, sample_thresholds

TABLE = _kernels.sigmoid_table()
MAX_EXP = _kernels.MAX_EXP_VALUE
SCALE = _kernels.EXP_TABLE_LEN // MAX_EXP // 2  # integer, like word2vec.c
V, D = 12, 16
RTOL, ATOL = 1e-5, 1e-6


def sigmoid(f):
    return TABLE[int((f + MAX_EXP) * SCALE)]


def neg_grad(f, label, alpha):
    if f >= MAX_EXP:
        return (label - 1.0) * alpha
    if f <= -MAX_EXP:
        return label * alpha
    return (label - sigmoid(f)) * alpha


def ref_neg(l1, syn1neg, outs, alpha, work):
    for d, w in enumerate(outs):
        if d > 0 and w == outs[0]:
            continue
        g = np.float32(neg_grad(float(l1 @ syn1neg[w]), 1.0 if d == 0 else 0.0, alpha))
        work += g * syn1neg[w]
        syn1neg[w] += g * l1


def ref_hs(l1, syn1, tree, target, alpha, work):
    for k in range(tree.codelens[target]):
        row = tree.points[target, k]
        f = float(l1 @ syn1[row])
        if f <= -MAX_EXP or f >= MAX_EXP:
            continue
        g = np.float32((1 - tree.codes[target, k] - sigmoid(f)) * alpha)
        work += g * syn1[row]
        syn1[row] += g * l1


@pytest.fixture
def weights():
    rng = np.random.default_rng(0)
    counts = np.arange(V, 0, -1, dtype=np.int64) * 10
    return {
        "syn0": rng.normal(0, 0.3, (V, D)).astype(np.float32),
        "syn1": rng.normal(0, 0.3, (V - 1, D)).astype(np.float32),
        "syn1neg": rng.normal(0, 0.3, (V, D)).astype(np.float32),
        "counts": counts,
        "tree": huffman_tree(counts),
    }


def make_worker(w, *, sg=1, hs=0, negative=3, batch=0, cbow_mean=1, cbow_batch=8, **kw):
    tree = w["tree"]
    return _kernels.KernelWorker(
        w["syn0"],
        w["syn1"] if hs else None,
        w["syn1neg"] if negative else None,
        sample_thresholds(w["counts"], 0),
        *alias_table(w["counts"]),
        tree.codes,
        tree.points,
        tree.codelens,
        sg=sg,
        hs=hs,
        negative=negative,
        window=3,
        cbow_mean=cbow_mean,
        batch=batch,
        cbow_batch=cbow_batch,
        **kw,
    )


def assert_close(a, b):
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("negatives", [[4, 7, 9], [2, 5, 2]])  # 2 is the target itself
def test_sg_negative_step(weights, negatives):
    syn0, syn1neg = weights["syn0"].copy(), weights["syn1neg"].copy()
    make_worker(weights).sg_step(3, 2, negatives, alpha=0.1)
    work = np.zeros(D, np.float32)
    ref_neg(syn0[3].copy(), syn1neg, [2, *negatives], 0.1, work)
    syn0[3] += work
    assert_close(weights["syn0"], syn0)
    assert_close(weights["syn1neg"], syn1neg)


def test_sg_hs_step(weights):
    syn0, syn1 = weights["syn0"].copy(), weights["syn1"].copy()
    make_worker(weights, hs=1, negative=0).sg_step(5, 8, alpha=0.2)
    work = np.zeros(D, np.float32)
    ref_hs(syn0[5].copy(), syn1, weights["tree"], 8, 0.2, work)
    syn0[5] += work
    assert_close(weights["syn0"], syn0)
    assert_close(weights["syn1"], syn1)


@pytest.mark.parametrize("negs", [[0, 11, 3], [5, 5, 6]])  # a negative twice, the target
@pytest.mark.parametrize("cbow_mean", [1, 0])
@pytest.mark.parametrize("hs", [0, 1])
# the context sum adds four rows a pass: one row, a pass of 4 (4 twice), 4 + 1, 4 + 2
@pytest.mark.parametrize("ctx", [[7], [1, 4, 4, 10], [1, 4, 4, 10, 2], [3, 9, 3, 0, 11, 5]])
def test_cbow_step(weights, cbow_mean, hs, negs, ctx):
    syn0, syn1, syn1neg = (weights[k].copy() for k in ("syn0", "syn1", "syn1neg"))
    target = 6
    make_worker(weights, sg=0, hs=hs, cbow_mean=cbow_mean).cbow_step(ctx, target, negs, 0.1)
    neu1 = syn0[ctx].sum(axis=0)
    if cbow_mean:
        neu1 /= len(ctx)
    work = np.zeros(D, np.float32)
    if hs:
        ref_hs(neu1, syn1, weights["tree"], target, 0.1, work)
    ref_neg(neu1, syn1neg, [target, *negs], 0.1, work)
    for c in ctx:
        syn0[c] += work
    assert_close(weights["syn0"], syn0)
    assert_close(weights["syn1neg"], syn1neg)
    if hs:
        assert_close(weights["syn1"], syn1)


@pytest.fixture
def deep_tree():
    """A Huffman tree with paths of up to 15 nodes (geometric counts), and weights."""
    n = 16
    rng = np.random.default_rng(1)
    counts = (2 ** np.arange(n, 0, -1)).astype(np.int64)
    return {
        "syn0": rng.normal(0, 0.3, (n, D)).astype(np.float32),
        "syn1": rng.normal(0, 0.3, (n - 1, D)).astype(np.float32),
        "counts": counts,
        "tree": huffman_tree(counts),
    }


@pytest.mark.parametrize("target", [15, 9, 6, 0])  # paths of 15, 10, 7 and 1 nodes
@pytest.mark.parametrize("ctx", [[3], [2, 5, 11, 7, 1, 14], [4, 8, 4]])  # 4 twice
def test_sg_hs_window_equals_its_pairs(deep_tree, ctx, target):
    """A centre's contexts run node by node (4 nodes interleaved): the result is that of
    the pairs one after another, each context's row updated after all of them."""
    w = deep_tree
    syn0, syn1, tree = w["syn0"].copy(), w["syn1"].copy(), w["tree"]
    kw = _kernels.KernelWorker(
        w["syn0"],
        w["syn1"],
        None,
        sample_thresholds(w["counts"], 0),
        *alias_table(w["counts"]),
        tree.codes,
        tree.points,
        tree.codelens,
        sg=1,
        hs=1,
        negative=0,
        window=3,
    )
    kw.sg_hs_window_step(ctx, target, alpha=0.3)
    inputs = syn0[ctx].copy()
    works = np.zeros_like(inputs)
    for c in range(len(ctx)):
        ref_hs(inputs[c], syn1, tree, target, 0.3, works[c])
    np.add.at(syn0, ctx, works)
    assert tree.codelens[target] == {15: 15, 9: 10, 6: 7, 0: 1}[target]
    assert_close(w["syn0"], syn0)
    assert_close(w["syn1"], syn1)


@pytest.mark.parametrize("negatives", [[0, 9, 11, 4, 5], [7, 3, 3, 7, 9], [1, 2, 1, 2, 1]])
@pytest.mark.parametrize("ctx", [[2], [2, 5, 5, 8, 1, 11]])  # 5 twice
def test_sg_neg_window_equals_its_pairs(weights, ctx, negatives):
    """batch=1 skip-gram: the contexts share the negatives and run pair after pair (a
    negative drawn twice is met twice; one that is the target is skipped)."""
    syn0, syn1neg = weights["syn0"].copy(), weights["syn1neg"].copy()
    target = 7
    kw = make_worker(weights, negative=5, batch=1)
    kw.sg_neg_window_step(ctx, target, negatives, alpha=0.2)
    inputs = syn0[ctx].copy()
    works = np.zeros_like(inputs)
    for d, w in enumerate([target, *negatives]):  # output-major, like the kernel
        if d > 0 and w == target:
            continue
        for c in range(len(ctx)):
            f = float(inputs[c] @ syn1neg[w])
            g = np.float32(neg_grad(f, 1.0 if d == 0 else 0.0, 0.2))
            works[c] += g * syn1neg[w]
            syn1neg[w] += g * inputs[c]
    np.add.at(syn0, ctx, works)
    assert_close(weights["syn0"], syn0)
    assert_close(weights["syn1neg"], syn1neg)


@pytest.mark.parametrize("negatives", [[0, 9, 11], [7, 3, 0]])  # 7: the target again
def test_hogbatch_step(weights, negatives):
    syn0, syn1neg = weights["syn0"].copy(), weights["syn1neg"].copy()
    ctx, target = [2, 5, 5, 8, 1], 7
    make_worker(weights, batch=1).hogbatch_step(ctx, target, negatives, alpha=0.05)
    outs = [target, *negatives]
    inp, out = syn0[ctx], syn1neg[outs]
    scores = inp @ out.T
    labels = np.zeros(len(outs), np.float32)
    labels[0] = 1
    g = np.array(
        [[neg_grad(float(f), labels[o], 0.05) for o, f in enumerate(row)] for row in scores],
        dtype=np.float32,
    )
    g[:, 1:][:, np.array(negatives) == target] = 0
    np.add.at(syn0, ctx, g @ out)
    np.add.at(syn1neg, outs, g.T @ inp)
    assert_close(weights["syn0"], syn0)
    assert_close(weights["syn1neg"], syn1neg)


@pytest.mark.parametrize("cbow_mean", [1, 0])
def test_cbow_hogbatch_step(weights, cbow_mean):
    syn0, syn1neg = weights["syn0"].copy(), weights["syn1neg"].copy()
    windows = [([1, 4, 4], 6), ([0, 2], 4), ([9, 3, 5, 1], 6)]
    negatives = [11, 4, 0]  # 4 is the target of the second window only
    kw = make_worker(weights, sg=0, batch=1, cbow_mean=cbow_mean, cbow_batch=3)
    kw.cbow_hogbatch_step(windows, negatives, alpha=0.05)
    hidden = np.array([syn0[c].mean(0) if cbow_mean else syn0[c].sum(0) for c, _ in windows])
    outs = [t for _, t in windows] + negatives
    scores = hidden @ syn1neg[outs].T
    g = np.zeros_like(scores)
    for b, (_, target) in enumerate(windows):
        g[b, b] = neg_grad(float(scores[b, b]), 1.0, 0.05)
        for o in range(len(windows), len(outs)):
            if outs[o] != target:
                g[b, o] = neg_grad(float(scores[b, o]), 0.0, 0.05)
    hidden_grad = g @ syn1neg[outs]
    np.add.at(syn1neg, outs, g.T @ hidden)
    for b, (contexts, _) in enumerate(windows):
        np.add.at(syn0, contexts, hidden_grad[b])
    assert_close(weights["syn0"], syn0)
    assert_close(weights["syn1neg"], syn1neg)


def test_hogbatch_with_one_context_equals_a_skipgram_pair(weights):
    w2 = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in weights.items()}
    make_worker(weights, batch=1).hogbatch_step([4], 1, [6, 9, 10], alpha=0.1)
    make_worker(w2).sg_step(4, 1, [6, 9, 10], alpha=0.1)
    assert_close(weights["syn0"], w2["syn0"])
    assert_close(weights["syn1neg"], w2["syn1neg"])


def test_negative_draws_follow_unigram_075(weights):
    draws = make_worker(weights).draw_negatives(200_000, seed=5)
    expected = weights["counts"] ** 0.75
    expected = expected / expected.sum()
    observed = np.bincount(draws, minlength=V) / len(draws)
    np.testing.assert_allclose(observed, expected, atol=0.005)


def test_worker_checks_dtypes(weights):
    with pytest.raises(TypeError, match="syn0"):
        _kernels.KernelWorker(
            weights["syn0"].astype(np.float64),
            None,
            weights["syn1neg"],
            sample_thresholds(weights["counts"], 0),
            *alias_table(weights["counts"]),
            sg=1,
            hs=0,
            negative=3,
            window=3,
        )
    with pytest.raises(ValueError, match="HogBatch"):
        make_worker(weights, hs=1, negative=0, batch=1)


def test_train_range_checks(weights):
    kw = make_worker(weights)
    words = np.zeros(10, np.int32)
    with pytest.raises(ValueError, match="outside"):
        kw.train(words, np.array([0, 10], np.int64), 0, 2, 0.025, 0.025, 1)
    assert kw.train(words, np.array([0, 10], np.int64), 0, 1, 0.025, 0.025, 1) == 10


def test_mix_seed_differs():
    seeds = {_kernels.mix_seed(1, e, j) for e in range(4) for j in range(50)}
    assert len(seeds) == 200 and 0 not in seeds


def test_train_refuses_overlong_sentences(weights):
    kw = make_worker(weights)
    n = _kernels.SENTENCE_MAX + 1
    words = np.zeros(n + 2, np.int32)
    with pytest.raises(ValueError, match="sentence lengths"):
        kw.train(words, np.array([0, 1, n + 1, n + 2], np.int64), 0, 3, 0.025, 0.025, 1)


@pytest.mark.parametrize("subwords", [False, True])
def test_both_workers_check_the_sentence_range_before_training(subwords):
    """word2vec's and the subword kernel worker refuse, with one check, a range outside
    the arrays and a sentence longer than MAX_SENTENCE; an empty range trains nothing."""
    from vecserve.train import FastText, Word2Vec

    cls, extra = (FastText, {"bucket": 100}) if subwords else (Word2Vec, {})
    model = cls([["a", "b", "c"]] * 20, vector_size=8, min_count=1, epochs=1, workers=1, **extra)
    worker = model._kernel_worker()
    words, bounds = np.zeros(10, np.int32), np.array([0, 5, 10], np.int64)
    assert worker.train(words, bounds, 1, 1, 0.025, 0.001, 1) == 0
    with pytest.raises(ValueError, match=r"sentence range \[0, 3\) outside 0\.\.2"):
        worker.train(words, bounds, 0, 3, 0.025, 0.001, 1)
    with pytest.raises(ValueError, match="past the end of words"):
        worker.train(words[:6], bounds, 0, 2, 0.025, 0.001, 1)
    long = np.array([0, 10_001, 10_002], np.int64)
    with pytest.raises(ValueError, match=r"sentence lengths must be 0\.\.10000"):
        worker.train(np.zeros(10_002, np.int32), long, 0, 2, 0.025, 0.001, 1)


@pytest.mark.parametrize("sg", [1, 0])
def test_private_top_nodes_train_as_the_shared_rows_on_one_thread(weights, sg):
    """Hierarchical softmax with the top nodes in a thread's own copy, merged every few
    centres: alone, the thread trains what it trains on the shared rows (up to float
    rounding in the merges); a merge adds the thread's changes to what another worker
    merged meanwhile."""
    words = np.random.default_rng(5).integers(0, V, 400).astype(np.int32)
    bounds = np.array([0, 150, 400], np.int64)
    runs = []
    for hot in (0, 4):
        w = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in weights.items()}
        make_worker(w, sg=sg, hs=1, negative=0, hot_nodes=hot, hot_every=3).train(
            words, bounds, 0, 2, 0.05, 0.01, 7
        )
        runs.append(w)
    shared, private = runs
    assert np.abs(shared["syn1"][-4:] - weights["syn1"][-4:]).max() > 1e-2  # top nodes moved
    np.testing.assert_allclose(private["syn1"], shared["syn1"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(private["syn0"], shared["syn0"], rtol=1e-4, atol=1e-5)

    # two workers on the same rows, one after the other: the second starts from the
    # first's merged top nodes and adds its own changes to them
    w = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in weights.items()}
    a, b = (make_worker(w, sg=sg, hs=1, negative=0, hot_nodes=4, hot_every=3) for _ in "ab")
    a.train(words, bounds, 0, 1, 0.05, 0.05, 7)
    after_a = w["syn1"][-4:].copy()
    assert not np.array_equal(after_a, weights["syn1"][-4:])
    b.train(words, bounds, 1, 2, 0.05, 0.05, 8)
    assert not np.array_equal(w["syn1"][-4:], after_a)


def test_private_top_nodes_are_checked(weights):
    with pytest.raises(ValueError, match="hot_nodes"):
        make_worker(weights, hs=1, negative=0, hot_nodes=-1)
    with pytest.raises(ValueError, match="hot_every"):
        make_worker(weights, hs=1, negative=0, hot_nodes=2, hot_every=0)
