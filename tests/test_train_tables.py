"""The per-word tables built from the counts (`vecserve.train.tables`)."""

from __future__ import annotations

import numpy as np

from vecserve.train.tables import alias_table, huffman_tree, sample_thresholds


def test_sample_thresholds_match_word2vec_formula():
    counts = np.array([1000, 100, 10, 1])
    thr = sample_thresholds(counts, 1e-2) / (2**32 - 1)
    t = 1e-2 * counts.sum()
    expected = np.minimum((np.sqrt(counts / t) + 1) * t / counts, 1.0)
    np.testing.assert_allclose(thr, expected, rtol=1e-6)
    assert (sample_thresholds(counts, 0) == 2**32 - 1).all()


def test_alias_table_is_exact():
    counts = np.array([50, 20, 20, 7, 2, 1])
    prob, alias = alias_table(counts)
    p = prob / 2.0**32
    mass = p.copy()
    np.add.at(mass, alias, 1 - p)
    w = counts**0.75
    np.testing.assert_allclose(mass / len(counts), w / w.sum(), atol=1e-6)


def test_huffman_codes_are_prefix_free_and_frequent_words_short():
    counts = np.array([40, 30, 10, 8, 6, 4, 2])
    tree = huffman_tree(counts)
    codes = ["".join(map(str, tree.codes[w, : tree.codelens[w]])) for w in range(len(counts))]
    for a in codes:
        assert not any(b != a and b.startswith(a) for b in codes)
    assert tree.codelens[0] <= tree.codelens[-1]
    assert (tree.points[:, 0] == len(counts) - 2).all()  # every path starts at the root
