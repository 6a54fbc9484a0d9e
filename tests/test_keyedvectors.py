"""RedisKeyedVectors answers like gensim's KeyedVectors, on a real server.

Every call is compared twice: bit-exactly with gensim on the vectors as stored (the
codec's decoded values: for f32 that is the file itself), and, for the lossy codecs, with
gensim on the original file within the codec's tolerance (f16: 2e-3 relative to the
largest component, i8: 1/127 of it; similarities within 1e-2).
"""

from __future__ import annotations

import multiprocessing
import os
import threading

import numpy as np
import pytest
from gensim.models import KeyedVectors

from vecserve.errors import ModelNotFound, StoreUnavailable, TokenNotFound
from vecserve.keyedvectors import RedisKeyedVectors
from vecserve.loader import load_arrays

from .helpers import gensim_data
from .kv_support import CLIENTS, close_all, make_kv
from .test_similarity import GENSIM_FILES, load_gensim, queries, same

TOL = {"f16": 2e-3, "i8": 1 / 127}


def decoded_copy(kv: KeyedVectors, rkv: RedisKeyedVectors) -> KeyedVectors:
    """gensim KeyedVectors holding exactly what Redis holds (after the codec)."""
    ref = KeyedVectors(kv.vector_size)
    ref.add_vectors(kv.index_to_key, rkv.get_vectors(kv.index_to_key)[0])
    return ref


def local_calls(m, words):
    """The lookup calls, as (name, result) pairs."""
    a, b, c = words[0], words[1 % len(words)], words[2 % len(words)]
    last = words[-1]
    return [
        ("getitem", m[a]),
        ("getitem_list", m[[a, last, b]]),
        ("getitem_int", m[0]),
        ("norm", m.get_vector(last, norm=True)),
        ("similarity", m.similarity(a, last)),
        ("distance", m.distance(a, b)),
        ("n_similarity", m.n_similarity([a, b], [last, "not-a-word"])),
        ("distances", m.distances(a, [last, b])),
        ("distances_vec", m.distances(m[last] * 2, [a])),
        ("mean", m.get_mean_vector([a, b, "not-a-word"])),
        ("mean_w", m.get_mean_vector([a, m[c]], weights=[0.5, 2.0], post_normalize=True)),
        ("given", m.most_similar_to_given(a, [b, c, last])),
        ("centrality", m.rank_by_centrality([a, b, c, last, "not-a-word"])),
        ("doesnt_match", m.doesnt_match([a, b, c, last])),
        ("contains", (a in m, "not-a-word" in m, m.has_index_for(last))),
    ]


def assert_close(name, got, want, tol):
    if isinstance(want, (np.ndarray, float, np.floating)):
        scale = tol * max(1.0, float(np.max(np.abs(want)))) if tol else 0
        np.testing.assert_allclose(got, want, atol=scale, rtol=0, err_msg=name)
    elif name == "centrality":
        assert [w for _, w in got] == [w for _, w in want] or tol, name
    elif not tol:
        assert got == want, name


@pytest.fixture(params=CLIENTS)
def client(request) -> str:
    """Each parity case runs against RedisKeyedVectors and AsyncRedisKeyedVectors."""
    yield request.param
    close_all()


