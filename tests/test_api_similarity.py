"""Similarity endpoints equal gensim's answers on gensim's own test vector files; ANN."""

from __future__ import annotations

import numpy as np
import pytest

from vecserve.api import create_app
from vecserve.loader import load_arrays
from vecserve.service.settings import Settings

from .api_support import AppClient, wait_for_ann
from .helpers import gensim_data

FILES = ["euclidean_vectors.bin", "lee_fasttext.vec", "toy-model.vec", "crime-and-punishment.vec"]


def _gensim(name: str):
    from gensim.models import KeyedVectors

    return KeyedVectors.load_word2vec_format(gensim_data(name), binary=name.endswith(".bin"))


@pytest.fixture
def client_for(redis_url, store, tmp_path, app_client):
    def make(kv, *, name="G", **overrides) -> AppClient:
        load_arrays(kv.index_to_key, kv.vectors, name=name, store=store, progress=False)
        settings = Settings(
            redis_url=redis_url,
            default_model=name,
            cache_dir=tmp_path / "cache",
            model_ttl=0,
            **overrides,
        )
        return app_client(create_app(settings))

    return make


def _vec(v: np.ndarray) -> dict:
    return {"vector": v.astype(np.float64).tolist(), "dtype": v.dtype.str}


def _pairs(results) -> list[tuple[str, float]]:
    return [(w, s) for w, s in results]


@pytest.mark.parametrize("fname", FILES)
def test_most_similar_equals_gensim(client_for, fname):
    kv = _gensim(fname)
    client = client_for(kv)
    words = kv.index_to_key
    a, b, c, d = words[1], words[2], words[3], words[len(words) // 2]
    cases = [
        ({"positive": [a]}, dict(positive=[a])),
        (
            {"positive": [a, b], "negative": [c], "topn": 5},
            dict(positive=[a, b], negative=[c], topn=5),
        ),
        ({"positive": [d], "restrict_vocab": 20}, dict(positive=[d], restrict_vocab=20)),
        (
            {"positive": [[a, 2.0], 3], "negative": [[c, 0.5]]},
            dict(positive=[(a, 2.0), 3], negative=[(c, 0.5)]),
        ),
        ({"positive": [_vec(kv[b])], "topn": 4}, dict(positive=[kv[b]], topn=4)),
        (
            {"positive": [_vec(kv[b].astype(np.float64) * 3)]},
            dict(positive=[kv[b].astype(np.float64) * 3]),
        ),
        ({"positive": a, "topn": 0}, dict(positive=a, topn=0)),
    ]
    for body, kwargs in cases:
        got = client.post("/most_similar", json=body)
        assert got.status_code == 200, (body, got.text)
        assert _pairs(got.json()["results"]) == kv.most_similar(**kwargs), body
    # topn=None: every similarity, exactly
    got = client.post("/most_similar", json={"positive": [a], "topn": None}).json()
    np.testing.assert_array_equal(
        np.asarray(got["similarities"], dtype=np.float32), kv.most_similar(a, topn=None)
    )
    # cosmul
    got = client.post("/most_similar", json={"positive": [a, b], "negative": [c], "cosmul": True})
    assert _pairs(got.json()["results"]) == kv.most_similar_cosmul([a, b], [c])
    # GET form
    got = client.get("/most_similar", params={"positive": f"{a},{b}", "negative": c, "topn": 3})
    assert _pairs(got.json()["results"]) == kv.most_similar([a, b], [c], topn=3)


@pytest.mark.parametrize("fname", FILES)
def test_small_queries_equal_gensim(client_for, fname):
    kv = _gensim(fname)
    client = client_for(kv)
    w = kv.index_to_key
    r = client.get("/similarity", params={"w1": w[0], "w2": w[5]}).json()
    assert r["similarity"] == float(kv.similarity(w[0], w[5]))
    body = {"ws1": [w[0], w[1], "zz-missing"], "ws2": [w[4], w[7]]}
    r = client.post("/n_similarity", json=body).json()
    assert r["similarity"] == float(kv.n_similarity(body["ws1"], body["ws2"]))
    assert r["missing"] == ["zz-missing"]
    group = [w[3], w[9], w[10], w[-1]]
    r = client.post("/doesnt_match", json={"words": [*group, "zz-missing"]}).json()
    assert r["word"] == kv.doesnt_match(group) and r["ignored"] == ["zz-missing"]
    if not any("," in x for x in group):
        r = client.get("/doesnt_match", params={"words": ",".join(group)}).json()
        assert r["word"] == kv.doesnt_match(group) and r["ignored"] == []
    r = client.get("/analogy", params={"a": w[1], "b": w[2], "c": w[3], "topn": 3}).json()
    want = kv.most_similar(positive=[w[2], w[3]], negative=[w[1]], topn=3)
    assert _pairs(r["results"]) == want and r["answer"] == want[0][0]
    r = client.get("/analogy", params={"a": w[1], "b": w[2], "c": w[3], "cosmul": True}).json()
    assert r["answer"] == kv.most_similar_cosmul([w[2], w[3]], [w[1]], topn=1)[0][0]


def test_batch_equals_single_queries(client_for):
    kv = _gensim("lee_fasttext.vec")
    client = client_for(kv)
    w = kv.index_to_key
    rng = np.random.default_rng(1)
    queries = []
    for _ in range(40):
        i, j, k = rng.choice(len(w), 3, replace=False)
        queries.append({"positive": [w[i], w[j]], "negative": [w[k]], "topn": 10})
    queries += [
        {"positive": [w[5]], "restrict_vocab": 100, "topn": 5},
        {"positive": [_vec(kv[w[9]])], "topn": 3},
        {"positive": [w[1], w[2]], "negative": [w[3]], "cosmul": True},
        {"positive": [w[4]], "topn": None},
    ]
    body = client.post("/most_similar/batch", json={"queries": queries}).json()
    assert body["approximate"] == [False] * len(queries)
    batch = body["results"]
    assert len(batch) == len(queries)
    for q, got in zip(queries, batch, strict=True):
        single = client.post("/most_similar", json=q).json()
        if q.get("topn", 10) is None:
            np.testing.assert_allclose(got, single["similarities"], atol=1e-6)
            continue
        want = single["results"]
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want], atol=1e-6)
        # words agree except where two scores are within rounding of each other
        scores = np.array([s for _, s in want])
        gaps = np.diff(scores, prepend=np.inf, append=-np.inf)
        clear = (np.abs(gaps[:-1]) > 1e-5) & (np.abs(gaps[1:]) > 1e-5)
        assert [x[0] for x, ok in zip(got, clear, strict=True) if ok] == [
            x[0] for x, ok in zip(want, clear, strict=True) if ok
        ]


