"""Redis Cluster failover (3 primaries + 3 replicas of valkey-server): readers carry on
after the promotion, and the client-side caches come back on the new topology."""

from __future__ import annotations

import time

import numpy as np
import pytest
import redis

from tests.api_support import AppClient
from vecserve.errors import StoreUnavailable
from vecserve.keyedvectors import RedisKeyedVectors
from vecserve.loader import load_arrays
from vecserve.store import Store

from .conftest import start_cluster

pytestmark = pytest.mark.cluster

WORDS = [f"w{i}" for i in range(400)]


@pytest.fixture
def replicated(tmp_path):
    nodes = start_cluster(tmp_path, 3, replicas=True, node_timeout=2000)
    try:
        yield nodes
    finally:
        for p in nodes:
            p.stop()


def _kill_a_primary(nodes) -> int:
    """SIGKILL the primary serving the most slots that is not the URL's node."""
    victim = nodes[1]
    victim.kill()
    return victim.port


def _until(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    errors = 0
    while True:
        try:
            out = fn()
            if out:
                return out, errors
        except StoreUnavailable:
            errors += 1
        assert time.monotonic() < deadline, f"{what} within {timeout}s ({errors} errors)"
        time.sleep(0.05)


def test_cache_and_reads_come_back_after_a_failover(replicated):
    url = f"redis://127.0.0.1:{replicated[0].port}"
    vectors = np.random.default_rng(0).standard_normal((len(WORDS), 8)).astype(np.float32)
    store = Store.from_url(url)
    load_arrays(WORDS, vectors, name="F", store=store)
    kv = RedisKeyedVectors("F", redis_url=url, cache=1000)
    try:
        cache = kv._get_cache()
        assert cache.wait_ready(10)
        np.testing.assert_array_equal(kv[WORDS], vectors)
        assert len(cache) == len(WORDS)

        _kill_a_primary(replicated)
        t0 = time.monotonic()
        # reads fail (StoreUnavailable) only during the failover window, then are right
        _until(lambda: np.array_equal(kv[WORDS], vectors) or None, 30, "reads")
        _until(lambda: cache.ready, 30, "the cache tracking again")
        assert time.monotonic() - t0 < 30
        # redis-py may still route a slot to the dead node until gossip settles: a clear
        # StoreUnavailable, then right answers; the cache refills and serves them
        _until(lambda: np.array_equal(kv[WORDS], vectors) or None, 30, "steady reads")
        _until(lambda: len(cache) == len(WORDS) and cache.ready, 30, "a refilled cache")
        np.testing.assert_array_equal(kv[WORDS], vectors)

        # no stale vector after the failover: a reload is seen at once
        _until(lambda: load_arrays(WORDS, vectors * 2, name="F", redis_url=url), 30, "a reload")
        _until(lambda: np.array_equal(kv[WORDS], vectors * 2), 10, "the reload")
    finally:
        kv.close()
        store.close()


def test_service_cache_comes_back_after_a_failover(replicated, tmp_path):
    from vecserve.api import create_app
    from vecserve.service.settings import Settings

    url = f"redis://127.0.0.1:{replicated[0].port}"
    vectors = np.random.default_rng(1).standard_normal((len(WORDS), 8)).astype(np.float32)
    load_arrays(WORDS, vectors, name="F", redis_url=url)
    app = create_app(Settings(redis_url=url, default_model="F", cache_dir=tmp_path))
    with AppClient(app) as client:
        body = {"words": WORDS[:50]}
        assert client.post("/vectors", json=body).status_code == 200
        _kill_a_primary(replicated)
        codes = []
        deadline = time.monotonic() + 30
        while True:
            r = client.post("/vectors", json=body)
            codes.append(r.status_code)
            if r.status_code == 200:
                stats = client.get("/models/F").json().get("vector_cache") or {}
                if stats.get("ready"):
                    break
            else:
                assert r.status_code == 503 and "retry-after" in r.headers
            assert time.monotonic() < deadline, f"no recovery: {codes[-5:]}"
            time.sleep(0.05)
        got = np.asarray(client.post("/vectors", json=body).json()["vectors"], np.float32)
        np.testing.assert_array_equal(got, vectors[:50])
    with pytest.raises(redis.ConnectionError):
        redis.Redis(port=replicated[1].port, socket_connect_timeout=0.5).ping()