@pytest.mark.parametrize("codec", ["f32", "f16", "i8"])
@pytest.mark.parametrize("fname", [f[0] for f in GENSIM_FILES])
def test_every_call_matches_gensim(store, tmp_path, fname, codec, client):
    kv = load_gensim(fname)
    load_arrays(kv.index_to_key, kv.vectors, name="M", store=store, codec=codec)
    rkv = make_kv(client, "M", store=store, cache_dir=tmp_path)
    ref = kv if codec == "f32" else decoded_copy(kv, rkv)
    words = kv.index_to_key
    # metadata
    assert len(rkv) == len(kv) and rkv.vector_size == kv.vector_size
    assert rkv.index_to_key == kv.index_to_key and rkv.key_to_index == kv.key_to_index
    assert rkv.get_index(words[-1]) == kv.get_index(words[-1])
    assert rkv.get_vecattr(words[-1], "count") == kv.get_vecattr(words[-1], "count")
    # lookups: bit-exact against the stored vectors, within tolerance of the file
    for (name, got), (_, want) in zip(
        local_calls(rkv, words), local_calls(ref, words), strict=True
    ):
        if isinstance(want, np.ndarray):
            assert got.dtype == want.dtype and got.shape == want.shape, name
            np.testing.assert_array_equal(got, want, err_msg=name)
        else:
            assert got == want, name
    if codec != "f32":
        for (name, got), (_, want) in zip(
            local_calls(rkv, words), local_calls(kv, words), strict=True
        ):
            assert_close(name, got, want, TOL[codec] * 5)
    assert not rkv[words[0]].flags.writeable
    # whole-matrix calls, local snapshot
    for q in queries(ref):
        same(rkv.most_similar(**q), ref.most_similar(**q))
    a, last = words[0], words[-1]
    same(rkv.most_similar_cosmul([a], topn=5), ref.most_similar_cosmul([a], topn=5))
    same(rkv.similar_by_word(a, topn=3), ref.similar_by_word(a, topn=3))
    same(rkv.similar_by_vector(ref[last], topn=3), ref.similar_by_vector(ref[last], topn=3))
    same(rkv.distances(a), ref.distances(a))
    assert rkv.closer_than(a, last) == ref.closer_than(a, last)
    assert rkv.rank(a, last) == ref.rank(a, last)
    sub = rkv.vectors_for_all([last, "not-a-word", a, last])
    want_sub = ref.vectors_for_all([last, "not-a-word", a, last])
    assert sub.index_to_key == want_sub.index_to_key
    np.testing.assert_array_equal(sub.vectors, want_sub.vectors)
    full = rkv.to_keyedvectors()
    np.testing.assert_array_equal(full.vectors, ref.vectors)
    assert full.get_vecattr(last, "count") == kv.get_vecattr(last, "count")
    rkv.close()


def test_missing_words_like_gensim(store, tmp_path, client):
    kv = load_gensim("toy-model.vec")
    load_arrays(kv.index_to_key, kv.vectors, name="M", store=store)
    rkv = make_kv(client, "M", store=store, cache_dir=tmp_path)
    calls = [
        lambda m: m["nope"],
        lambda m: m[["the", "nope"]],
        lambda m: m[10_000],
        lambda m: m.get_vector("nope", norm=True),
        lambda m: m.similarity("the", "nope"),
        lambda m: m.distances("the", ["nope"]),
        lambda m: m.get_mean_vector(["nope"], ignore_missing=False),
        lambda m: m.get_index("nope"),
        lambda m: m.get_vecattr("nope", "count"),
        lambda m: m.get_vecattr("the", "nope"),
        lambda m: m.most_similar("nope"),
        lambda m: m.most_similar_cosmul("nope"),
        lambda m: m.closer_than("the", "nope"),
    ]
    for call in calls:
        with pytest.raises(KeyError) as want:
            call(kv)
        with pytest.raises(KeyError) as got:
            call(rkv)
        assert got.value.args[0] == want.value.args[0]
    with pytest.raises(TokenNotFound):
        rkv["nope"]
    for call in (lambda m: m[[]], lambda m: m.get_mean_vector([]), lambda m: m.doesnt_match([])):
        with pytest.raises(ValueError):
            call(kv)
        with pytest.raises(ValueError):
            call(rkv)
    with pytest.raises(ModelNotFound):
        make_kv(client, "GONE", store=store)["the"]
    rkv.close()


def test_missing_policies(store, client):
    load_arrays(["a", "b"], np.eye(2, dtype=np.float32), name="M", store=store)
    zeros = make_kv(client, "M", store=store, missing="zeros")
    assert zeros["x"].tolist() == [0.0, 0.0]
    assert zeros[["a", "x"]].tolist() == [[1.0, 0.0], [0.0, 0.0]]
    rkv = make_kv(client, "M", store=store)
    vecs, found = rkv.get_vectors(["x", "b", "y"], missing="skip")
    assert vecs.tolist() == [[0.0, 1.0]] and found.tolist() == [False, True, False]
    vecs, found = rkv.get_vectors(["x", "b"], missing="zeros")
    assert vecs.tolist() == [[0.0, 0.0], [0.0, 1.0]] and found.tolist() == [False, True]
    with pytest.raises(KeyError):
        rkv.get_vectors(["x"])
    with pytest.raises(ValueError):
        make_kv(client, "M", store=store, missing="ignore")


def test_counts_from_source(store):
    load_arrays(["a", "b", "c"], np.eye(3), name="M", store=store, counts=np.array([9, 5, 1]))
    rkv = RedisKeyedVectors.from_url(store.url, "M")
    assert [rkv.get_vecattr(w, "count") for w in "abc"] == [9, 5, 1]
    assert rkv.to_keyedvectors(["c", "a"]).get_vecattr("a", "count") == 9
    rkv.close()


