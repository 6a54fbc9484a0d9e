"""SimilarityIndex answers exactly like gensim's KeyedVectors; snapshots and IndexManager."""

from __future__ import annotations

import gc
import os
import threading
import warnings

import numpy as np
import pytest
from gensim.models import KeyedVectors

from vecserve.loader import load_arrays
from vecserve.search.snapshot import IndexManager, SimilarityIndex, gensim_argsort

from .helpers import gensim_data

# The word2vec-format files gensim ships that gensim itself can read (name, binary, kwargs).
GENSIM_FILES = [
    ("euclidean_vectors.bin", True, {}),
    ("high_precision.kv.bin", True, {}),
    ("high_precision.kv.txt", False, {}),
    ("crime-and-punishment.vec", False, {}),
    ("lee_fasttext.vec", False, {}),
    ("toy-model.vec", False, {}),
    ("poincare_vectors.bin", True, {}),
    ("test_glove.txt", False, {"no_header": True}),
    ("word2vec_pre_kv_c", False, {}),
    ("EN.1-10.cbow1_wind5_hs0_neg10_size300_smpl1e-05.txt", False, {}),
]


def load_gensim(name: str) -> KeyedVectors:
    fname, binary, kwargs = next(f for f in GENSIM_FILES if f[0] == name)
    with warnings.catch_warnings():
        # gensim's no_header reader leaves a file to the garbage collector
        warnings.simplefilter("ignore", ResourceWarning)
        kv = KeyedVectors.load_word2vec_format(gensim_data(fname), binary=binary, **kwargs)
        gc.collect()
    return kv


