"""The tracked client-side cache never serves a stale vector (real servers only)."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import redis

from vecserve.embedded import ValkeyProcess
from vecserve.keyedvectors import RedisKeyedVectors
from vecserve.loader import load_arrays
from vecserve.store import Store

from .helpers import wait_until


def cached_kv(store, **kw) -> RedisKeyedVectors:
    kv = RedisKeyedVectors("M", store=store, cache=kw.pop("cache", 100), **kw)
    kv.get_vector("a", missing="zeros")  # connects and starts the listener
    assert kv._cache.wait_ready(5)
    return kv


def test_hit_needs_no_server(store):
    load_arrays(["a", "b"], np.eye(2), name="M", store=store)
    kv = cached_kv(store)
    kv[["a", "b"]]
    assert len(kv._cache) == 2
    calls = []
    real = store.execute
    store.execute = lambda rnd: calls.append(rnd) or real(rnd)
    try:
        assert kv["a"].tolist() == [1.0, 0.0]
        assert kv[["b", "a"]].tolist() == [[0.0, 1.0], [1.0, 0.0]]
        assert "b" in kv
    finally:
        del store.execute
    assert calls == []
    assert not kv["a"].flags.writeable
    kv.close()


def test_lru_bound(store):
    tokens = [f"w{i}" for i in range(50)]
    load_arrays(tokens, np.eye(50), name="M", store=store)
    kv = cached_kv(store, cache=10)
    for t in tokens:
        kv[t]
    assert len(kv._cache) == 10 and list(kv._cache.data) == tokens[-10:]
    kv.close()


def test_another_clients_write_invalidates(store):
    info = load_arrays(["a", "b"], np.eye(2), name="M", store=store)
    kv = cached_kv(store)
    assert kv["b"].tolist() == [0.0, 1.0] and "b" in kv._cache.data
    other = redis.Redis.from_url(store.url)
    key = Store.vector_keys(info.prefix, ["b"])[0]
    other.set(key, np.array([5, 6], dtype="<f4").tobytes())
    wait_until(lambda: "b" not in kv._cache.data, timeout=5, interval=0.005)
    assert kv["b"].tolist() == [5.0, 6.0]
    assert kv._cache.stats()["invalidations"] >= 1
    other.close()
    kv.close()


def test_reload_flushes_once_without_per_key_flood(store):
    tokens = [f"w{i}" for i in range(2000)]
    load_arrays(tokens, np.ones((2000, 4)), name="M", store=store)
    kv = cached_kv(store, cache=5000)
    kv[tokens[:100]]
    gen = kv._cache.generation
    load_arrays(tokens, 2 * np.ones((2000, 4)), name="M", store=store)
    wait_until(
        lambda: kv._cache.ready and kv._cache.generation == gen + 1, timeout=5, interval=0.005
    )
    assert kv[tokens[0]].tolist() == [2.0] * 4
    assert kv[tokens[:100]].tolist() == [[2.0] * 4] * 100
    # the new generation's 2000 writes were not tracked: no per-key invalidations
    assert kv._cache.stats()["invalidations"] < 100
    kv.close()


def test_server_restart_never_serves_stale(tmp_path):
    sock = tmp_path / "srv.sock"
    server = ValkeyProcess(tmp_path / "srv", unixsocket=sock).start()
    try:
        store = Store.from_url(server.url)
        load_arrays(["a", "b"], np.eye(2), name="M", store=store)
        kv = cached_kv(store)
        assert kv["a"].tolist() == [1.0, 0.0] and "a" in kv._cache.data
        server.kill()
        wait_until(lambda: not kv._cache.ready and len(kv._cache) == 0, timeout=5, interval=0.005)
        server = ValkeyProcess(tmp_path / "srv", unixsocket=sock).start()
        # the restarted server lost everything; a new model with other values appears
        fresh = Store.from_url(server.url)
        load_arrays(["a", "b"], 3 * np.eye(2), name="M", store=fresh)
        wait_until(lambda: kv._cache.ready, timeout=10, interval=0.005)
        assert kv["a"].tolist() == [3.0, 0.0]
        fresh.close()
        kv.close()
        store.close()
    finally:
        server.stop()


def test_fills_racing_an_invalidation_are_dropped(store):
    load_arrays(["a"], np.eye(1), name="M", store=store)
    kv = cached_kv(store)
    cache = kv._cache
    ticket = cache.ticket()
    cache.flush()  # what an invalidation does between the read and the fill
    assert not cache.fill(ticket, cache.generation, ["a"], np.ones((1, 1)), np.ones(1, bool))
    assert "a" not in cache.data
    kv.close()


def test_get_many_trusts_no_hit_read_across_an_invalidation(store):
    load_arrays(["a", "b"], np.eye(2), name="M", store=store)
    kv = cached_kv(store)
    kv[["a", "b"]]
    cache = kv._cache
    ticket, hits = cache.get_many(["a", "b", "c"])
    assert ticket == cache.ticket() and hits[2] is None
    assert [h.tolist() for h in hits[:2]] == [[1.0, 0.0], [0.0, 1.0]]

    class Racing(OrderedDict):
        def get(self, key, default=None):
            out = super().get(key, default)
            cache._invalidate([b"M:zzz"])  # another client's write lands mid-lookup
            return out

    cache.data = Racing(cache.data)
    assert cache.get_many(["a", "b"]) == (None, [None, None])
    kv.close()


def test_reader_never_mixes_generations(store, monkeypatch):
    """Hits of one generation are dropped when the misses come back from another."""
    import dataclasses

    from vecserve.reader import Lookup

    info = load_arrays(["a", "b"], np.eye(2), name="M", store=store)
    kv = cached_kv(store)
    kv["a"]  # cached, generation info.generation
    reader = kv._reader
    newer = dataclasses.replace(info, generation=info.generation + 1)
    asked = []

    def fetch(_, tokens, *, ticket=None):  # a re-load committed before this MGET
        asked.append(list(tokens))
        rows = np.full((len(tokens), 2), 7.0, dtype=np.float32)
        return Lookup(newer, rows, np.ones(len(tokens), dtype=bool), [], 0)
        yield  # steps, like the real one

    monkeypatch.setattr(reader, "_fetch_steps", fetch)
    got = store.run(reader.lookup_steps(["a", "b"]))
    assert asked == [["b"], ["a", "b"]] and got.info is newer and got.hits == 0
    assert got.rows.tolist() == [[7.0, 7.0], [7.0, 7.0]] and got.found.all()
    assert "b" not in kv._cache.data  # nothing of the other generation was filled

    # every word a hit, but the registry has moved on: fetched, not served from the cache
    def registry(*, fresh=False, known=False):
        return newer
        yield

    asked.clear()
    with monkeypatch.context() as m:
        m.setattr(reader, "info_steps", registry)
        got = store.run(reader.lookup_steps(["a"]))
    assert asked == [["a"]] and got.info is newer and got.hits == 0
    # every word a hit of the current generation: no fetch at all
    asked.clear()
    reader.remember(info)
    got = store.run(reader.lookup_steps(["a", "a"]))
    assert asked == [] and got.hits == 2 and got.rows.tolist() == [[1.0, 0.0], [1.0, 0.0]]
    kv.close()


def test_doorkeeper_admits_a_word_on_its_second_miss(store):
    from vecserve.cache import VectorCache, tracking_nodes

    load_arrays(["a", "b"], np.eye(2), name="M", store=store)
    cache = VectorCache(
        1,
        nodes=tracking_nodes(store.client),
        read_registry=lambda: store.registry_entry("M"),
        admit_on_repeat=True,
    )
    assert cache.wait_ready(5)
    rows, found = np.eye(2, dtype=np.float32), np.ones(2, dtype=bool)

    def fill(tokens):
        assert cache.fill(cache.ticket(), cache.generation, tokens, rows[: len(tokens)], found)

    fill(["a", "b"])  # first misses: remembered (the doorkeeper holds maxsize=1: b), not cached
    assert len(cache) == 0 and list(cache.doorkeeper) == ["b"]
    fill(["b"])  # b's second miss: admitted
    assert list(cache.data) == ["b"] and not cache.doorkeeper
    fill(["a"])  # a was forgotten: a first miss again
    assert list(cache.data) == ["b"] and list(cache.doorkeeper) == ["a"]
    cache.close()


def test_model_deleted_disables_cache(store):
    load_arrays(["a"], np.eye(1), name="M", store=store)
    kv = cached_kv(store)
    store.delete_model("M")
    wait_until(lambda: not kv._cache.ready and len(kv._cache) == 0, timeout=5, interval=0.005)
    with pytest.raises(KeyError):
        kv["a"]
    kv.close()


@pytest.mark.cluster
def test_cluster_cache_hears_every_node(cluster_store):
    tokens = [f"w{i}" for i in range(64)]
    info = load_arrays(tokens, np.eye(64), name="M", store=cluster_store)
    kv = cached_kv(cluster_store)
    kv[tokens]
    assert len(kv._cache) == 64
    keys = Store.vector_keys(info.prefix, tokens, info.buckets)
    for k in keys:  # touch every key: they live on all three nodes
        cluster_store.client.set(k, np.zeros(64, dtype="<f4").tobytes())
    wait_until(lambda: len(kv._cache) == 0, timeout=5, interval=0.005)
    assert kv[tokens[5]].tolist() == [0.0] * 64
    load_arrays(tokens, 2 * np.eye(64), name="M", store=cluster_store)
    wait_until(
        lambda: kv._cache.ready and kv._cache.generation == info.generation + 1,
        timeout=5,
        interval=0.005,
    )
    assert kv[tokens[5]][5] == 2.0
    kv.close()
