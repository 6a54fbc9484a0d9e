"""The HTTP API through a real ASGI client (lifespan running) against a real Redis server."""

from __future__ import annotations

import io
import threading
import time
from urllib.parse import unquote

import numpy as np
import orjson
import pytest

from vecserve.api import create_app
from vecserve.loader import load_arrays
from vecserve.service.settings import Settings

from .api_support import AppClient
from .helpers import wait_until

JSON_HEADERS = {"content-type": "application/json"}
OCTET_ACCEPT = "application/octet-stream"
TOKENS = [f"w{i}" for i in range(196)] + ["café", "a,b", "日本", "naïve"]


@pytest.fixture
def vectors():
    return np.random.default_rng(3).standard_normal((len(TOKENS), 16)).astype(np.float32)


@pytest.fixture
def model(store, vectors):
    return load_arrays(TOKENS, vectors, name="M", store=store, progress=False)


@pytest.fixture
def make_client(redis_url, store, tmp_path, app_client):
    """Clients of apps built with test settings; the lifespan runs."""

    def make(**overrides) -> AppClient:
        options = {
            "redis_url": redis_url,
            "default_model": "M",
            "cache_dir": tmp_path / "cache",
            "model_ttl": 0,
            **overrides,
        }
        return app_client(create_app(Settings(**options)))

    return make


@pytest.fixture
def client(make_client, model):
    return make_client()


def assert_error(resp, status: int, error: str | None = None) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) >= {"error", "detail"}
    assert "Traceback" not in resp.text
    if error is not None:
        assert body["error"] == error, body
    return body


def assert_slot_error(resp, i: int, error: str, status: int) -> dict:
    """Query ``i`` of a batch answer failed on its own with ``error`` (the others did not)."""
    assert resp.status_code == 200, resp.text
    body = resp.json()
    slot = body["errors"][i]
    assert slot["error"] == error and slot["status"] == status and slot["detail"], slot
    assert body["results"][i] is None and body["approximate"][i] is False
    assert [j for j, e in enumerate(body["errors"]) if e is not None] == [i]
    return slot


# -- health, docs, models --------------------------------------------------------------------


def test_health_ready_docs(client, model):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["generation"] == model.generation
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    for p in [
        "/vectors",
        "/similarity",
        "/n_similarity",
        "/most_similar",
        "/most_similar/batch",
        "/doesnt_match",
        "/analogy",
        "/models",
        "/models/{name}",
        "/healthz",
        "/readyz",
        "/metrics",
    ]:
        assert p in paths


# -- the OpenAPI document is the contract ------------------------------------------------------
# (tests/test_openapi_fuzz.py fuzzes the whole document; these pin what it declares)


def test_405_lists_every_method_of_the_path(client):
    for path, methods in {
        "/most_similar": {"GET", "POST"},
        "/vectors": {"GET", "POST"},
        "/most_similar/batch": {"POST"},
        "/models": {"GET"},
    }.items():
        resp = client.request("PATCH", path)
        assert_error(resp, 405, "HTTPError")
        assert set(resp.headers["allow"].split(", ")) == methods, path


def test_openapi_declares_what_the_service_enforces(make_client, model):
    client = make_client(max_words=7, max_topn=9, max_batch=5)
    doc = client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]

    def param(path, method, name):
        ops = doc["paths"][path][method]["parameters"]
        return next(p for p in ops if p["name"] == name)

    # the settings' limits
    assert schemas["VectorsRequest"]["properties"]["words"]["maxItems"] == 7
    assert schemas["MostSimilarRequest"]["properties"]["topn"]["maximum"] == 9
    assert schemas["MostSimilarQuery"]["properties"]["negative"]["maxItems"] == 7
    assert schemas["BatchRequest"]["properties"]["queries"]["maxItems"] == 5
    assert param("/most_similar", "get", "topn")["schema"]["maximum"] == 9
    assert param("/vectors", "get", "words")["schema"]["maxItems"] == 7
    # model names, word lists, a query's input, the errors of a body
    name = param("/vectors", "get", "model")["schema"]["pattern"]
    assert name == schemas["VectorsRequest"]["properties"]["model"]["pattern"]
    assert param("/models/{name}", "get", "name")["schema"]["minLength"] == 1
    words = param("/vectors", "get", "words")
    assert words["required"] and words["schema"]["minItems"] == 1
    assert words["schema"]["items"]["pattern"] == "[^,]"
    assert param("/most_similar", "get", "positive")["required"]
    assert len(schemas["MostSimilarRequest"]["anyOf"]) == 3
    assert "anyOf" not in schemas["MostSimilarQuery"]  # a batch reports an empty query
    assert {"400", "413"} <= set(doc["paths"]["/vectors"]["post"]["responses"])
    assert "errors" in schemas["BatchResponse"]["required"]


