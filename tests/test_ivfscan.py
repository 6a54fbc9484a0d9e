"""The IVF scan's C loops (vecserve/search/_ivfscan.h, called through _ivfscan.pyx) against
NumPy: the k best rows of the spans, best first, for float16 and float32 rows, on the CPU's
SIMD path and on the portable one, every float16 value converted exactly, bad arguments
refused."""

from __future__ import annotations

import numpy as np
import pytest
from vecserve.search._ivfscan import top_rows

from vecserve.search import _ivfscan


@pytest.fixture(params=["simd", "portable"])
def path(request):
    if request.param == "simd" and not _ivfscan.SIMD:
        pytest.skip("this CPU has no AVX2/FMA: only the portable loops run here")
    _ivfscan._portable(request.param == "portable")
    yield request.param
    _ivfscan._portable(False)


def _reference(rows, lo, hi, q, k):
    where = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi, strict=True)])
    scores = rows[where].astype(np.float64) @ q.astype(np.float64)
    order = np.argsort(-scores, kind="stable")[:k]
    return where[order], scores[order]


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("dim", [1, 7, 8, 15, 16, 17, 300])
def test_the_k_best_rows_of_the_spans_best_first(path, dtype, dim):
    rng = np.random.default_rng(dim)
    rows = rng.standard_normal((900, dim)).astype(dtype)
    q = rng.standard_normal(dim).astype(np.float32)
    lo, hi = np.array([0, 100, 100, 640]), np.array([50, 400, 100, 900])  # one span empty
    for k in (1, 10, 25, 10_000):
        pos, scores = top_rows(rows, lo, hi, q, k)
        want_pos, want_scores = _reference(rows, lo, hi, q, k)
        assert len(pos) == min(k, 50 + 300 + 260) and scores.dtype == np.float32
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
        (np.ones((3, 4), np.float64), [0], [3], np.ones(4, np.float32), "float16 or float32"),
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


def _groups(members):
    """``qptr, qidx`` of groups whose queries are ``members`` (one list per group)."""
    qptr = np.array([0, *np.cumsum([len(x) for x in members])], dtype=np.int64)
    return qptr, np.array([q for x in members for q in x], dtype=np.int32)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("dim", [1, 7, 8, 17, 300])
def test_a_grouped_batch_gives_each_query_its_single_scan_to_the_bit(path, dtype, dim):
    # groups of 1 to 9 queries: the four-at-a-time loop and its remainder both run
    rng = np.random.default_rng(dim)
    rows = rng.standard_normal((3000, dim)).astype(dtype)
    queries = rng.standard_normal((9, dim)).astype(np.float32)
    lo, hi = np.array([0, 700, 1500, 2000]), np.array([700, 1500, 1500, 3000])
    members = [list(range(9)), [2, 3, 8], [4], [0, 8, 1, 5, 6]]
    for k in (1, 20, 5000):
        pos, scores = _ivfscan.top_rows_grouped(rows, lo, hi, *_groups(members), queries, k)
        assert pos.shape == scores.shape == (9, k)
        for q in range(9):
            spans = [g for g, x in enumerate(members) if q in x]
            one_pos, one_scores = top_rows(rows, lo[spans], hi[spans], queries[q], k)
            n = len(one_pos)
            np.testing.assert_array_equal(pos[q, :n], one_pos)
            np.testing.assert_array_equal(scores[q, :n], one_scores)
            assert np.all(pos[q, n:] == -1) and np.all(scores[q, n:] == -np.inf)


def test_a_query_in_no_group_gets_nothing():
    rows = np.ones((4, 2), dtype=np.float16)
    q = np.ones((3, 2), dtype=np.float32)
    pos, _ = _ivfscan.top_rows_grouped(rows, np.array([0]), np.array([4]), *_groups([[1]]), q, 2)
    assert pos.tolist() == [[-1, -1], [0, 1], [-1, -1]]


