"""The store against a real server: key layout, visibility, generations, resume, cluster."""

import json

import numpy as np
import pytest

from vecserve.codec import get_codec
from vecserve.errors import InvalidModelName, LoadInProgress, ModelNotFound, StoreUnavailable
from vecserve.store import LOADS, MODELS, Store, begin_load, cleanup_loads, validate_model_name


def vecs(n, dim=4, seed=0):
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


def load(store, name, tokens, vectors, codec="f32", **kw):
    s = begin_load(store, name, dim=vectors.shape[1], codec=codec, restart=True, **kw)
    s.write(tokens, vectors)
    return s.commit()


def test_keys_are_model_colon_token_with_raw_f32(store):
    v = vecs(2)
    info = load(store, "M", ["car", "λx"], v)
    assert info.prefix == "M" and info.generation == 1 and info.count == 2
    assert store.client.get("M:car") == v[0].astype("<f4").tobytes()
    assert store.client.get("M:λx".encode()) == v[1].astype("<f4").tobytes()
    assert store.vocab(info) == ["car", "λx"]
    meta = json.loads(store.client.hget(MODELS, "M"))
    assert meta["dim"] == 4 and meta["codec"] == "f32" and meta["count"] == 2


def test_nothing_is_visible_before_commit(store):
    s = begin_load(store, "M", dim=4, codec="f32")
    s.write(["a", "b"], vecs(2))
    with pytest.raises(ModelNotFound, match="unfinished") as err:
        store.get_model("M")
    assert isinstance(err.value, KeyError)
    assert store.list_models() == []
    [state] = store.list_loads()
    assert state.written == 2 and state.name == "M"
    info = s.commit()
    assert store.get_model("M") == info
    assert store.list_loads() == []


def test_reload_writes_a_new_generation_then_flips_and_deletes_the_old(store):
    first = load(store, "M", ["a", "b", "c"], vecs(3, seed=1))
    s = begin_load(store, "M", dim=4, codec="f16")
    new = vecs(2, seed=2)
    s.write(["a", "z"], new)
    # readers still see generation 1, untouched
    assert store.get_model("M") == first
    assert store.fetch(first, ["a", "c"])[1] is not None
    second = s.commit()
    assert second.generation == 2 and second.prefix == "M~2" and second.codec == "f16"
    assert store.get_model("M") == second
    # old generation fully gone, new one readable
    assert store.client.get("M:a") is None and store.client.get("M:c") is None
    assert not store.client.exists(first.vocab_key)
    raw = store.fetch(second, ["a", "z", "c"])
    out, found = get_codec("f16").decode_values(raw, 4)
    assert found.tolist() == [True, True, False]
    assert np.allclose(out[:2], new, atol=1e-2)
    # the third load goes back to the plain prefix, which is free again
    third = load(store, "M", ["q"], vecs(1))
    assert third.prefix == "M" and third.generation == 3


def test_interrupted_load_must_be_resumed_or_restarted(store):
    s = begin_load(store, "M", dim=4, codec="f32", fingerprint="f1")
    s.write(["a", "b"], vecs(2), resume={"offset": 10, "records": 2})
    s.lease.release()  # as if the process died and its lease expired
    with pytest.raises(LoadInProgress, match=r"pass --resume to continue it or --restart"):
        begin_load(store, "M", dim=4, codec="f32", fingerprint="f1")
    with pytest.raises(LoadInProgress, match="has changed"):
        begin_load(store, "M", dim=4, codec="f32", fingerprint="f2", resume=True)
    r = begin_load(store, "M", dim=4, codec="f32", fingerprint="f1", resume=True)
    assert r.written == 2 and r.resume_point == {"offset": 10, "records": 2}
    assert list(r.seen_tokens()) == ["a", "b"]
    r.write(["c"], vecs(1))
    info = r.commit()
    assert info.count == 3 and store.vocab(info) == ["a", "b", "c"]


