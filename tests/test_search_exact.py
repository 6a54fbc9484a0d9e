"""Exact search (vecserve/search/exact.py, _exact.pyx): gensim's answers, ties included,
from the streaming top n and from batches, on generated and on really trained vectors."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
from gensim import matutils
from gensim.models import KeyedVectors
from vecserve.search._exact import VNNI, Heaps, QuantizedRows, best_candidates, top_k

from vecserve.search.exact import (
    BATCH_FROM_ROWS,
    CANDIDATES,
    MAX_CANDIDATES,
    ExactScan,
    gensim_argsort,
)
from vecserve.search.snapshot import SimilarityIndex

# the shared corpus beside the checkout (a worktree sits one level deeper than main)
CORPUS = next(
    (
        p / "shared" / "data" / "wiki100m.zip"
        for p in Path(__file__).resolve().parents[1:4]
        if (p / "shared" / "data" / "wiki100m.zip").exists()
    ),
    Path(__file__).resolve().parents[1].parent / "shared" / "data" / "wiki100m.zip",
)


def gensim_kv(words, vectors) -> KeyedVectors:
    kv = KeyedVectors(vectors.shape[1], count=0, dtype=np.float32)
    kv.index_to_key = list(words)
    kv.key_to_index = {w: i for i, w in enumerate(words)}
    kv.vectors = vectors
    return kv


def tied(n: int, dim: int, seed: int = 0) -> np.ndarray:
    """Rows with many exact ties: repeated rows, rows scaled by powers of two (same
    cosine), a few zero rows (NaN scores), small integers (equal dot products)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, (n, dim)).astype(np.float32)
    x[1::7] = x[0::7][: len(x[1::7])]
    x[2::11] *= 2.0
    x[5::997] = 0.0
    return x


# -- the kernels ----------------------------------------------------------------------


@pytest.mark.parametrize("n,k", [(0, 3), (5, 0), (5, 9), (1000, 1), (100_000, 40)])
def test_top_k_is_a_stable_sort_without_nan(n, k):
    rng = np.random.default_rng(n + k)
    x = rng.integers(-50, 50, n).astype(np.float32)
    x[::13] = np.nan
    pos, val = top_k(x, k)
    finite = np.flatnonzero(~np.isnan(x))
    want = finite[np.argsort(-x[finite], kind="stable")][:k]
    assert list(pos) == list(want) and np.array_equal(val, x[want])


def test_top_k_ranks_infinities_and_signed_zeros():
    x = np.array([0.0, -np.inf, np.inf, -0.0, 1.0, np.nan], dtype=np.float32)
    assert list(top_k(x, 6)[0]) == [2, 4, 0, 3, 1]


@pytest.mark.parametrize("k", [1, 7, 22, 300])
def test_best_candidates_are_numpys_stable_argsort_of_the_kept(k):
    # an approximate answer: the candidates that are rows and not the query's own words,
    # best first by score, ties (and NaN, last) in the index's order
    rng = np.random.default_rng(k)
    m = 40
    scores = rng.integers(-5, 5, (m, k)).astype(np.float32)  # many ties
    scores[rng.random((m, k)) < 0.1] = np.nan
    scores[0, :] = -0.0
    scores[0, ::2] = 0.0  # signed zeros tie
    cand = rng.integers(-1, 50, (m, k))  # -1: no candidate
    excludes = [rng.choice(50, int(rng.integers(0, 4)), replace=False).tolist() for _ in range(m)]
    tops = rng.integers(0, k + 3, m).tolist()
    rows, values, counts = best_candidates(scores, cand, excludes, tops)
    assert sum(counts) == len(rows) == len(values)
    assert all(type(v) is float for v in values) and all(type(r) is int for r in rows)
    at = 0
    for i in range(m):
        kept = np.flatnonzero((cand[i] >= 0) & ~np.isin(cand[i], excludes[i]))
        want = kept[np.argsort(-scores[i, kept], kind="stable")][: tops[i]]
        assert counts[i] == len(want)
        assert rows[at : at + counts[i]] == cand[i, want].tolist()
        np.testing.assert_array_equal(values[at : at + counts[i]], scores[i, want])
        at += counts[i]
    with pytest.raises(ValueError, match="candidates"):
        best_candidates(scores, np.ascontiguousarray(cand[:, :-1]), excludes, tops)


