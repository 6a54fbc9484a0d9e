"""The IVF scan's C loops (vecserve/search/_ivfscan.h, called through _ivfscan.pyx) against
NumPy: the k best rows of the spans, best first, for float16, float32 and scaled int8 rows
(int8: to the bit, against NumPy's exact integer products with the query's codes), on the
CPU's SIMD path and on the portable one, every float16 and int8 value converted exactly,
the query's codes within their bound and their sums within int32, a batch's answers its
queries' answers alone, bad arguments refused."""

from __future__ import annotations

import numpy as np
import pytest
from vecserve.search._ivfscan import query_codes, top_rows

from vecserve.search import _ivfscan


@pytest.fixture(params=["simd", "portable"])
def path(request):
    if request.param == "simd" and not _ivfscan.SIMD:
        pytest.skip("this CPU has no AVX2/FMA: only the portable loops run here")
    _ivfscan._portable(request.param == "portable")
    yield request.param
    _ivfscan._portable(False)


def _stored(rng, shape, dtype):
    """Random rows stored as ``dtype`` and their scales (int8: codes and one scale a row;
    else None)."""
    x = rng.standard_normal(shape)
    if dtype != np.int8:
        return x.astype(dtype), None
    scales = rng.random(shape[0]) / (127 * np.sqrt(shape[1]))  # rows of norm < 1
    return rng.integers(-127, 128, shape).astype(np.int8), scales.astype(np.float32)


def _reference(rows, lo, hi, q, k, scales=None):
    """The k best of the spans by NumPy: float rows in float64; int8 rows as the C loops
    score them, exactly (an int64 inner product with the query's codes, then float32)."""
    where = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi, strict=True)])
    if scales is None:
        scores = rows[where].astype(np.float64) @ q.astype(np.float64)
    else:
        codes, t = query_codes(q)
        dots = rows[where].astype(np.int64) @ codes.astype(np.int64)
        scores = dots.astype(np.float32) * scales[where] * np.float32(t)
    order = np.argsort(-scores, kind="stable")[:k]
    return where[order], scores[order]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int8])
@pytest.mark.parametrize("dim", [1, 7, 8, 15, 16, 17, 300])
def test_the_k_best_rows_of_the_spans_best_first(path, dtype, dim):
    rng = np.random.default_rng(dim)
    rows, scales = _stored(rng, (900, dim), dtype)
    q = rng.standard_normal(dim).astype(np.float32)
    lo, hi = np.array([0, 100, 100, 640]), np.array([50, 400, 100, 900])  # one span empty
    for k in (1, 10, 25, 10_000):
        pos, scores = top_rows(rows, lo, hi, q, k, scales)
        want_pos, want_scores = _reference(rows, lo, hi, q, k, scales)
        assert len(pos) == min(k, 50 + 300 + 260) and scores.dtype == np.float32
        if dtype == np.int8:  # integer sums: the same floats, the same rows, ties included
            np.testing.assert_array_equal(scores, want_scores)
            np.testing.assert_array_equal(pos, want_pos)
        np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)
        assert np.all(np.diff(scores) <= 0)
        # the same rows, except where float32 sums of nearly tied scores trade places
        close = np.isclose(scores, want_scores[-1], rtol=1e-5, atol=1e-5)
        assert set(pos[~close]) == set(want_pos[~close])


def test_every_float16_value_is_converted_exactly(path):
    values = np.arange(65536, dtype=np.uint16).view(np.float16)
    for dim in (1, 8, 16):  # the scalar tail, one and two SIMD blocks
        rows = np.zeros((65536, dim), dtype=np.float16)
        rows[:, 0] = values
        q = np.zeros(dim, dtype=np.float32)
        q[0] = 1.0
        pos, scores = top_rows(rows, np.array([0]), np.array([65536]), q, 65536)
        finite = np.isfinite(values)
        assert len(pos) == finite.sum()  # NaN and infinities never rank
        np.testing.assert_array_equal(scores, values[pos].astype(np.float32))
        assert np.all(np.diff(scores) <= 0)


def test_every_int8_code_is_converted_exactly(path):
    codes = np.arange(-128, 128, dtype=np.int8)
    for dim in (1, 8, 16, 17):  # the scalar tail, one and two SIMD blocks, both
        rows = np.zeros((256, dim), dtype=np.int8)
        rows[:, dim - 1] = codes
        q = np.zeros(dim, dtype=np.float32)
        q[dim - 1] = 1.0
        scales = np.full(256, 0.5, dtype=np.float32)
        pos, scores = top_rows(rows, np.array([0]), np.array([256]), q, 256, scales)
        np.testing.assert_array_equal(scores, codes[pos].astype(np.float32) * 0.5)
        assert pos.tolist() == list(range(255, -1, -1))


