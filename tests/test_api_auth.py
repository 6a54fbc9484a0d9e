"""API keys and TLS for the HTTP service, against real servers."""

from __future__ import annotations

import logging
import shutil
import ssl
import subprocess
import sys

import httpx
import numpy as np
import pytest

from tests.api_support import AppClient, serving
from tests.helpers import argv
from vecserve.api import create_app
from vecserve.errors import SimilarityServiceError, VecserveError
from vecserve.keyedvectors import RedisKeyedVectors
from vecserve.loader import load_arrays
from vecserve.service.auth import key_matches
from vecserve.service.settings import Settings

KEYS = "k-alpha-1,k-beta-2"
WORDS = ["king", "queen", "man", "woman"]


@pytest.fixture
def model(store):
    vectors = np.random.default_rng(3).standard_normal((len(WORDS), 6)).astype(np.float32)
    load_arrays(WORDS, vectors, name="M", store=store)
    return vectors


@pytest.fixture
def client(redis_url, model, tmp_path, app_client):
    settings = Settings(redis_url=redis_url, default_model="M", api_keys=KEYS, cache_dir=tmp_path)
    return app_client(create_app(settings))


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def test_health_is_open_everything_else_needs_a_key(client, caplog):
    caplog.set_level(logging.DEBUG)
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code != 401
    for path in [
        "/vectors?words=king",
        "/models",
        "/models/M",
        "/metrics",
        "/openapi.json",
        "/most_similar?positive=king",
        "/docs",
        "/nowhere",
    ]:
        r = client.get(path)
        assert r.status_code == 401, path
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"] == "Unauthorized"
        wrong = client.get(path, headers=bearer("k-alpha-2"))
        assert wrong.status_code == 401
        assert wrong.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    assert client.post("/vectors", json={"words": ["king"]}).status_code == 401
    ok = client.get("/vectors?words=king", headers=bearer("k-beta-2"))
    assert ok.status_code == 200 and ok.json()["words"] == ["king"]
    ok = client.post("/vectors", json={"words": ["king"]}, headers=bearer("k-alpha-1"))
    assert ok.status_code == 200
    assert client.get("/metrics", headers={"Authorization": "Basic k-alpha-1"}).status_code == 401
    metrics = client.get("/metrics", headers=bearer("k-alpha-1")).text
    for secret in ("k-alpha-1", "k-beta-2", "k-alpha-2"):
        assert secret not in caplog.text and secret not in metrics


def test_openapi_declares_the_bearer_scheme(client):
    doc = client.get("/openapi.json", headers=bearer("k-alpha-1")).json()
    assert doc["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert doc["paths"]["/vectors"]["get"]["security"] == [{"bearerAuth": []}]
    assert "security" not in doc["paths"]["/healthz"]["get"]


@pytest.mark.parametrize("api_keys", [KEYS, None])
def test_metrics_key_opens_metrics_only(redis_url, model, tmp_path, app_client, api_keys):
    """A Prometheus scrape's key reads /metrics and nothing else; with no API key the
    rest stays open and /metrics alone needs a key."""
    settings = Settings(
        redis_url=redis_url,
        default_model="M",
        api_keys=api_keys,
        metrics_keys="m-prom-1",
        cache_dir=tmp_path,
    )
    client = app_client(create_app(settings))
    r = client.get("/metrics", headers=bearer("m-prom-1"))
    assert r.status_code == 200 and "vecserve_requests_total" in r.text
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=bearer("m-prom-2")).status_code == 401
    denied = client.get("/vectors?words=king", headers=bearer("m-prom-1"))
    if api_keys:
        assert denied.status_code == 403, denied.text
        assert denied.json() == {"error": "Forbidden", "detail": "this key opens /metrics only"}
        assert client.get("/metrics", headers=bearer("k-beta-2")).status_code == 200
    else:
        assert denied.status_code == 200 and client.get("/models").status_code == 200
    assert client.get("/healthz").status_code == 200


def test_keys_file(redis_url, model, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("# ops team\nfile-key-1\n\n  file-key-2  \n")
    app = create_app(Settings(redis_url=redis_url, default_model="M", api_keys_file=keys))
    with AppClient(app) as c:
        assert c.get("/vectors?words=king", headers=bearer("file-key-2")).status_code == 200
        assert c.get("/vectors?words=king", headers=bearer("# ops team")).status_code == 401
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    with pytest.raises(VecserveError, match="holds no key"):
        create_app(Settings(api_keys_file=empty))


def test_key_comparison_checks_every_key():
    keys = [b"a" * 32, b"b" * 32]
    assert key_matches(keys, "b" * 32) and not key_matches(keys, "b" * 31)
    assert not key_matches(keys, "") and not key_matches([], "a" * 32)


def test_redis_keyed_vectors_sends_its_key(
    store, model, live_server, redis_url, tmp_path, monkeypatch
):
    settings = Settings(redis_url=redis_url, api_keys=KEYS, cache_dir=tmp_path / "s")
    url = live_server(create_app(settings))
    kv = RedisKeyedVectors("M", store=store, similarity_url=url, api_key="k-beta-2")
    assert kv.most_similar("king", topn=2)[0][0] in WORDS
    monkeypatch.setenv("VECSERVE_API_KEY", "k-alpha-1")
    assert RedisKeyedVectors("M", store=store, similarity_url=url).most_similar("queen")
    monkeypatch.delenv("VECSERVE_API_KEY")
    with pytest.raises(SimilarityServiceError, match="HTTP 401") as info:
        RedisKeyedVectors("M", store=store, similarity_url=url).most_similar("king")
    assert info.value.status == 401


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_serve_over_tls_with_keys(redis_url, model, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        argv(
            "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1"
            " -addext subjectAltName=IP:127.0.0.1 -keyout {} -out {}",
            key,
            cert,
        ),
        check=True,
        capture_output=True,
    )
    keys = tmp_path / "keys.txt"
    keys.write_text("tls-key\n")
    args = argv(
        "--redis-url {} --default-model M --log-level info --api-keys-file {}"
        " --ssl-certfile {} --ssl-keyfile {}",
        redis_url,
        keys,
        cert,
        key,
    )
    trust = ssl.create_default_context(cafile=str(cert))
    with serving(args, tmp_path, verify=trust) as (base, log):
        assert base.startswith("https://")
        r = httpx.get(f"{base}/vectors?words=king", verify=trust)
        assert r.status_code == 401
        r = httpx.get(f"{base}/vectors?words=king", verify=trust, headers=bearer("tls-key"))
        assert r.status_code == 200 and r.json()["words"] == ["king"]
        with pytest.raises(httpx.HTTPError):  # plain HTTP is not served
            httpx.get(base.replace("https://", "http://") + "/healthz", timeout=2)
    assert "tls-key" not in log.read_text()


def test_serve_refuses_a_bad_keys_file_in_one_line(tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("\n")
    proc = subprocess.run(
        [sys.executable, "-m", "vecserve.cli", "serve", "--api-keys-file", str(keys)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "holds no key" in proc.stderr
