"""``RedisKeyedVectors.most_similar_batch``: many queries in one call, each answered as
``most_similar`` answers it, from the local snapshot and through the real HTTP service
(``POST /most_similar/batch``)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from vecserve.keyedvectors import RedisKeyedVectors
from vecserve.loader import load_arrays
from vecserve.search.exact import BATCH_FROM_ROWS

N = BATCH_FROM_ROWS + 1001  # large enough for the blocked GEMM path


@pytest.fixture
def model(store):
    rng = np.random.default_rng(4)
    vectors = rng.standard_normal((N, 24)).astype(np.float32)
    vectors[7] = vectors[3]  # a tie
    words = [f"w{i}" for i in range(N)]
    load_arrays(words, vectors, name="B", store=store)
    return words, vectors


def queries(vectors):
    return [
        "w1",
        "w3",  # tied with w7
        5,
        vectors[9] * 2,
        {"positive": ["w10", "w11"], "negative": ["w12"], "topn": 25},
        {"positive": [("w13", 2.0), "w14"], "topn": 3},
        {"positive": ["w15"], "topn": 0},
        {"positive": ["w16"], "restrict_vocab": 300},
        {"positive": ["w17"], "negative": ["w18"], "cosmul": True, "topn": 4},
    ]


def singles(rkv, asked, topn=10):
    out = []
    for q in asked:
        if not isinstance(q, dict):
            out.append(rkv.most_similar(q, topn=topn))
            continue
        q = dict(q)
        call = rkv.most_similar_cosmul if q.pop("cosmul", False) else rkv.most_similar
        out.append(call(**q))
    return out


def test_batch_equals_single_answers_locally(store, model, tmp_path):
    _, vectors = model
    rkv = RedisKeyedVectors("B", store=store, cache_dir=tmp_path)
    asked = queries(vectors)
    assert rkv.most_similar_batch(asked) == singles(rkv, asked)
    assert rkv.most_similar_batch(["w1", "w2"], topn=3) == singles(rkv, ["w1", "w2"], topn=3)
    assert rkv.most_similar_batch(vectors[:2]) == singles(rkv, list(vectors[:2]))
    assert rkv.most_similar_batch([]) == []
    with pytest.raises(KeyError, match="nope"):
        rkv.most_similar_batch(["w1", "nope"])
    with pytest.raises(TypeError, match="unknown query argument"):
        rkv.most_similar_batch([{"positive": ["w1"], "topm": 3}])


def test_batch_through_the_service_equals_local_answers(
    store,
    model,
    tmp_path,
    service_url,
):
    _, vectors = model
    local = RedisKeyedVectors("B", store=store, cache_dir=tmp_path / "local")
    remote = RedisKeyedVectors("B", store=store, similarity_url=service_url)
    asked = queries(vectors)
    got = remote.most_similar_batch(asked)
    want = singles(local, asked)
    assert [[w for w, _ in g] for g in got] == [[w for w, _ in g] for g in want]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal([s for _, s in g], [s for _, s in w])
    with pytest.raises(KeyError):
        remote.most_similar_batch(["w1", "nope"])


def test_whole_matrix_calls_read_the_registry_once_a_ttl(store, model, tmp_path):
    """A query is answered from the snapshot without a registry round trip while the entry
    is younger than ``model_ttl``; a re-load is seen once it is older."""
    words, vectors = model
    rkv = RedisKeyedVectors("B", store=store, cache_dir=tmp_path, model_ttl=0.5)
    first = rkv.most_similar("w1")
    reads = []
    rkv._reader.on_registry = lambda hit: reads.append(hit)
    for w in ("w2", "w3", "w4"):
        rkv.most_similar(w)
    assert reads and not any(hit is False for hit in reads)  # every entry from memory
    load_arrays(words, vectors[::-1].copy(), name="B", store=store)
    deadline = time.monotonic() + 10
    while rkv.most_similar("w1") == first:
        assert time.monotonic() < deadline, "the re-load was never seen"
        time.sleep(0.1)
    assert False in reads
    rkv.close()