def test_resume_rewinds_writes_that_outran_the_recorded_progress(store):
    s = begin_load(store, "M", dim=4, codec="f32")
    s.write(["a"], vecs(1), resume={"offset": 1, "records": 1})
    saved = s.state.to_json()
    s.write(["b"], vecs(1))  # written, but the crash "lost" its progress record
    store.client.hset(LOADS, "M", saved)
    s.lease.release()
    r = begin_load(store, "M", dim=4, codec="f32", resume=True)
    assert r.written == 1
    assert store.client.get("M:b") is None  # the unrecorded batch was removed
    assert store.client.llen("vecserve:vocab:M") == 1


def test_concurrent_load_of_the_same_model_is_refused(store):
    begin_load(store, "M", dim=4, codec="f32")
    with pytest.raises(LoadInProgress, match="is being loaded by"):
        begin_load(store, "M", dim=4, codec="f32", restart=True)


def test_delete_and_cleanup(store):
    info = load(store, "M", ["a", "b"], vecs(2))
    s = begin_load(store, "N", dim=4, codec="f32")
    s.write(["x"], vecs(1))
    s.lease.release()
    assert store.delete_model("M") == info
    with pytest.raises(ModelNotFound):
        store.get_model("M")
    assert store.client.dbsize() > 0
    done = cleanup_loads(store)
    assert any("N" in line for line in done)
    assert store.list_loads() == []
    remaining = {k for k in store.client.keys("*") if not k.startswith(b"vecserve:")}
    assert remaining == set()


def test_model_names_are_validated():
    assert validate_model_name("a.b-c_1") == "a.b-c_1"
    for bad in ["", "a:b", "a b", "x~2", "vecserve", "{x}", "-a"]:
        with pytest.raises(InvalidModelName):
            validate_model_name(bad)


def test_unreachable_server_is_store_unavailable(tmp_path):
    with pytest.raises(StoreUnavailable, match=r"redis://127.0.0.1:1 is unreachable"):
        Store.from_url("redis://127.0.0.1:1")


@pytest.mark.cluster
def test_closing_a_cluster_store_closes_every_nodes_connections(cluster_url):
    """Not one socket is left for the garbage collector (it would warn of it in
    whichever later test it happened to run)."""
    s = Store.from_url(cluster_url)
    s.client.mget_nonatomic([f"k{i}" for i in range(100)])  # a connection to every primary
    pools = [n.redis_connection.connection_pool for n in s.client.get_nodes() if n.redis_connection]
    assert any(c._sock is not None for p in pools for c in p._available_connections)
    s.close()
    assert [c for p in pools for c in p._available_connections if c._sock is not None] == []


@pytest.mark.cluster
def test_cluster_uses_bucket_hash_tags_and_round_trips(cluster_store):
    assert cluster_store.is_cluster
    tokens = [f"t{i}" for i in range(3000)]
    v = vecs(3000, dim=8)
    info = load(cluster_store, "C", tokens, v)
    assert info.buckets == 128
    key = Store.vector_keys("C", ["t0"], 128)[0]
    assert key.startswith(b"C:{") and cluster_store.client.get(key) is not None
    order = tokens[::-1] + ["missing"]
    out, found = get_codec("f32").decode_values(cluster_store.fetch(info, order), 8)
    assert found[:-1].all() and not found[-1]
    assert np.array_equal(out[:-1], v[::-1])
    # keys are spread over all three primaries
    nodes = cluster_store.client.get_primaries()
    sizes = [cluster_store.client.dbsize(target_nodes=n) for n in nodes]
    assert len(sizes) == 3 and min(sizes) > 300, sizes
    # re-load and delete work across nodes too
    load(cluster_store, "C", tokens[:10], v[:10])
    cluster_store.delete_model("C")
    left = cluster_store.client.dbsize(target_nodes="primaries")
    assert left <= 2  # only vecserve:generation (and possibly an empty trash set)