@pytest.mark.parametrize("dim", [1, 17, 50, 300, 512, 513, 4096])
def test_a_query_s_codes_stay_within_their_bound_and_int32(path, dim):
    rng = np.random.default_rng(dim)
    q = rng.standard_normal(dim).astype(np.float32)
    q /= np.linalg.norm(q)
    codes, t = query_codes(q)
    assert codes.dtype == np.int16 and t == 2.0 ** np.round(np.log2(t))  # a power of two
    qmax = min(32767, (2**31 - 1) // (128 * dim))
    assert np.abs(codes).max() <= qmax and np.abs(codes).max() > qmax / 2  # t is the least
    np.testing.assert_array_equal(codes, np.rint(q.astype(np.float64) / t))
    assert np.abs(q - codes * np.float64(t)).max() <= t / 2
    # the largest sum a row can make still scores exactly (no int32 wrap-around)
    rows = np.where(codes >= 0, 127, -128).astype(np.int8)[None].repeat(3, axis=0)
    rows[1] = -rows[1].clip(-127)
    scales = np.ones(3, np.float32)
    pos, scores = top_rows(rows, np.array([0]), np.array([3]), q, 3, scales)
    want = (rows.astype(np.int64) @ codes.astype(np.int64)).astype(np.float32) * np.float32(t)
    assert abs(int(rows[0].astype(np.int64) @ codes)) < 2**31
    np.testing.assert_array_equal(scores, want[pos])
    assert pos[0] == 0 and scores[0] > 0.99 * np.abs(q).sum() * 127


def test_a_query_with_nan_or_infinity_has_no_codes_and_scores_nothing(path):
    rows, scales = np.ones((20, 17), np.int8), np.ones(20, np.float32)
    for bad in (np.nan, np.inf, -np.inf):
        q = np.ones(17, np.float32)
        q[16] = bad
        assert query_codes(q) is None
        pos, scores = top_rows(rows, np.array([0]), np.array([20]), q, 5, scales)
        assert len(pos) == len(scores) == 0
    assert query_codes(np.zeros(3, np.float32))[0].tolist() == [0, 0, 0]


def test_ties_keep_the_earlier_row(path):
    rows = np.ones((10, 4), dtype=np.float16)
    pos, _ = top_rows(rows, np.array([6, 0]), np.array([10, 3]), np.ones(4, np.float32), 5)
    assert pos.tolist() == [0, 1, 2, 6, 7]


def test_nothing_to_scan_gives_nothing():
    rows = np.ones((3, 4), dtype=np.float32)
    q = np.ones(4, np.float32)
    for lo, hi, k in [([], [], 5), ([1], [1], 5), ([0], [3], 0)]:
        pos, scores = top_rows(rows, np.array(lo, np.int64), np.array(hi, np.int64), q, k)
        assert len(pos) == len(scores) == 0


@pytest.mark.parametrize(
    "rows, lo, hi, q, message",
    [
        (np.ones((3, 4), np.float64), [0], [3], np.ones(4, np.float32), "float32 or int8"),
        (np.ones((3, 4), np.float32)[:, ::2], [0], [3], np.ones(2, np.float32), "contiguous"),
        (np.ones((3, 4), np.float32), [0], [3], np.ones(5, np.float32), "against a query of 5"),
        (np.ones((3, 4), np.float32), [2], [4], np.ones(4, np.float32), "outside the 3 rows"),
        (np.ones((3, 4), np.float32), [2], [1], np.ones(4, np.float32), "outside the 3 rows"),
        (np.ones((3, 4), np.float32), [0, 1], [3], np.ones(4, np.float32), "same number"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(rows, lo, hi, q, message):
    with pytest.raises(ValueError, match=message):
        top_rows(rows, np.array(lo, np.int64), np.array(hi, np.int64), q, 2)


def _index(rng, nlist, dim, dtype, sizes=None):
    """``nlist`` lists of random sizes (some empty) over random rows: centroids, packed
    centroids, rows, offsets, ids, scales (int8 rows; else None)."""
    sizes = rng.integers(0, 60, nlist) if sizes is None else np.asarray(sizes)
    sizes[1] = 0  # an empty list
    rows, scales = _stored(rng, (int(sizes.sum()), dim), dtype)
    centroids = rng.standard_normal((nlist, dim)).astype(np.float32)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    ids = rng.permutation(len(rows)).astype(np.int64) + 1000
    return centroids, _ivfscan.pack_centroids(centroids), rows, offsets, ids, scales


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int8])
@pytest.mark.parametrize("dim", [1, 7, 17, 300])
def test_a_batch_search_gives_each_query_its_search_alone_to_the_bit(path, dtype, dim):
    rng = np.random.default_rng(dim)
    nlist = 21  # not a multiple of the eight-list blocks
    centroids, packed, rows, offsets, ids, scales = _index(rng, nlist, dim, dtype)
    queries = rng.standard_normal((11, dim)).astype(np.float32)  # tiles of 4 and a rest
    queries[5] = np.nan  # scores nothing, scans nothing
    queries[7] = queries[2]  # the same lists as another query
    for nprobe, k in [(1, 5), (3, 20), (nlist, 10_000)]:
        found, near = _ivfscan.search_batch(
            packed, nlist, rows, offsets, ids, queries, nprobe, k, scales
        )
        assert found.shape == (11, k) and near.shape == (11, nprobe)
        assert np.all(near[5] == -1) and np.all(found[5] == -1)
        np.testing.assert_array_equal(found[7], found[2])
        for i in range(11):  # a batch of one
            one = _ivfscan.search_batch(
                packed, nlist, rows, offsets, ids, queries[i : i + 1], nprobe, k, scales
            )
            np.testing.assert_array_equal(one[0][0], found[i])
            np.testing.assert_array_equal(one[1][0], near[i])
        # against NumPy: the lists of the best centroid scores, the best rows of those lists
        q = queries[0].astype(np.float64)
        order = np.argsort(-(centroids.astype(np.float64) @ q), kind="stable")
        assert set(near[0]) == set(order[:nprobe]) or dim == 1  # 1-d: ties everywhere
        spans = [(offsets[lst], offsets[lst + 1]) for lst in near[0]]
        lo, hi = (np.array(x, np.int64) for x in zip(*spans, strict=True))
        want = top_rows(rows, lo, hi, queries[0], k, scales)[0]
        np.testing.assert_array_equal(found[0, : len(want)], ids[want])
        assert np.all(found[0, len(want) :] == -1)


def test_a_batch_search_breaks_ties_to_the_lower_list_and_the_earlier_row():
    centroids = np.ones((10, 4), dtype=np.float32)  # every list ties
    rows = np.ones((20, 4), dtype=np.float16)  # every row ties
    offsets = np.arange(0, 21, 2, dtype=np.int64)
    ids = np.arange(20, dtype=np.int64)[::-1].copy()
    q = np.ones((5, 4), dtype=np.float32)
    found, near = _ivfscan.search_batch(
        _ivfscan.pack_centroids(centroids), 10, rows, offsets, ids, q, 3, 4
    )
    assert near.tolist() == [[0, 1, 2]] * 5
    assert found.tolist() == [[19, 18, 17, 16]] * 5  # stored rows 0-3


def test_a_batch_search_refuses_bad_arguments_in_one_line():
    rng = np.random.default_rng(0)
    _, packed, rows, offsets, ids, _ = _index(rng, 9, 8, np.float16)
    q = np.ones((2, 8), dtype=np.float32)
    bad = offsets.copy()
    bad[3], bad[4] = bad[4] + 1, bad[3]
    codes = np.zeros(rows.shape, np.int8)
    scales = np.ones(len(rows), np.float32)
    for args, message in [
        ((packed, 8, rows, offsets, ids), "packed centroids"),
        ((packed, 9, rows, offsets[:-1], ids), "nlist \\+ 1"),
        ((packed, 9, rows, bad, ids), "must not decrease"),
        ((packed, 9, rows, offsets, ids[:-1]), "one per row"),
        ((packed, 9, rows.astype(np.float64), offsets, ids), "float32 or int8"),
        ((packed, 9, rows, offsets, ids, 2, 3, scales), "float16 rows take no scales"),
        ((packed, 9, codes, offsets, ids), "int8 rows need scales"),
        ((packed, 9, codes, offsets, ids, 2, 3, scales[1:]), "int8 rows need scales"),
        ((packed, 9, codes, offsets, ids, 2, 3, scales.astype(np.float64)), "C-contiguous float32"),
    ]:
        nprobe_k_scales = args[5:] if len(args) > 5 else (2, 3)
        with pytest.raises(ValueError, match=message):
            _ivfscan.search_batch(*args[:5], q, *nprobe_k_scales)