@pytest.mark.parametrize(
    ("method", "url", "kwargs"),
    [
        ("get", "/most_similar", {"params": {"negative": "w1"}}),  # positive is required
        ("get", "/most_similar", {"params": {"positive": "w1", "negative": ","}}),
        ("get", "/vectors", {"params": [("words", "w1"), ("words", ",")]}),
        ("post", "/vectors?model=bad%20name", {"json": {"words": ["w1"], "model": "M"}}),
        ("post", "/most_similar", {"json": {"positive": [-1]}}),
        ("post", "/most_similar", {"json": {"positive": [{"vector": [7e4] * 16, "dtype": "<f2"}]}}),
        ("post", "/most_similar", {"json": {"positive": [[]]}}),
        ("post", "/most_similar/batch", {"json": {"queries": [{"positive": [True]}]}}),
        ("post", "/doesnt_match", {"json": {"words": ["w1"] * 1001}}),
    ],
)
def test_what_the_document_calls_invalid_is_a_422(client, method, url, kwargs):
    assert_error(getattr(client, method)(url, **kwargs), 422)


def test_what_the_document_calls_valid_is_answered(client):
    # "" is a word (TOKENS has none: a 404, not a 400 for "no input")
    assert_error(client.post("/most_similar", json={"negative": ""}), 404, "TokenNotFound")
    got = client.post("/most_similar", json={"positive": [3.0], "topn": 2}).json()
    want = client.post("/most_similar", json={"positive": [3], "topn": 2}).json()
    assert got["results"] == want["results"]  # JSON's 3.0 is the integer 3: a position
    huge = {"positive": [{"vector": [1e300] * 16}], "topn": 2}  # float32 overflows: NaN
    resp = client.post("/most_similar", json=huge)
    assert resp.status_code == 200, resp.text
    assert resp.json()["results"][0][1] is None, resp.text


def test_readyz_without_default_model(make_client, store):
    body = assert_error(make_client(default_model="NOPE").get("/readyz"), 503, "NotReady")
    assert "NOPE" in body["detail"]


def test_models(client, model):
    listed = client.get("/models").json()["models"]
    assert [m["name"] for m in listed] == ["M"]
    one = client.get("/models/M").json()
    assert (one["dim"], one["codec"], one["count"], one["generation"]) == (
        16,
        "f32",
        len(TOKENS),
        model.generation,
    )
    assert one["index"] == {"loaded": False}
    client.get("/most_similar", params={"positive": "w1"})
    one = client.get("/models/M").json()
    assert one["index"]["loaded"] and one["index"]["rows"] == len(TOKENS)
    assert_error(client.get("/models/NOPE"), 404, "ModelNotFound")
    assert_error(client.get("/models/bad name!"), 422, "InvalidModelName")


@pytest.mark.parametrize("show_paths", [False, True])
def test_models_show_file_names_not_server_paths(make_client, store, tmp_path, show_paths):
    """/models names where a model came from by its file name; the server's full paths
    (the source file, the snapshot) only with ``show_paths``."""
    from vecserve.loader import load_file

    from .helpers import write_w2v

    rng = np.random.default_rng(2)
    (tmp_path / "models").mkdir()
    path = write_w2v(tmp_path / "models" / "small.bin", TOKENS, rng.standard_normal((200, 8)))
    load_file(path, name="F", store=store, progress=False)
    client = make_client(default_model="F", show_paths=show_paths)
    client.get("/most_similar", params={"positive": "w1"})  # the snapshot is mapped
    listed = client.get("/models")
    one = client.get("/models/F")
    if show_paths:
        assert one.json()["source"] == listed.json()["models"][0]["source"] == str(path)
        assert one.json()["index"]["path"].startswith(str(tmp_path))
        return
    assert one.json()["source"] == listed.json()["models"][0]["source"] == "small.bin"
    assert one.json()["index"]["path"] and "/" not in one.json()["index"]["path"]
    assert str(tmp_path) not in listed.text + one.text