def test_heaps_of_a_batch_match_top_k_per_query():
    rng = np.random.default_rng(1)
    scores = rng.standard_normal((5, 3000)).astype(np.float32)
    scale = rng.uniform(0.5, 2, 3000).astype(np.float32)
    heaps = Heaps(5, 7)
    for lo in range(0, 3000, 512):
        block = np.ascontiguousarray(scores[:, lo : lo + 512])
        heaps.push(block, scale[lo : lo + 512], lo, 0, 2)  # two ranges, as two threads do
        heaps.push(block, scale[lo : lo + 512], lo, 2, 5)
    pos, _ = heaps.result()
    for q in range(5):
        assert list(pos[q]) == list(top_k(scores[q] * scale, 7)[0])


# -- one query: gensim's rows, order and scores -----------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_top_rows_is_gensims_argsort_with_ties_and_nan(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-20, 20, 5000).astype(np.float32) / 8
    x[rng.choice(5000, 50)] = np.nan
    x[rng.choice(5000, 5)] = -0.0
    for want in (1, 10, 25, 4999, 5000, 6000):
        got = ExactScan.top_rows(x, want)
        assert list(got) == list(matutils.argsort(x, topn=want, reverse=True))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # 0/0, as gensim
def test_most_similar_is_gensims_on_tied_generated_vectors():
    x = tied(30_011, 24)
    words = [f"w{i}" for i in range(len(x))]
    kv = gensim_kv(words, x)
    ix = SimilarityIndex.from_arrays(words, x)
    for q in ("w0", "w1", "w2", "w6", "w14", "w700"):
        for topn in (1, 10, 40):
            assert ix.most_similar(q, topn=topn) == kv.most_similar(q, topn=topn)
    assert ix.most_similar(["w3", "w9"], ["w4"], topn=30) == kv.most_similar(
        ["w3", "w9"], ["w4"], topn=30
    )


# -- batches: the single answers, to the bit ---------------------------------------------


def batch_queries(words, rng, n=60):
    picks = [words[int(i)] for i in rng.choice(len(words), n, replace=False)]
    qs = [{"positive": [w], "topn": 10} for w in picks]
    qs += [
        {"positive": picks[:2], "negative": picks[2:3], "topn": 25},
        {"positive": [picks[3], picks[3]], "topn": 5},  # a word twice: excluded twice
        {"positive": [(picks[4], 2.0), picks[5]], "topn": 3},
        {"positive": [picks[6]], "topn": 0},
        {"positive": [picks[7]], "topn": 10, "restrict_vocab": 500},
        {"positive": [picks[8]], "topn": None},
        {"positive": [picks[9]], "negative": [picks[10]], "topn": 4, "cosmul": True},
    ]
    return qs


def single(ix, q):
    q = dict(q)
    if q.pop("cosmul", False):
        return ix.most_similar_cosmul(**q)
    return ix.most_similar(**q)


def same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b, equal_nan=True)
    return a == b


FIRST_PASSES = [
    pytest.param(
        ("int8", True),
        id="int8-vnni",
        marks=pytest.mark.skipif(not VNNI, reason="no AVX-512 VNNI here"),
    ),
    pytest.param(("int8", False), id="int8-portable"),
    pytest.param(("float32", False), id="float32"),
]


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # 0/0, as gensim
@pytest.mark.parametrize("first", FIRST_PASSES)
@pytest.mark.parametrize("data,dim", [("gaussian", 40), ("gaussian", 37), ("tied", 40)])
def test_batch_answers_equal_single_answers(data, dim, first):
    rng = np.random.default_rng(7)
    n = BATCH_FROM_ROWS + 3  # an odd row count: BLAS's leftover rows are scored apart
    x = tied(n, dim) if data == "tied" else rng.standard_normal((n, dim)).astype(np.float32)
    words = [f"w{i}" for i in range(n)]
    ix = SimilarityIndex.from_arrays(words, x)
    ix.exact.first_pass, ix.exact.simd = first
    qs = batch_queries(words, rng)
    got = ix.most_similar_batch(qs)
    for q, g in zip(qs, got, strict=True):
        assert same(g, single(ix, q)), q