def test_a_text_stands_where_a_vector_does(client_for):
    """``{"text": ...}`` in most_similar is the vector ``POST /embed`` gives the text."""
    kv = _gensim("lee_fasttext.vec")
    client = client_for(kv)
    w = kv.index_to_key
    texts = [f"{w[3]} {w[7]}", w[11], f"{w[20]} zzqx {w[21]}"]
    got = client.post("/embed", json={"texts": texts}).json()["vectors"]
    vec = [_vec(np.asarray(v, np.float32)) for v in got]
    cases = [
        ({"positive": [{"text": texts[0]}]}, {"positive": [vec[0]]}),
        (
            {"positive": [w[1], [{"text": texts[1]}, 2.0]], "negative": [{"text": texts[2]}]},
            {"positive": [w[1], [vec[1], 2.0]], "negative": [vec[2]]},
        ),
        (
            {"positive": [{"text": texts[0]}], "negative": [w[2]], "cosmul": True, "topn": 4},
            {"positive": [vec[0]], "negative": [w[2]], "cosmul": True, "topn": 4},
        ),
    ]
    for by_text, by_vector in cases:
        answer = client.post("/most_similar", json=by_text)
        assert answer.status_code == 200, answer.text
        assert answer.json() == client.post("/most_similar", json=by_vector).json()
    # a text of no known word is an unknown key (404), alone or in its batch slot
    unknown = client.post("/most_similar", json={"positive": [{"text": "zzqx qqqz"}]})
    assert unknown.status_code == 404 and unknown.json()["error"] == "TokenNotFound"
    queries = [cases[0][0], {"positive": [{"text": "zzqx qqqz"}]}]
    batch = client.post("/most_similar/batch", json={"queries": queries}).json()
    assert batch["results"][0] == client.post("/most_similar", json=queries[0]).json()["results"]
    assert batch["results"][1] is None and batch["errors"][1]["status"] == 404
    for bad in ({"text": 3}, {"text": "a", "vector": [1.0]}):
        r = client.post("/most_similar", json={"positive": [bad]})
        assert r.status_code == 422, r.text
    schema = client.get("/openapi.json").json()["components"]["schemas"]["MostSimilarRequest"]
    forms = schema["properties"]["positive"]["anyOf"][0]["items"]["anyOf"]
    assert next(f for f in forms if "text" in str(f))["required"] == ["text"]