# -- /vectors in every format ----------------------------------------------------------------


def test_vectors_json_exact(client, vectors):
    r = client.get("/vectors", params={"words": "w3,café,missing1,日本"})
    body = r.json()
    assert r.headers["content-type"] == "application/json"
    assert body["words"] == ["w3", "café", "日本"] and body["missing"] == ["missing1"]
    got = np.asarray(body["vectors"], dtype=np.float32)
    np.testing.assert_array_equal(got, vectors[[3, 196, 198]])  # float32 shortest form: exact


def test_vectors_repeated_parameter(client, vectors):
    body = client.get("/vectors", params=[("words", "w1,w2"), ("words", "w3")]).json()
    assert body["words"] == ["w1", "w2", "w3"]
    np.testing.assert_array_equal(np.asarray(body["vectors"], "f4"), vectors[[1, 2, 3]])


def test_vectors_post_commas_and_policies(client, vectors):
    words = ["a,b", "nope", "w0"]
    omit = client.post("/vectors", json={"words": words}).json()
    assert omit["words"] == ["a,b", "w0"] and omit["missing"] == ["nope"]
    zeros = client.post("/vectors", json={"words": words, "missing": "zeros"}).json()
    assert zeros["words"] == words
    np.testing.assert_array_equal(
        np.asarray(zeros["vectors"], dtype=np.float32),
        np.stack([vectors[197], np.zeros(16, np.float32), vectors[0]]),
    )
    err = assert_error(
        client.post("/vectors", json={"words": words, "missing": "error"}), 404, "TokenNotFound"
    )
    assert err["missing"] == ["nope"] and err["model"] == "M"


@pytest.mark.parametrize("how", ["accept", "format"])
@pytest.mark.parametrize("policy", ["omit", "zeros"])
def test_vectors_binary_roundtrip(client, vectors, how, policy):
    words = ["w5", "zzz", "naïve", "w5"]
    params = {"words": ",".join(words), "missing": policy}
    headers = {}
    if how == "accept":
        headers["accept"] = "application/octet-stream"
    else:
        params["format"] = "binary"
    r = client.get("/vectors", params=params, headers=headers)
    assert r.headers["content-type"] == "application/octet-stream"
    n, dim = map(int, r.headers["x-vecserve-shape"].split(","))
    assert r.headers["x-vecserve-dtype"] == "<f4"
    got = np.frombuffer(r.content, dtype="<f4").reshape(n, dim)
    missing = [unquote(w) for w in r.headers["x-vecserve-missing"].split(",")]
    assert missing == ["zzz"] and r.headers["x-vecserve-missing-index"] == "1"
    rows = [5, 199, 5] if policy == "omit" else [5, None, 199, 5]
    want = np.stack([vectors[i] if i is not None else np.zeros(16, np.float32) for i in rows])
    np.testing.assert_array_equal(got, want)


def test_vectors_npy_roundtrip(client, vectors):
    r = client.post(
        "/vectors", json={"words": ["w1", "w2"]}, headers={"accept": "application/x-npy"}
    )
    assert r.headers["content-type"] == "application/x-npy"
    arr = np.load(io.BytesIO(r.content))
    assert arr.dtype == np.float32
    np.testing.assert_array_equal(arr, vectors[[1, 2]])


@pytest.mark.parametrize("codec", ["f16", "i8"])
def test_vectors_all_formats_agree_for_a_lossy_codec(make_client, store, vectors, codec):
    info = load_arrays(TOKENS, vectors, name="H", store=store, codec=codec, progress=False)
    client = make_client(default_model="H")
    words = ",".join(TOKENS[:50])
    decoded, _ = info.codec_obj.decode_values(store.fetch(info, TOKENS[:50]), 16)
    js = np.asarray(client.get("/vectors", params={"words": words}).json()["vectors"], "f4")
    raw = client.get("/vectors", params={"words": words, "format": "binary"}).content
    npy = np.load(
        io.BytesIO(client.get("/vectors", params={"words": words, "format": "npy"}).content)
    )
    for got in (js, np.frombuffer(raw, "<f4").reshape(50, 16), npy):
        np.testing.assert_array_equal(got, decoded)