def test_reload_is_noticed_without_cache(store, client):
    load_arrays(["a", "b"], np.eye(2), name="M", store=store)
    rkv = make_kv(client, "M", store=store)
    assert rkv["a"].tolist() == [1.0, 0.0]
    load_arrays(["a", "c"], 2 * np.ones((2, 3)), name="M", store=store, codec="f16")
    assert rkv["a"].tolist() == [2.0, 2.0, 2.0] and rkv.vector_size == 3
    assert "b" not in rkv and rkv.index_to_key == ["a", "c"]


def test_threads_share_one_instance(store):
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((300, 16)).astype(np.float32)
    tokens = [f"w{i}" for i in range(300)]
    load_arrays(tokens, vectors, name="M", store=store)
    rkv = RedisKeyedVectors("M", store=store, cache=100)
    errors = []

    def work(seed):
        r = np.random.default_rng(seed)
        try:
            for _ in range(50):
                idx = r.integers(0, 300, 20)
                np.testing.assert_array_equal(rkv[[tokens[i] for i in idx]], vectors[idx])
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rkv.close()
    assert not errors


def _child(rkv, conn):
    try:
        conn.send((os.getpid(), rkv["a"].tolist(), rkv._store is not None))
    except Exception as exc:
        conn.send(repr(exc))


@pytest.mark.parametrize("cache", [False, 10])
def test_forked_child_gets_its_own_connections(redis_url, store, cache):
    load_arrays(["a", "b"], np.eye(2), name="M", store=store)
    rkv = RedisKeyedVectors("M", redis_url=redis_url, cache=cache)
    assert rkv["a"].tolist() == [1.0, 0.0]  # parent is connected (and caching)
    parent_store = rkv._store
    ctx = multiprocessing.get_context("fork")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(rkv, theirs))
    proc.start()
    got = ours.recv()
    proc.join(10)
    assert proc.exitcode == 0
    assert got[0] != os.getpid() and got[1] == [1.0, 0.0], got
    assert rkv._store is parent_store and rkv["b"].tolist() == [0.0, 1.0]
    rkv.close()


@pytest.mark.cluster
def test_cluster(cluster_store, tmp_path):
    kv = load_gensim("lee_fasttext.vec")
    load_arrays(kv.index_to_key, kv.vectors, name="M", store=cluster_store)
    rkv = RedisKeyedVectors("M", store=cluster_store, cache_dir=tmp_path)
    words = kv.index_to_key
    np.testing.assert_array_equal(rkv[words[:500]], kv[words[:500]])
    assert rkv.similarity("the", "of") == kv.similarity("the", "of")
    same(rkv.most_similar("the", topn=5), kv.most_similar("the", topn=5))
    with pytest.raises(KeyError):
        rkv["nope"]


def test_evaluations_equal_gensim(store, tmp_path):
    kv = load_gensim("euclidean_vectors.bin")
    load_arrays(kv.index_to_key, kv.vectors, name="M", store=store)
    rkv = RedisKeyedVectors("M", store=store, cache_dir=tmp_path)
    questions = gensim_data("questions-words.txt")
    for restrict in (500, 300000):
        assert rkv.evaluate_word_analogies(questions, restrict_vocab=restrict) == (
            kv.evaluate_word_analogies(questions, restrict_vocab=restrict)
        )
    pairs = gensim_data("wordsim353.tsv")
    got = rkv.evaluate_word_pairs(pairs, restrict_vocab=1000)
    want = kv.evaluate_word_pairs(pairs, restrict_vocab=1000)
    assert repr(got) == repr(want)


def assert_whole_matrix_calls_match(rkv, kv):
    """The HTTP-mode calls answer like gensim: words, weighted items, vectors, cosmul."""
    vec = kv["of"] * 2
    same(rkv.most_similar("the", topn=5), kv.most_similar("the", topn=5))
    same(
        rkv.most_similar([("the", 2.0), vec], ["of"], restrict_vocab=100),
        kv.most_similar([("the", 2.0), vec], ["of"], restrict_vocab=100),
    )
    same(rkv.similar_by_vector(vec, topn=None), kv.similar_by_vector(vec, topn=None))
    same(rkv.most_similar_cosmul(["the", vec]), kv.most_similar_cosmul(["the", vec]))