def test_batch_vectors_and_ints_and_missing_words():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((BATCH_FROM_ROWS + 100, 16)).astype(np.float32)
    words = [f"w{i}" for i in range(len(x))]
    ix = SimilarityIndex.from_arrays(words, x)
    qs = [{"positive": [x[5] * 3]}, {"positive": [17]}, {"positive": ["w1"], "negative": [2]}]
    for q, g in zip(qs, ix.most_similar_batch(qs), strict=True):
        assert g == ix.most_similar(**q)
    with pytest.raises(KeyError, match="not present"):
        ix.most_similar_batch([{"positive": ["w1"]}, {"positive": ["nope"]}])


def test_odd_rows_are_the_only_rows_scored_apart():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((100_003, 64)).astype(np.float32)
    scan = ExactScan(x, np.linalg.norm(x, axis=1))
    odd = scan.odd_rows()
    q = rng.standard_normal(64).astype(np.float32)
    q /= np.linalg.norm(q)
    rows = np.setdiff1d(np.arange(0, len(x), 7), odd)
    assert np.array_equal(scan._rescore(rows, q), scan.scores(q)[rows])


def i8_queries(qr, q):
    """The int8 pass's query arguments, as :meth:`ExactScan._batch_int8` makes them."""
    q64 = q.astype(np.float64)
    t = (np.abs(q64).max(1) / 127).astype(np.float32)
    c = np.clip(np.rint(q64 / t[:, None]), -127, 127)
    err = np.linalg.norm(q64 - c * t[:, None], axis=1) * (1 + 1e-6) + 1e-9
    norm = np.linalg.norm(q64, axis=1) * (1 + 1e-6) + 1e-9
    off = (128 * c.sum(1)).astype(np.int32)
    codes = qr.pack_queries(c.astype(np.int8))
    return codes, t, off, norm.astype(np.float32), err.astype(np.float32)


@pytest.mark.parametrize(
    "simd", [pytest.param(True, marks=pytest.mark.skipif(not VNNI, reason="no VNNI")), False]
)
@pytest.mark.parametrize("dim", [3, 64, 301])
def test_int8_pass_keeps_the_rows_of_the_largest_proven_upper_bounds(dim, simd):
    rng = np.random.default_rng(dim)
    x = rng.standard_normal((3001, dim)).astype(np.float32)
    x[7] = 0.0  # never ranks
    x[8] *= 1e-15  # tiny but not zero: ranks like any row
    norms = np.linalg.norm(x, axis=1).astype(np.float32)
    qr = QuantizedRows(x, norms)
    assert qr.usable
    q = rng.standard_normal((14, dim)).astype(np.float32)  # one tile and a part of one
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    codes, t, off, norm, err = i8_queries(qr, q)
    heaps = Heaps(len(q), 50)
    qr.scan(heaps, codes, t, off, norm, err, 0, 1, 2.0**-18, simd)
    qr.scan(heaps, codes, t, off, norm, err, 1, 2, 2.0**-18, simd)  # as two threads do
    pos, upper = heaps.result()
    with np.errstate(invalid="ignore"):
        true = (x.astype(np.float64) / norms[:, None].astype(np.float64)) @ q.T.astype(np.float64)
    for j in range(len(q)):
        assert np.all(np.diff(upper[j]) <= 0) and 7 not in pos[j]
        assert np.all(upper[j] >= true[pos[j], j])  # an upper bound of every kept row
        others = np.setdiff1d(np.arange(len(x)), np.append(pos[j], 7))
        assert true[others, j].max() <= upper[j][-1]  # no row outside it can beat the worst
        assert upper[j][0] - true[pos[j][0], j] < 0.2  # and not a useless one