def test_vectors_accept_negotiation(client):
    assert client.get("/vectors?words=w1", headers={"accept": "text/html,*/*;q=0.8"}).json()
    r = client.get(
        "/vectors?words=w1",
        headers={"accept": "application/json;q=0.5, application/octet-stream;q=0.9"},
    )
    assert r.headers["content-type"] == "application/octet-stream"
    assert_error(client.get("/vectors?words=w1", headers={"accept": "text/csv"}), 406)


# -- reload, limits, errors ------------------------------------------------------------------


def test_reload_is_picked_up_without_restart(client, store, vectors):
    before = client.get("/vectors", params={"words": "w1"}).json()
    sim_before = client.get("/most_similar", params={"positive": "w1", "topn": 3}).json()
    new = vectors[::-1].copy()
    info = load_arrays(TOKENS, new, name="M", store=store, progress=False)
    after = client.get("/vectors", params={"words": "w1"}).json()
    assert after["generation"] == info.generation > before["generation"]
    np.testing.assert_array_equal(np.asarray(after["vectors"], "f4")[0], new[1])
    sim_after = client.get("/most_similar", params={"positive": "w1", "topn": 3}).json()
    assert sim_after["generation"] == info.generation != sim_before["generation"]
    kv = _kv(TOKENS, new)
    assert [w for w, _ in sim_after["results"]] == [w for w, _ in kv.most_similar("w1", topn=3)]


def test_reload_seen_through_model_cache(make_client, model, store, vectors):
    """With a metadata TTL, words missing from a stale generation trigger a re-check."""
    client = make_client(model_ttl=3600)
    client.get("/vectors", params={"words": "w1"})
    info = load_arrays(TOKENS, vectors * 2, name="M", store=store, progress=False)
    body = client.get("/vectors", params={"words": "w1"}).json()
    assert body["generation"] == info.generation and body["missing"] == []


def test_limits(make_client, model):
    client = make_client(max_words=3, max_topn=5, max_body_bytes=2048)
    body = assert_error(client.get("/vectors", params={"words": "a,b,c,d"}), 422, "BadQuery")
    assert "limit is 3" in body["detail"]
    assert_error(client.get("/most_similar", params={"positive": "w1", "topn": 6}), 422)
    big = {"words": ["x" * 100] * 30}
    assert_error(client.post("/vectors", json=big), 413, "PayloadTooLarge")
    # the limits are the schema's (maxItems, maximum): past them the whole request is a 422
    wide = {"positive": ["w1", "w2", "w3", "w4"], "topn": 5}
    body = assert_error(client.post("/most_similar", json=wide), 422, "BadQuery")
    assert "4 positive items; the limit is 3" in body["detail"]
    ok = {"positive": ["w1"], "topn": 5}
    for bad in (
        wide,
        {"positive": ["w1"], "negative": ["w2"] * 4},
        {"positive": ["w1"], "topn": 6},
    ):
        batch = {"queries": [ok, bad]}
        body = assert_error(client.post("/most_similar/batch", json=batch), 422, "BadQuery")
        assert body["detail"].startswith("queries[1]: ")
    both = {"positive": ["w1", "w2", "w3"], "negative": ["w4", "w5", "w6"], "topn": 5}
    assert client.post("/most_similar", json=both).status_code == 200  # each list is within
    small_batch = {"queries": [{"positive": ["w1"]}] * 3}
    assert_error(make_client(max_batch=2).post("/most_similar/batch", json=small_batch), 422)


