"""A batch answers per query: one query that fails on its own (an unknown word, an empty
query) is reported in its slot with the error's type and message, and every other query
is answered as gensim answers it; over HTTP (``POST /most_similar/batch``, a real uvicorn
server) and in Python (``most_similar_batch`` of the sync client, locally and through the
service, and of the asyncio client)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from vecserve.keyedvectors import AsyncRedisKeyedVectors, RedisKeyedVectors
from vecserve.loader import load_arrays
from vecserve.search.exact import BATCH_FROM_ROWS

N = BATCH_FROM_ROWS + 1000  # the snapshot answers a batch with its blocked matrix multiply
UNKNOWN, EMPTY = 17, 200  # the two failing queries' places in the batch of 256


@pytest.fixture
def model(store):
    """Model ``B`` in Redis and gensim's KeyedVectors of the same arrays (the reference)."""
    from gensim.models import KeyedVectors

    rng = np.random.default_rng(11)
    vectors = rng.standard_normal((N, 16)).astype(np.float32)
    words = [f"w{i}" for i in range(N)]
    load_arrays(words, vectors, name="B", store=store, progress=False)
    kv = KeyedVectors(16, count=0)
    kv.add_vectors(words, vectors)
    return kv


def batch(kv, *, empty: bool = True) -> list[dict]:
    """256 queries: single words, words with a negative, a weighted pair; one unknown word
    and (``empty``) one query with no input at all."""
    rng = np.random.default_rng(5)
    picks = rng.choice(N, (256, 3), replace=False)
    out = []
    for i, (a, b, c) in enumerate(picks):
        w = kv.index_to_key
        if i % 3 == 0:
            out.append({"positive": [w[a]], "topn": 10})
        elif i % 3 == 1:
            out.append({"positive": [w[a], w[b]], "negative": [w[c]], "topn": 5})
        else:
            out.append({"positive": [[w[a], 2.0], w[b]], "topn": 3})
    out[UNKNOWN] = {"positive": ["w1", "no-such-word"], "topn": 10}
    if empty:
        out[EMPTY] = {"positive": [], "negative": [], "topn": 10}
    return out


def gensim_answers(kv, queries) -> list:
    """Each query's answer or error from gensim itself."""
    out = []
    for q in queries:
        pos = [tuple(p) if isinstance(p, list) else p for p in q["positive"]]
        try:
            out.append(kv.most_similar(positive=pos, negative=q.get("negative"), topn=q["topn"]))
        except (KeyError, ValueError) as exc:
            out.append(exc)
    return out


def python_queries(queries) -> list[dict]:
    """The batch as most_similar_batch takes it (weighted items as tuples)."""
    return [
        dict(q, positive=[tuple(p) if isinstance(p, list) else p for p in q["positive"]])
        for q in queries
    ]


def assert_same(got: list, want: list) -> None:
    """Good queries: gensim's words, order and scores; failed ones: its error type and
    message."""
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if isinstance(w, Exception):
            assert isinstance(g, type(w)), (i, g, w)
            # gensim's message (the service adds what to give to a query of no input)
            assert g.args[0].startswith(w.args[0]), (i, g, w)
            continue
        assert [k for k, _ in g] == [k for k, _ in w], i
        np.testing.assert_allclose([s for _, s in g], [s for _, s in w], rtol=0, atol=1e-6)


def test_gensim_fails_the_two_queries(model):
    want = gensim_answers(model, batch(model))
    assert [i for i, w in enumerate(want) if isinstance(w, Exception)] == [UNKNOWN, EMPTY]
    assert isinstance(want[UNKNOWN], KeyError) and isinstance(want[EMPTY], ValueError)


def test_http_batch_reports_each_querys_error_in_its_slot(model, service_url):
    import httpx

    queries = batch(model)
    resp = httpx.post(
        f"{service_url}/most_similar/batch", json={"model": "B", "queries": queries}, timeout=60
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert len(body["results"]) == len(body["errors"]) == len(body["approximate"]) == 256
    assert [i for i, e in enumerate(body["errors"]) if e] == [UNKNOWN, EMPTY]
    unknown, empty = body["errors"][UNKNOWN], body["errors"][EMPTY]
    assert unknown["error"] == "TokenNotFound" and unknown["status"] == 404
    assert unknown["token"] == "no-such-word" and unknown["missing"] == ["no-such-word"]
    assert empty["error"] == "ValueError" and empty["status"] == 400
    assert empty["detail"].startswith("cannot compute mean with no input")
    # each slot's error is the one the query alone gets
    for i in (UNKNOWN, EMPTY):
        alone = httpx.post(f"{service_url}/most_similar", json={"model": "B", **queries[i]})
        assert alone.status_code == body["errors"][i]["status"]
        assert alone.json()["detail"] == body["errors"][i]["detail"]
    assert body["results"][UNKNOWN] is None and body["results"][EMPTY] is None
    want = gensim_answers(model, queries)
    got = [r if r is not None else want[i] for i, r in enumerate(body["results"])]
    assert_same(got, want)


@pytest.mark.parametrize(
    ("where", "empty"),
    [
        ("service", True),
        ("local", False),
        ("local", True),
    ],
)
def test_python_batch_raises_or_returns_each_querys_error(
    model, store, tmp_path, where, empty, request
):
    url = request.getfixturevalue("service_url") if where == "service" else None
    rkv = RedisKeyedVectors("B", store=store, cache_dir=tmp_path / "local", similarity_url=url)
    queries = python_queries(batch(model, empty=empty))
    want = gensim_answers(model, batch(model, empty=empty))
    got = rkv.most_similar_batch(queries, return_exceptions=True)
    assert_same(got, want)
    # by default the first failing query's error is raised, naming its place
    with pytest.raises(KeyError, match="no-such-word") as raised:
        rkv.most_similar_batch(queries)
    assert f"query {UNKNOWN} of the batch of 256" in raised.value.__notes__[-1]
    if empty:
        with pytest.raises(ValueError, match="cannot compute mean with no input"):
            rkv.most_similar_batch(queries[UNKNOWN + 1 :])
    rkv.close()


@pytest.mark.parametrize("empty", [False, True])
def test_async_batch_returns_each_querys_error(model, store, tmp_path, empty):
    queries = python_queries(batch(model, empty=empty))
    want = gensim_answers(model, batch(model, empty=empty))

    async def main():
        async with AsyncRedisKeyedVectors("B", store=store, cache_dir=tmp_path) as kv:
            got = await kv.most_similar_batch(queries, return_exceptions=True)
            with pytest.raises(KeyError, match="no-such-word"):
                await kv.most_similar_batch(queries)
            return got

    assert_same(asyncio.run(main()), want)