def queries(kv: KeyedVectors) -> list[dict]:
    """A spread of most_similar argument forms over a model's words."""
    w = kv.index_to_key
    n = len(w)
    a, b, c = w[0], w[min(1, n - 1)], w[min(2, n - 1)]
    last = w[-1]
    vec = kv[a] * 0.5 + kv[last]
    out = [
        {"positive": a},
        {"positive": [a], "topn": 3},
        {"positive": [a, b], "negative": [c], "topn": 5},
        {"positive": [(a, 2.0), (b, 0.5)], "negative": [(c, -0.25)]},
        {"positive": [vec], "topn": 4},
        {"positive": vec.astype(np.float64)},
        {"positive": [a, vec], "negative": [last]},
        {"positive": [a], "topn": None},
        {"positive": [a], "topn": 0},
        {"positive": [1]},
        {"positive": [last], "restrict_vocab": max(1, n // 2)},
        {"positive": [a], "topn": n + 5},
        {"positive": [a], "clip_start": min(1, n - 1), "clip_end": n},
    ]
    return out


def same(got, want):
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got, want)
    else:
        assert got == want


@pytest.mark.parametrize("fname", [f[0] for f in GENSIM_FILES])
def test_most_similar_forms_equal_gensim(fname):
    kv = load_gensim(fname)
    ix = SimilarityIndex.from_arrays(kv.index_to_key, kv.vectors)
    for q in queries(kv):
        same(ix.most_similar(**q), kv.most_similar(**q))
    a, last = kv.index_to_key[0], kv.index_to_key[-1]
    same(ix.similar_by_word(a, topn=3), kv.similar_by_word(a, topn=3))
    same(ix.similar_by_vector(kv[last], topn=3), kv.similar_by_vector(kv[last], topn=3))
    same(ix.most_similar_cosmul(a), kv.most_similar_cosmul(a))
    if len(kv) > 2:
        pos, neg = kv.index_to_key[:2], kv.index_to_key[2:3]
        same(ix.most_similar_cosmul(pos, neg, topn=4), kv.most_similar_cosmul(pos, neg, topn=4))
        same(ix.most_similar_cosmul(pos, topn=None), kv.most_similar_cosmul(pos, topn=None))
    same(ix.distances(a), kv.distances(a))
    same(ix.distances(a, [last, a]), kv.distances(a, [last, a]))
    same(ix.closer_than(a, last), kv.closer_than(a, last))
    assert ix.rank(a, last) == kv.rank(a, last)


def test_missing_words_raise_keyerror_like_gensim():
    kv = load_gensim("toy-model.vec")
    ix = SimilarityIndex.from_arrays(kv.index_to_key, kv.vectors)
    for call in (
        lambda m: m.most_similar("nope"),
        lambda m: m.most_similar(["the"], ["nope"]),
        lambda m: m.most_similar_cosmul("nope"),
        lambda m: m.closer_than("the", "nope"),
        lambda m: m.distances("nope"),
        lambda m: m.rank("nope", "the"),
    ):
        with pytest.raises(KeyError) as want:
            call(kv)
        with pytest.raises(KeyError) as got:
            call(ix)
        assert str(got.value) == str(want.value)
    with pytest.raises(ValueError):
        ix.most_similar_cosmul(negative=["the"])


def test_ties_break_like_gensim():
    vectors = np.array([[1, 0], [0, 1], [0, 1], [0, 1], [1, 1], [1, 1]], dtype=np.float32)
    tokens = list("abcdef")
    kv = KeyedVectors(2)
    kv.add_vectors(tokens, vectors)
    ix = SimilarityIndex.from_arrays(tokens, vectors)
    for topn in (1, 2, 3, 5, None):
        same(ix.most_similar("b", topn=topn), kv.most_similar("b", topn=topn))
    x = np.array([3.0, 1.0, 3.0, 2.0])
    from gensim import matutils

    for topn in (None, 1, 2, 4, 9):
        assert list(gensim_argsort(x, topn, True)) == list(matutils.argsort(x, topn, True))


def test_batch_agrees_with_single():
    kv = load_gensim("lee_fasttext.vec")
    ix = SimilarityIndex.from_arrays(kv.index_to_key, kv.vectors)
    w = kv.index_to_key
    qs = [
        {"positive": [w[0]], "topn": 5},
        {"positive": [w[3], w[4]], "negative": [w[5]], "topn": 3, "restrict_vocab": 500},
        {"positive": [w[7]], "topn": 3, "cosmul": True},
        {"positive": [w[9]], "topn": 0},
    ]
    got = ix.most_similar_batch(qs)
    for q, g in zip(qs, got, strict=True):
        q = dict(q)
        want = ix.most_similar_cosmul(**q) if q.pop("cosmul", False) else ix.most_similar(**q)
        assert [k for k, _ in g] == [k for k, _ in want]
        np.testing.assert_allclose([s for _, s in g], [s for _, s in want], atol=1e-6)


def test_as_keyedvectors_evaluates_like_gensim():
    kv = load_gensim("euclidean_vectors.bin")
    ix = SimilarityIndex.from_arrays(kv.index_to_key, kv.vectors)
    view = ix.as_keyedvectors(limit=1000)
    want = kv.evaluate_word_analogies(gensim_data("questions-words.txt"), restrict_vocab=1000)
    got = view.evaluate_word_analogies(gensim_data("questions-words.txt"), restrict_vocab=1000)
    assert got == want


@pytest.mark.parametrize("codec", ["f32", "f16"])
def test_build_from_redis_and_reuse(store, tmp_path, codec):
    kv = load_gensim("lee_fasttext.vec")
    info = load_arrays(kv.index_to_key, kv.vectors, name="LEE", store=store, codec=codec)
    ix = SimilarityIndex.build(store, info, cache_dir=tmp_path, chunk=300)
    assert ix.index_to_key == kv.index_to_key
    decoded, _ = info.codec_obj.decode_values(store.fetch(info, kv.index_to_key), info.dim)
    np.testing.assert_array_equal(ix.vectors, decoded)
    ref = KeyedVectors(info.dim)
    ref.add_vectors(kv.index_to_key, decoded)
    same(ix.most_similar("the", topn=10), ref.most_similar("the", topn=10))
    # the snapshot on disk is reused (same directory, not rebuilt)
    mtime = os.stat(ix.path / "vectors.npy").st_mtime_ns
    again = SimilarityIndex.build(store, info, cache_dir=tmp_path)
    assert again.path == ix.path and os.stat(again.path / "vectors.npy").st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == [ix.path.name]


def test_manager_follows_generations(store, tmp_path):
    rng = np.random.default_rng(3)
    tokens = [f"t{i}" for i in range(50)]
    load_arrays(tokens, rng.standard_normal((50, 8)), name="GEN", store=store)
    manager = IndexManager(store, cache_dir=tmp_path)
    first = manager.get("GEN")
    assert manager.get("GEN") is first
    v2 = rng.standard_normal((40, 8)).astype(np.float32)
    load_arrays(tokens[:40], v2, name="GEN", store=store)
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(manager.get("GEN"))) for _ in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results[0] is results[1]
    second = results[0]
    assert second.generation == first.generation + 1 and len(second) == 40
    np.testing.assert_array_equal(second.vectors, v2)
    # the older generation's snapshot was removed from disk
    assert sorted(p.name for p in tmp_path.iterdir()) == [second.path.name]