@pytest.mark.parametrize(
    ("method", "url", "kwargs"),
    [
        ("get", "/vectors", {}),
        ("get", "/vectors", {"params": {"words": ",,,"}}),
        ("post", "/vectors", {"json": {"words": []}}),
        ("post", "/vectors", {"json": {"words": "w1"}}),
        ("post", "/vectors", {"content": b"{not json", "headers": JSON_HEADERS}),
        ("post", "/vectors", {"json": {"words": ["w1"], "missing": "explode"}}),
        ("get", "/most_similar", {"params": {"positive": "w1", "topn": -1}}),
        ("get", "/most_similar", {"params": {"positive": "w1", "restrict_vocab": "x"}}),
        ("post", "/most_similar", {"json": {"positive": [[1.0, 2.0, 3.0]]}}),
        ("post", "/most_similar", {"json": {"positive": [{"vector": [1] * 16, "dtype": "i4"}]}}),
        ("post", "/most_similar", {"json": {"positive": [{"weird": 1}]}}),
        ("post", "/most_similar", {"json": {"positive": ["w1"], "cosmul": True, "negative": [3]}}),
        ("post", "/most_similar", {"json": {"positive": ["w1"], "unknown_field": 1}}),
        ("post", "/n_similarity", {"json": {"ws1": [], "ws2": ["w1"]}}),
        ("get", "/similarity", {"params": {"w1": "w1"}}),
        ("get", "/analogy", {"params": {"a": "w1", "b": "w2"}}),
        ("get", "/vectors", {"params": {"words": "w1", "model": "bad name"}}),
    ],
)
def test_malformed_input_is_422(client, method, url, kwargs):
    body = assert_error(getattr(client, method)(url, **kwargs), 422)
    assert body["detail"]


@pytest.mark.parametrize(
    ("method", "url", "kwargs", "error"),
    [
        ("get", "/vectors", {"params": {"words": "w1", "model": "NOPE"}}, "ModelNotFound"),
        ("get", "/similarity", {"params": {"w1": "w1", "w2": "nope"}}, "TokenNotFound"),
        ("get", "/most_similar", {"params": {"positive": "nope"}}, "TokenNotFound"),
        ("post", "/most_similar", {"json": {"positive": [100000]}}, "TokenNotFound"),
        ("get", "/doesnt_match", {"params": {"words": "x,y"}}, "TokenNotFound"),
        ("get", "/nowhere", {}, "HTTPError"),
    ],
)
def test_not_found_is_404(client, method, url, kwargs, error):
    assert_error(getattr(client, method)(url, **kwargs), 404, error)


def test_no_default_model_is_422(make_client, model):
    body = assert_error(make_client(default_model=None).get("/vectors?words=w1"), 422)
    assert "model=" in body["detail"]


@pytest.mark.parametrize(
    "body",
    [{"negative": ["w1"], "cosmul": True}, {}, {"positive": [], "negative": []}],
)
def test_queries_gensim_rejects_are_400(client, body):
    single = assert_error(client.post("/most_similar", json=body), 400, "ValueError")
    batch = {"queries": [{"positive": ["w1"]}, body]}
    slot = assert_slot_error(client.post("/most_similar/batch", json=batch), 1, "ValueError", 400)
    assert slot["detail"] == single["detail"]


def test_store_down_is_503_with_retry_after(tmp_path, vectors):
    from vecserve.embedded import ValkeyProcess
    from vecserve.store import Store

    server = ValkeyProcess(tmp_path / "srv", unixsocket=tmp_path / "srv.sock").start()
    try:
        store = Store.from_url(server.url)
        load_arrays(TOKENS, vectors, name="M", store=store, progress=False)
        store.close()
        settings = Settings(
            redis_url=server.url, default_model="M", cache_dir=tmp_path / "c", retry_after=7
        )
        with AppClient(create_app(settings)) as client:
            assert client.get("/vectors?words=w1").status_code == 200
            server.stop()
            for url in ["/vectors?words=w1", "/readyz", "/models", "/most_similar?positive=w1"]:
                r = client.get(url)
                body = assert_error(r, 503, "StoreUnavailable")
                assert r.headers["retry-after"] == "7"
                assert "unreachable" in body["detail"]
            assert client.get("/healthz").status_code == 200
            assert "vecserve_store_errors_total 4" in client.get("/metrics").text
    finally:
        server.stop()