def test_rows_with_nan_or_infinity_turn_the_int8_pass_off():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((BATCH_FROM_ROWS + 10, 16)).astype(np.float32)
    x[100, 3] = np.inf
    scan = ExactScan(x, np.linalg.norm(x, axis=1))
    scan.first_pass = "int8"
    assert scan.quantized() is None
    q = x[:4] / np.linalg.norm(x[:4], axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):  # inf / inf, as gensim
        got = scan.batch(q, [5] * 4)  # the float32 pass answers
        for g, one in zip(got, q, strict=True):
            assert g is None or list(g[0]) == list(scan.top_rows(scan.scores(one), 5))


def test_unprovable_queries_fall_back_to_the_single_path():
    rng = np.random.default_rng(9)
    x = np.repeat(rng.standard_normal((BATCH_FROM_ROWS // 4, 8)).astype(np.float32), 5, axis=0)
    scan = ExactScan(x, np.linalg.norm(x, axis=1))
    q = x[:3] / np.linalg.norm(x[:3], axis=1, keepdims=True)
    assert scan.batch(q, [10, 10, 10]) == [None, None, None]  # every score a 5-way tie


# -- real trained vectors ---------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """vecserve's own skip-gram on the first 4 MB of wiki100m: ~40k real word vectors."""
    if not CORPUS.exists():
        pytest.skip(f"{CORPUS} is not here")
    from vecserve.train import Word2Vec

    text = tmp_path_factory.mktemp("wiki") / "head.txt"
    with zipfile.ZipFile(CORPUS) as z, z.open("wiki100m") as f:
        head = f.read(4_000_000)
    text.write_bytes(head[: head.rindex(b" ")])
    model = Word2Vec(str(text), vector_size=48, min_count=1, epochs=1, workers=2, seed=2)
    words = list(model.vocab.words)
    assert len(words) > BATCH_FROM_ROWS
    return words, np.ascontiguousarray(model.syn0, dtype=np.float32)


def test_exact_answers_are_gensims_on_trained_vectors(trained):
    words, x = trained
    kv = gensim_kv(words, x)
    ix = SimilarityIndex.from_arrays(words, x)
    rng = np.random.default_rng(11)
    picks = [words[int(i)] for i in rng.choice(len(words), 80, replace=False)]
    picks += words[:20]  # the most frequent words
    for w in picks:
        assert ix.most_similar(w, topn=10) == kv.most_similar(w, topn=10)
    assert ix.most_similar(["king", "woman"], ["man"]) == kv.most_similar(
        ["king", "woman"], ["man"]
    )
    got = ix.most_similar_batch([{"positive": [w], "topn": 10} for w in picks])
    assert got == [kv.most_similar(w, topn=10) for w in picks]


def test_gensim_argsort_is_matutils_argsort():
    x = np.random.default_rng(0).standard_normal(100).astype(np.float32)
    for topn in (None, 0, 5, 100, 200):
        assert list(gensim_argsort(x, topn, True)) == list(matutils.argsort(x, topn, True))


def test_the_int8_pass_widens_when_a_batch_leaves_many_unproven():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((BATCH_FROM_ROWS + 100, 16)).astype(np.float32)
    scan = ExactScan(x, np.linalg.norm(x, axis=1))
    scan._widen(64, 63)  # 98% proven: kept
    scan._widen(16, 0)  # too few queries to tell
    assert scan.candidates == CANDIDATES
    scan._widen(64, 40)
    assert scan.candidates == 2 * CANDIDATES
    for _ in range(5):
        scan._widen(64, 0)
    assert scan.candidates == MAX_CANDIDATES
    # answers stay the single queries' with any width (16 dims: dense for int8 codes)
    scan.first_pass, scan.simd = "int8", False
    q = x[:40] / np.linalg.norm(x[:40], axis=1, keepdims=True)
    for g, one in zip(scan.batch(q, [10] * 40), q, strict=True):
        assert g is None or list(g[0]) == list(scan.top_rows(scan.scores(one), 10))
