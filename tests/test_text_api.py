"""``POST /embed`` / ``GET /embed`` on the real app, and ``vecserve embed`` on the real CLI.

The model is WordLlama's shipped table and tokenizer (loaded from the ``wordllama``
package's directory) and a word2vec model of gensim's test data; answers are compared
with ``kv.embed`` (itself checked against the libraries in ``test_text_static.py``).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vecserve.api import create_app
from vecserve.keyedvectors import RedisKeyedVectors
from vecserve.loader import load_arrays, load_file
from vecserve.service.settings import Settings
from vecserve.text.embed import MAX_TEXTS

from .helpers import gensim_data

wordllama = pytest.importorskip("wordllama")
WL_DIR = Path(wordllama.__file__).parent
JSON_TYPE = {"content-type": "application/json"}
TEXTS = ["the cat sat on the mat", "", "Zürich — naïve café", "one more sentence here"]


@pytest.fixture
def client(redis_url, store, tmp_path, app_client):
    load_file(WL_DIR, name="WL", store=store, progress=False)
    load_arrays(["a", "b"], np.eye(2, dtype=np.float32), name="PLAIN", store=store, progress=False)
    settings = Settings(
        redis_url=redis_url, default_model="WL", cache_dir=tmp_path / "c", model_ttl=0
    )
    return app_client(create_app(settings))


def _want(store, texts, **kw):
    with RedisKeyedVectors("WL", store=store) as kv:
        return kv.embed(texts, **kw)


def test_post_embed_json_and_binary(client, store):
    want = _want(store, TEXTS)
    r = client.post("/embed", json={"model": "WL", "texts": TEXTS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["model"], body["dim"]) == ("WL", 256)
    assert np.array_equal(np.asarray(body["vectors"], np.float32), want.vectors)
    assert body["tokens"] == want.used.tolist() and body["tokens"][1] == 0
    assert body["unknown"] == [0, 0, 0, 0]

    r = client.post("/embed?format=binary", json={"texts": TEXTS, "normalize": True, "dims": 64})
    assert r.headers["x-vecserve-shape"] == "4,64"
    got = np.frombuffer(r.content, "<f4").reshape(4, 64)
    assert np.array_equal(got, _want(store, TEXTS, normalize=True, dims=64).vectors)
    assert r.headers["x-vecserve-tokens"] == ",".join(map(str, want.used.tolist()))

    r = client.post("/embed", json={"texts": TEXTS}, headers={"accept": "application/x-npy"})
    assert np.array_equal(np.load(io.BytesIO(r.content)), want.vectors)


def test_get_embed_one_text_and_metrics(client, store):
    r = client.get("/embed", params={"text": TEXTS[0]})
    assert r.status_code == 200, r.text
    assert np.array_equal(
        np.asarray(r.json()["vectors"], np.float32), _want(store, TEXTS[:1]).vectors
    )
    client.post("/embed", json={"texts": TEXTS})
    metrics = client.get("/metrics").text
    tokens = int(_want(store, TEXTS).used.sum()) + int(_want(store, TEXTS[:1]).used.sum())
    assert "vecserve_texts_embedded_total 5.0" in metrics
    assert f"vecserve_text_tokens_total {float(tokens)}" in metrics


@pytest.mark.parametrize(
    ("request_kw", "status", "detail"),
    [
        ({"json": {"texts": ["x"] * (MAX_TEXTS + 1)}}, 400, "texts in one batch"),
        ({"json": {"texts": ["x"], "dims": 300}}, 400, "dims must be 1..256"),
        ({"json": {"texts": "not a list"}}, 422, ""),
        ({"json": {"texts": [3]}}, 422, ""),
        ({"content": b'{"texts": ["\xff"]}', "headers": JSON_TYPE}, 400, "parsing the body"),
        ({"json": {"model": "NOPE", "texts": ["x"]}}, 404, ""),
        ({"content": b"x" * (11 << 20)}, 413, ""),
    ],
)
def test_bad_input_is_one_json_4xx(client, request_kw, status, detail):
    r = client.post("/embed", **request_kw)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert detail in r.json()["detail"] if detail else "detail" in r.json()


def test_a_model_without_a_tokenizer_is_400(client, store):
    from vecserve.store.layout import MODELS

    entry = json.loads(store.client.hget(MODELS, "PLAIN"))
    del entry["text"]
    store.client.hset(MODELS, "PLAIN", json.dumps(entry))
    r = client.post("/embed", json={"model": "PLAIN", "texts": ["a b"]})
    assert r.status_code == 400 and "no recorded tokenizer" in r.json()["detail"]


def _vecserve(*args, stdin: bytes | None = None, url: str):
    return subprocess.run(
        [sys.executable, "-m", "vecserve.cli", *args, "--redis-url", url],
        input=stdin,
        capture_output=True,
        timeout=120,
    )


def test_cli_embed(redis_url, store):
    path = gensim_data("EN.1-10.cbow1_wind5_hs0_neg10_size300_smpl1e-05.txt")
    load_file(path, name="W2V", store=store, progress=False)
    done = _vecserve("embed", "dog and cat", "zzqx", "--key", "W2V", url=redis_url)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(x) for x in done.stdout.decode().splitlines()]
    with RedisKeyedVectors("W2V", store=store) as kv:
        want = kv.embed(["dog and cat", "zzqx"])
    assert [x["tokens"] for x in lines] == [2, 0] and [x["unknown"] for x in lines] == [1, 1]
    assert np.array_equal(np.asarray(lines[0]["vector"], np.float32), want.vectors[0])

    bad = _vecserve("embed", "--stdin", "--key", "W2V", stdin=b"ok\n\xff\n", url=redis_url)
    assert bad.returncode == 1 and bad.stdout == b""
    assert bad.stderr.decode().strip() == ("Error: standard input is not UTF-8: line 2, byte 3")
    loaded = _vecserve("load", str(WL_DIR), "--key", "WLC", url=redis_url)
    assert loaded.returncode == 0, loaded.stderr
    assert "32,000 vectors x 256 (f32, wordllama)" in loaded.stdout.decode()
    one = _vecserve("embed", "the cat sat", "--key", "WLC", "--dims", "64", url=redis_url)
    row = json.loads(one.stdout)
    with RedisKeyedVectors("WLC", store=store) as kv:
        assert np.array_equal(
            np.asarray(row["vector"], np.float32), kv.embed(["the cat sat"], dims=64).vectors[0]
        )
    nope = _vecserve("embed", "x", "--key", "NOPE", url=redis_url)
    assert nope.returncode == 1 and len(nope.stderr.decode().strip().splitlines()) == 1