def test_starts_while_store_is_down(tmp_path):
    url = f"unix://:secret@{tmp_path / 'nobody.sock'}"  # no server there
    with AppClient(create_app(Settings(redis_url=url, default_model="M"))) as client:
        assert client.get("/healthz").status_code == 200
        r = client.get("/readyz")
        body = assert_error(r, 503, "StoreUnavailable")
        assert "secret" not in body["detail"]


# -- metrics ---------------------------------------------------------------------------------


def test_metrics(client):
    client.get("/vectors?words=w1,w2")
    client.get("/vectors?words=w1,nope")
    client.get("/most_similar?positive=w1")
    client.get("/most_similar?positive=w2")
    client.get("/models/NOPE")
    text = client.get("/metrics").text
    assert 'vecserve_requests_total{endpoint="/vectors",method="GET",status="200"} 2' in text
    assert 'vecserve_requests_total{endpoint="/models/{name}",method="GET",status="404"} 1' in text
    assert 'vecserve_request_duration_seconds_count{endpoint="/most_similar"} 2' in text
    assert 'vecserve_cache_hits_total{cache="index"} 1' in text
    assert 'vecserve_index_build_seconds{model="M"}' in text
    assert "vecserve_vectors_served_total 3" in text
    assert "vecserve_words_missing_total 1" in text


# -- vector cache ----------------------------------------------------------------------------


def _cache_ready(client) -> bool:
    def ready():
        cache = client.get("/models/M").json()["vector_cache"]
        return cache is not None and cache["ready"]

    return wait_until(ready, timeout=5, interval=0.01, what="the vector cache")


def _series(text: str, name: str) -> float:
    line = next((x for x in text.splitlines() if x.startswith(name + " ")), None)
    return float(line.split()[-1]) if line is not None else 0.0


def test_vector_cache_serves_hot_words_and_hears_writes(make_client, model, store, vectors):
    client = make_client()
    url = "/vectors?words=w1,w2,nope&missing=zeros"
    client.get("/vectors?words=nope&missing=zeros")  # the model's cache starts listening
    assert _cache_ready(client)  # so that every request below is counted
    hits = 'vecserve_cache_hits_total{cache="vectors"}'
    misses = 'vecserve_cache_misses_total{cache="vectors"}'
    before = client.get("/metrics").text
    first = client.get(url, headers={"accept": OCTET_ACCEPT})
    # a word is admitted on its second miss (words seen once never churn the cache)
    for _ in range(3):
        r = client.get(url, headers={"accept": OCTET_ACCEPT})
        assert r.content == first.content and r.headers["x-vecserve-missing"] == "nope"
    text = client.get("/metrics").text
    assert _series(text, hits) - _series(before, hits) == 4  # w1, w2 on the 3rd and 4th
    assert _series(text, misses) - _series(before, misses) == 8  # 3 + 3 + nope + nope
    assert 'vecserve_vector_cache_entries{model="M"} 2' in text
    got = np.frombuffer(first.content, "<f4").reshape(3, 16)
    np.testing.assert_array_equal(got[:2], vectors[1:3])
    assert not got[2].any()
    assert client.get("/models/M").json()["vector_cache"]["size"] == 2

    # another client overwrites w1 in place: the cached copy is dropped, never served again
    key = store.vector_keys(model.prefix, ["w1"], model.buckets)[0]
    store.client.set(key, np.arange(16, dtype="<f4").tobytes())
    wait_until(
        lambda: client.get("/vectors?words=w1").json()["vectors"][0] == list(range(16)),
        timeout=5,
        interval=0.01,
        what="the new value of w1",
    )
    client.get("/vectors?words=w1")  # its second miss: the new value is cached
    assert client.get("/vectors?words=w1").json()["vectors"][0] == list(range(16))
    assert _series(client.get("/metrics").text, hits) > _series(text, hits)

    # a re-load: the very next answer is the new generation's, hot words included
    new = vectors * 3
    info = load_arrays(TOKENS, new, name="M", store=store, progress=False)
    body = client.get("/vectors?words=w2,w1").json()
    assert body["generation"] == info.generation
    np.testing.assert_array_equal(np.asarray(body["vectors"], "f4"), new[[2, 1]])