def test_ann_opt_in_recall_reported_and_shared_from_disk(client_for, redis_url, tmp_path):
    pytest.importorskip("usearch")
    from gensim.models import KeyedVectors

    rng = np.random.default_rng(5)
    centers = rng.standard_normal((40, 32)).astype(np.float32)
    vectors = centers[rng.integers(0, 40, 3000)] + 0.4 * rng.standard_normal((3000, 32))
    kv = KeyedVectors(32, count=0)
    kv.add_vectors([f"t{i}" for i in range(3000)], vectors.astype(np.float32))
    client = client_for(kv, ann=True)
    exact = client.post("/most_similar", json={"positive": ["t7"], "approx": True}).json()
    assert exact["approximate"] is False  # not built yet: answered exactly meanwhile
    assert _pairs(exact["results"]) == kv.most_similar("t7")
    ann = wait_for_ann(client, "G", ("ready", "exact-fallback", "failed"))
    assert ann["state"] == "ready", ann
    # built to the recall target: the estimate, its interval and the setting it chose
    assert ann["recall_at_10"] >= 0.95 and ann["recall_queries"] == 500
    low, high = ann["recall_interval"]
    assert low <= ann["recall_at_10"] <= high
    target = ann["target"]
    assert target["recall"] == 0.95 and target["met"] is True and target["reason"] is None
    assert target["setting"] == {"expansion_search": ann["params"]["expansion_search"]}
    assert ann["params"]["connectivity"] == 16 and ann["library"].startswith("usearch")
    got = client.post("/most_similar", json={"positive": ["t7"], "approx": True}).json()
    assert got["approximate"] is True
    words = [w for w, _ in got["results"]]
    assert len(set(words) & {w for w, _ in kv.most_similar("t7")}) >= 8
    for w, s in got["results"]:  # scores are exact cosines
        assert s == pytest.approx(float(kv.similarity("t7", w)), abs=1e-6)
    r = client.get("/analogy", params={"a": "t1", "b": "t2", "c": "t3", "approx": True}).json()
    assert r["approximate"] is True and r["answer"]
    # a batch answers its approx queries with the ANN index (one search), the rest exactly
    mixed = [
        {"positive": ["t7"], "approx": True},
        {"positive": ["t7"]},
        {"positive": ["t7"], "approx": True, "restrict_vocab": 50},
        {"positive": ["t1", "t2"], "negative": ["t3"], "approx": True, "topn": 8},
    ]
    body = client.post("/most_similar/batch", json={"queries": mixed}).json()
    assert body["approximate"] == [True, False, False, True]
    for q, res, approximate in zip(mixed, body["results"], body["approximate"], strict=True):
        single = client.post("/most_similar", json=q).json()
        assert single["approximate"] is approximate
        assert [w for w, _ in res] == [w for w, _ in single["results"]]
        np.testing.assert_allclose(
            [x for _, x in res], [x for _, x in single["results"]], atol=1e-6
        )
    # restrict_vocab and cosmul are answered exactly
    r = client.post(
        "/most_similar", json={"positive": ["t7"], "approx": True, "restrict_vocab": 50}
    )
    assert r.json()["approximate"] is False
    # a second process (here: a second app) maps the same file instead of rebuilding
    settings = Settings(redis_url=redis_url, default_model="G", cache_dir=tmp_path / "cache")
    with AppClient(create_app(settings)) as other:
        got2 = other.post("/most_similar", json={"positive": ["t7"], "approx": True}).json()
        assert got2["approximate"] is True and got2["results"] == got["results"]
        assert other.get("/models/G").json()["ann"]["build_seconds"] == ann["build_seconds"]
    assert "vecserve_ann_recall_at_10" in client.get("/metrics").text