def test_similarity_url_uses_the_http_contract(store, tmp_path):
    """A stand-in service speaking the JSON contract of vecserve.search.snapshot."""
    import json
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from vecserve.search.snapshot import SimilarityIndex

    def decode_items(items) -> list:  # the inverse of wire.encode_items
        def one(item):
            if isinstance(item, dict):
                return np.asarray(item["vector"], dtype=np.dtype(item.get("dtype", "<f8")))
            if isinstance(item, list):
                return (one(item[0]), float(item[1]))
            return item

        return [one(item) for item in (items or [])]

    kv = load_gensim("lee_fasttext.vec")
    load_arrays(kv.index_to_key, kv.vectors, name="M", store=store)
    index = SimilarityIndex.from_arrays(kv.index_to_key, kv.vectors)
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            pos, neg = decode_items(body["positive"]), decode_items(body["negative"])
            call = index.most_similar_cosmul if body["cosmul"] else index.most_similar
            try:
                res = call(pos, neg, topn=body["topn"], restrict_vocab=body["restrict_vocab"])
                out = {"model": "M", "generation": 1}
                if isinstance(res, np.ndarray):
                    out["similarities"] = res.tolist()
                else:
                    out["results"] = res
                code = 200
            except KeyError as exc:
                code, out = 404, {"error": "TokenNotFound", "detail": exc.args[0]}
            data = json.dumps(out).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        rkv = RedisKeyedVectors("M", store=store, similarity_url=url, cache_dir=tmp_path)
        assert_whole_matrix_calls_match(rkv, kv)
        with pytest.raises(KeyError) as got:
            rkv.most_similar("nope")
        assert got.value.args[0] == "Key 'nope' not present in vocabulary"
        assert len(seen) == 5 and not list(tmp_path.iterdir())  # no local snapshot built
    finally:
        server.shutdown()
        server.server_close()


def _raised(call, model):
    try:
        call(model)
    except Exception as exc:
        return exc
    raise AssertionError("no exception")


def test_similarity_url_against_the_real_service(store, tmp_path, service_url):
    """HTTP mode answers and fails exactly as gensim does locally; 4xx never StoreUnavailable."""
    kv = load_gensim("lee_fasttext.vec")
    load_arrays(kv.index_to_key, kv.vectors, name="M", store=store)
    client_dir = tmp_path / "client"
    rkv = RedisKeyedVectors("M", store=store, similarity_url=service_url, cache_dir=client_dir)
    assert_whole_matrix_calls_match(rkv, kv)
    vec = kv["of"] * 2
    failing = [
        lambda m: m.most_similar("nope"),  # KeyError "... not present in vocabulary"
        lambda m: m.most_similar(["the"], ["nope"]),
        lambda m: m.most_similar_cosmul("nope"),  # KeyError "... not present"
        lambda m: m.most_similar_cosmul([("the", 2.0)]),  # ValueError (422 from the service)
        lambda m: m.most_similar_cosmul(["the"], [3]),  # ValueError (422)
        lambda m: m.most_similar_cosmul([(vec, 2.0)]),  # TypeError, before any request
        lambda m: m.most_similar_cosmul(negative=["the"]),  # ValueError (400)
        lambda m: m.most_similar(positive=[], negative=[]),  # ValueError (400)
    ]
    for call in failing:
        want, got = _raised(call, kv), _raised(call, rkv)
        assert isinstance(got, type(want)), (got, want)
        assert not isinstance(got, StoreUnavailable)
        if isinstance(want, KeyError):
            assert isinstance(got, TokenNotFound) and got.args == want.args
            assert got.model == "M"
    with pytest.raises(ModelNotFound):
        RedisKeyedVectors("GONE", store=store, similarity_url=service_url).most_similar("the")
    assert not client_dir.exists()  # everything was answered by the service


def test_service_word_not_found_detail_is_gensims(store, service_url):
    import httpx

    load_arrays(["a", "b"], np.eye(2, dtype=np.float32), name="M", store=store)
    for path, params in [
        ("/most_similar", {"positive": "nope", "model": "M"}),
        ("/vectors", {"words": "a,nope", "missing": "error", "model": "M"}),
    ]:
        r = httpx.get(service_url + path, params=params)
        assert r.status_code == 404, r.text
        body = r.json()
        assert body["error"] == "TokenNotFound" and body["model"] == "M"
        assert body["detail"] == "Key 'nope' not present in vocabulary"