def test_vector_cache_off(make_client, model, vectors):
    client = make_client(vector_cache=0)
    for _ in range(3):
        body = client.get("/vectors?words=w3").json()
        np.testing.assert_array_equal(np.asarray(body["vectors"], "f4")[0], vectors[3])
    assert client.get("/models/M").json()["vector_cache"] is None
    assert 'cache="vectors"' not in client.get("/metrics").text


def test_no_vector_cache_for_unknown_models(client):
    for i in range(5):
        assert_error(client.get(f"/vectors?words=w1&model=NOPE{i}"), 404, "ModelNotFound")
    assert client.get("/models").status_code == 200
    assert not [t for t in threading.enumerate() if t.name.startswith("vecserve-cache")]


def _kv(tokens, vectors):
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vectors.shape[1], count=0)
    kv.add_vectors(list(tokens), np.asarray(vectors, dtype=np.float32))
    return kv


def test_json_uses_orjson_float32_shortest_form(client):
    raw = client.get("/vectors?words=w1").content
    first = orjson.loads(raw)["vectors"][0][0]
    assert len(repr(first)) <= 12  # float32 digits, not float64's 17


def test_default_store_is_the_embedded_server(tmp_path, monkeypatch):
    from vecserve.embedded import EmbeddedServer

    monkeypatch.delenv("VECSERVE_REDIS_URL", raising=False)
    settings = Settings(redis_url=None, data_dir=tmp_path / "data", default_model=None)
    server = EmbeddedServer(tmp_path / "data")
    try:
        with AppClient(create_app(settings)) as client:
            assert client.get("/readyz").json()["status"] == "ready"
            assert client.get("/models").json() == {"models": []}
        assert server.status() is not None  # stays up for the next command
    finally:
        server.stop()


def test_hung_store_times_out_as_503(tmp_path):
    """A server that accepts connections and never answers: bounded by redis_timeout."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    url = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    try:
        settings = Settings(redis_url=url, default_model="M", redis_timeout=0.3)
        with AppClient(create_app(settings)) as client:
            start = time.monotonic()
            assert_error(client.get("/vectors?words=w1"), 503, "StoreUnavailable")
            assert time.monotonic() - start < 10
            assert client.get("/healthz").status_code == 200
    finally:
        listener.close()


@pytest.mark.cluster
def test_on_redis_cluster(cluster_url, cluster_store, vectors, tmp_path):
    load_arrays(TOKENS, vectors, name="M", store=cluster_store, progress=False)
    settings = Settings(redis_url=cluster_url, default_model="M", cache_dir=tmp_path / "c")
    with AppClient(create_app(settings)) as client:
        words = TOKENS[:150] + ["nope"]
        r = client.post("/vectors", json={"words": words}, headers={"accept": OCTET_ACCEPT})
        got = np.frombuffer(r.content, "<f4").reshape(150, 16)
        np.testing.assert_array_equal(got, vectors[:150])
        assert r.headers["x-vecserve-missing"] == "nope"
        sims = client.get("/most_similar", params={"positive": "w1", "topn": 3}).json()
        assert [w for w, _ in sims["results"]] == [
            w for w, _ in _kv(TOKENS, vectors).most_similar("w1", topn=3)
        ]
        assert client.get("/readyz").status_code == 200


def test_store_calls_leave_the_event_loop_after_a_failure():
    import threading

    import anyio

    from vecserve.errors import StoreUnavailable
    from vecserve.service.deps import AppContext, ModelCache, StoreHandle
    from vecserve.service.metrics import Metrics

    m = Metrics()
    ctx = AppContext(
        settings=Settings(),
        stores=StoreHandle("redis://x"),
        metrics=m,
        models=ModelCache(ttl=1, metrics=m),
    )
    main = threading.get_ident()
    where = []

    def call(fail=False):
        where.append(threading.get_ident() == main)
        if fail:
            raise StoreUnavailable("down")
        return 1

    async def scenario():
        await ctx.run(call)  # not known healthy yet: pool thread
        await ctx.run(call)  # healthy: inline
        with pytest.raises(StoreUnavailable):
            await ctx.run(call, True)  # inline, fails
        await ctx.run(call)  # pool thread again, succeeds
        await ctx.run(call)  # inline again

    anyio.run(scenario)
    assert where == [False, True, True, False, True]