@pytest.mark.parametrize(
    "lo, hi, qptr, qidx, message",
    [
        ([0], [5], [0, 1], [0], "outside the 4 rows"),
        ([0, 1], [2], [0, 1], [0], "same groups"),
        ([0], [2], [0, 2], [0], "from 0 to len"),
        ([0], [2], [0, 1], [3], "outside the 2 queries"),
        ([0, 0], [2, 2], [0, 2, 1], [0, 1], "from 0 to len|not decrease"),
    ],
)
def test_bad_groups_are_refused_in_one_line(lo, hi, qptr, qidx, message):
    rows = np.ones((4, 2), dtype=np.float32)
    with pytest.raises(ValueError, match=message):
        _ivfscan.top_rows_grouped(
            rows,
            np.array(lo, np.int64),
            np.array(hi, np.int64),
            np.array(qptr, np.int64),
            np.array(qidx, np.int32),
            np.ones((2, 2), np.float32),
            2,
        )


def _index(rng, nlist, dim, dtype, sizes=None):
    """``nlist`` lists of random sizes (some empty) over unit rows: centroids, packed
    centroids, rows, offsets, ids."""
    sizes = rng.integers(0, 60, nlist) if sizes is None else np.asarray(sizes)
    sizes[1] = 0  # an empty list
    rows = rng.standard_normal((int(sizes.sum()), dim)).astype(dtype)
    centroids = rng.standard_normal((nlist, dim)).astype(np.float32)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    ids = rng.permutation(len(rows)).astype(np.int64) + 1000
    return centroids, _ivfscan.pack_centroids(centroids), rows, offsets, ids


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("dim", [1, 7, 17, 300])
def test_a_batch_search_gives_each_query_its_search_alone_to_the_bit(path, dtype, dim):
    rng = np.random.default_rng(dim)
    nlist = 21  # not a multiple of the eight-list blocks
    centroids, packed, rows, offsets, ids = _index(rng, nlist, dim, dtype)
    queries = rng.standard_normal((11, dim)).astype(np.float32)  # tiles of 4 and a rest
    queries[5] = np.nan  # scores nothing, scans nothing
    queries[7] = queries[2]  # the same lists as another query
    for nprobe, k in [(1, 5), (3, 20), (nlist, 10_000)]:
        found, near = _ivfscan.search_batch(packed, nlist, rows, offsets, ids, queries, nprobe, k)
        assert found.shape == (11, k) and near.shape == (11, nprobe)
        assert np.all(near[5] == -1) and np.all(found[5] == -1)
        np.testing.assert_array_equal(found[7], found[2])
        for i in range(11):  # a batch of one
            one = _ivfscan.search_batch(
                packed, nlist, rows, offsets, ids, queries[i : i + 1], nprobe, k
            )
            np.testing.assert_array_equal(one[0][0], found[i])
            np.testing.assert_array_equal(one[1][0], near[i])
        # against NumPy: the lists of the best centroid scores, the best rows of those lists
        q = queries[0].astype(np.float64)
        order = np.argsort(-(centroids.astype(np.float64) @ q), kind="stable")
        assert set(near[0]) == set(order[:nprobe]) or dim == 1  # 1-d: ties everywhere
        spans = [(offsets[lst], offsets[lst + 1]) for lst in near[0]]
        want = top_rows(
            rows, *(np.array(x, np.int64) for x in zip(*spans, strict=True)), queries[0], k
        )[0]
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
    _, packed, rows, offsets, ids = _index(rng, 9, 8, np.float16)
    q = np.ones((2, 8), dtype=np.float32)
    bad = offsets.copy()
    bad[3], bad[4] = bad[4] + 1, bad[3]
    for args, message in [
        ((packed, 8, rows, offsets, ids), "packed centroids"),
        ((packed, 9, rows, offsets[:-1], ids), "nlist \\+ 1"),
        ((packed, 9, rows, bad, ids), "must not decrease"),
        ((packed, 9, rows, offsets, ids[:-1]), "one per row"),
        ((packed, 9, rows.astype(np.float64), offsets, ids), "float16 or float32"),
    ]:
        with pytest.raises(ValueError, match=message):
            _ivfscan.search_batch(*args, q, 2, 3)
