"""A model is whole, or says it is not: servers out of memory, evicting keys, read-only,
refusing writes. Every server here is a real valkey-server the test starts and configures
(``maxmemory``, policies, ACL users, ``replicaof``, an unwritable dir, a slow RDB load).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import redis

from tests.helpers import argv, start_valkey, wait_until
from vecserve.acl import setuser_line
from vecserve.embedded import ValkeyProcess
from vecserve.errors import (
    AuthenticationFailed,
    LoadIncomplete,
    ModelDamaged,
    OutOfMemory,
    ServerRefused,
    StoreUnavailable,
    TooManyClients,
    VecserveError,
)
from vecserve.keyedvectors import RedisKeyedVectors
from vecserve.loader import load_arrays, load_file
from vecserve.store import RowCheck, Store, begin_load
from vecserve.store.facts import KeyspaceFacts
from vecserve.store.layout import LOADS, vocab_hashes_key, vocab_key, vocab_sizes_key
from vecserve.store.session import LoadSession

from .api_support import run_vecserve
from .helpers import write_w2v

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def valkey(tmp_path):
    """``valkey(**config)``: a started valkey-server, stopped after the test."""
    started = []

    def start(name: str = "v", **config) -> ValkeyProcess:
        conf = {k.replace("_", "-"): str(v) for k, v in config.items()}
        p = start_valkey(tmp_path / name, conf)  # TCP: some tests replicate
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()


@pytest.fixture
def model_file(tmp_path):
    """A 20,000 x 50 word2vec file (about 6 MB in Redis as f32), and its arrays."""
    rng = np.random.default_rng(3)
    tokens = [f"w{i}" for i in range(20_000)]
    vectors = rng.standard_normal((20_000, 50)).astype(np.float32)
    return write_w2v(tmp_path / "m.bin", tokens, vectors), tokens, vectors


def cli(url: str, *args: str):
    return run_vecserve(*args, env={**os.environ, "VECSERVE_REDIS_URL": url}, check=False)


def error_line(proc) -> str:
    """The command's error: exactly one line, no traceback."""
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def assert_whole(url: str, tokens, vectors) -> None:
    store = Store.from_url(url)
    try:
        info = store.get_model("M")
        assert info.count == len(tokens)
        assert store.check_rows(info).missing == 0
        _, rows, found = store.read_rows(info, tokens)
        assert found.all() and np.array_equal(rows, vectors)
    finally:
        store.close()


# -- out of memory ----------------------------------------------------------------------


def test_a_model_that_cannot_fit_is_refused_before_anything_is_written(valkey, model_file):
    path, _, _ = model_file
    p = valkey(maxmemory="4mb", maxmemory_policy="noeviction")
    line = error_line(cli(p.url, "load", str(path), "--key", "M"))
    assert "'M' needs about 6.2 MB in Redis (20,000 vectors x 50 f32)" in line
    assert "free" in line and "CONFIG SET maxmemory" in line and "--codec f16" in line
    r = redis.Redis(port=p.port)
    assert not r.hgetall("vecserve:models") and not r.hgetall("vecserve:loads")
    assert r.dbsize() == 0  # nothing written, not even a lease


def test_out_of_memory_stops_the_load_in_one_line_and_resume_makes_it_whole(valkey, model_file):
    """INFO refused to the loader (no pre-flight): the writer's own reply check stops the
    load at the first refused batch, nothing is visible, and the resume point is the last
    batch that was whole; after the limit is raised, --resume commits every vector."""
    path, tokens, vectors = model_file
    p = valkey(maxmemory="4mb", maxmemory_policy="noeviction")
    admin = redis.Redis(port=p.port)
    line = setuser_line("loader", user="l", model="M", password="pw") + " -info"
    admin.execute_command(*line.split())
    url = f"redis://l:pw@127.0.0.1:{p.port}/0"
    proc = cli(url, "load", str(path), "--key", "M", "--batch-size", "1000")
    assert "pre-flight check skipped: the Redis user may not run INFO" in proc.stderr
    err = error_line(proc)
    assert "is out of memory (maxmemory reached" in err and "(OOM: " in err
    assert "nothing is visible" in err and "--resume" in err
    store = Store.from_url(p.url)
    assert store.list_models() == []
    state = store.get_load("M")
    assert 0 < state.written < 20_000 and state.written % 1000 == 0
    # the recorded progress never passes a refused write: every recorded row is there
    assert store.check_rows(store_info(store, state)).missing == 0
    admin.config_set("maxmemory", "0")
    proc = cli(url, "load", str(path), "--key", "M", "--resume", "--batch-size", "1000")
    assert proc.returncode == 0, proc.stderr
    assert "committed" in proc.stdout
    store.close()
    assert_whole(p.url, tokens, vectors)


def store_info(store: Store, state):
    from vecserve.store.layout import ModelInfo

    return ModelInfo(
        name=state.name,
        dim=state.dim,
        codec=state.codec,
        count=state.written,
        generation=state.generation,
        prefix=state.prefix,
        buckets=state.buckets,
    )


def test_a_refused_write_raises_our_error_from_the_raw_writer(valkey):
    """The pipelined writer checks every reply: the refused batch raises OutOfMemory and
    leaves the session's (and the recorded) progress where the last whole batch put it."""
    p = valkey(maxmemory="3mb", maxmemory_policy="noeviction")
    store = Store.from_url(p.url)
    rng = np.random.default_rng(0)
    session = begin_load(store, "M", dim=50, codec="f32")
    with pytest.raises(OutOfMemory) as err:
        for lo in range(0, 20_000, 2000):
            session.write([f"t{i}" for i in range(lo, lo + 2000)], rng.random((2000, 50), "f4"))
    assert isinstance(err.value, StoreUnavailable) and not err.value.transient
    assert err.value.reply == "OOM" and "(OOM: command not allowed when used memory" in str(
        err.value
    )
    written = session.written
    assert written == store.get_load("M").written and written % 2000 == 0
    assert store.check_rows(store_info(store, store.get_load("M"))).missing == 0
    assert store.client.llen(f"vecserve:vocab:{session.state.prefix}") == written // 2000
    assert store.list_models() == []
    store.close()


# -- the completeness check before the commit -------------------------------------------


def test_rows_missing_before_the_commit_leave_nothing_visible(store, caplog):
    rng = np.random.default_rng(1)
    tokens = [f"x{i}" for i in range(3000)]
    session = begin_load(store, "M", dim=8, codec="f32", restart=True)
    for lo in range(0, 3000, 500):
        session.write(tokens[lo : lo + 500], rng.random((500, 8), np.float32))
    store.client.delete(*store.vector_keys(session.state.prefix, ["x7", "x2999"]))
    with (
        caplog.at_level(logging.DEBUG, "vecserve.load"),
        pytest.raises(LoadIncomplete, match=r"missing 2 of its 3,000 rows \('x7', 'x2999'"),
    ):
        session.commit()
    assert "every key asked (1 DEL ran)" in caplog.text  # the server's counters saw it
    assert store.list_models() == []
    session.abort(keep=True)
    resumed = begin_load(store, "M", dim=8, codec="f32", resume=True)  # lost: from the start
    assert resumed.written == 0
    resumed.abort(keep=False)


def write_batches(store: Store, tokens: list[str], *, per: int = 500):
    rng = np.random.default_rng(1)
    session = begin_load(store, "M", dim=8, codec="f32", restart=True)
    for lo in range(0, len(tokens), per):
        session.write(tokens[lo : lo + per], rng.random((len(tokens[lo : lo + per]), 8), "f4"))
    return session


def test_a_fresh_load_is_proven_whole_by_the_servers_counters(store, caplog):
    """Nothing on the server removed a key since the load's first write (INFO): the commit
    asks only a sample of the keys, and stores the word hashes a key-by-key check gives."""
    tokens = [f"x{i}" for i in range(2994)] + ["é", "日本語", "a b", "", "x" * 300, "_"]
    session = write_batches(store, tokens)
    with caplog.at_level(logging.DEBUG, "vecserve.load"):
        info = session.commit()
    assert "3,000 rows present, the server's INFO shows nothing removed a key" in caplog.text
    full = store.check_rows(info, hashes=True)
    assert full.missing == 0 and np.array_equal(store.vocab_hashes(info), full.hashes)


def test_the_sample_catches_what_the_counters_miss(store, caplog, monkeypatch):
    """A removal INFO cannot show (a module's own API): the first and last key of every
    batch are asked at the commit, and one missing sends the commit to every key."""
    reads = iter([0, 10**9])  # blind counters: only the load's own MSETs move
    monkeypatch.setattr(
        "vecserve.store.facts.read_facts",
        lambda client: KeyspaceFacts("r", "master", "x", 0, 0, {"mset": next(reads)}),
    )
    session = write_batches(store, [f"x{i}" for i in range(3000)])
    store.client.delete(*store.vector_keys(session.state.prefix, ["x500"]))
    with (
        caplog.at_level(logging.DEBUG, "vecserve.load"),
        pytest.raises(LoadIncomplete, match=r"missing 1 of its 3,000 rows \('x500'"),
    ):
        session.commit()
    assert "every key asked (1 sampled keys missing)" in caplog.text
    session.abort(keep=False)


def test_the_check_counts_lost_n_gram_rows(store):
    """A fastText generation's n-gram bucket rows are checked like its words (one
    multi-key EXISTS per 100k rows, built from the bucket numbers)."""
    session = begin_load(store, "FT", dim=4, codec="f32")
    session.write(["a", "b"], np.ones((2, 4), "f4"))
    session.declare_ngrams(min_n=3, max_n=6, bucket=250_000)
    for lo in range(0, 250_000, 50_000):
        session.write_ngrams(lo, np.zeros((50_000, 4), "f4"))
    info = session.commit()
    assert store.check_rows(info) == RowCheck(checked=250_002, missing=0, words=[])
    store.client.delete(b"FT#0", b"FT#99999", b"FT#249999")
    assert store.check_rows(info).missing == 3


def test_a_loader_without_info_checks_every_key(valkey, caplog):
    p = valkey()
    admin = redis.Redis(port=p.port)
    line = setuser_line("loader", user="l", model="M", password="pw") + " -info"
    admin.execute_command(*line.split())
    store = Store.from_url(f"redis://l:pw@127.0.0.1:{p.port}/0")
    session = write_batches(store, [f"x{i}" for i in range(1000)])
    with caplog.at_level(logging.DEBUG, "vecserve.load"):
        session.commit()
    assert "every key asked (the Redis user may not run INFO)" in caplog.text
    store.close()


BEFORE = KeyspaceFacts("run1", "master", "repl1", 3, 4, {"mset": 10, "del": 2})


@pytest.mark.parametrize(
    ("after", "why"),
    [
        (KeyspaceFacts("run1", "master", "repl1", 3, 4, {"mset": 15, "del": 2}), None),
        (KeyspaceFacts("run1", "master", "repl1", 3, 4, {"mset": 99, "del": 2}), None),
        (KeyspaceFacts("run2", "master", "repl1", 3, 4, {"mset": 15}), "restarted"),
        (KeyspaceFacts("run1", "slave", "repl2", 3, 4, {"mset": 15}), "failed over"),
        (KeyspaceFacts("run1", "master", "repl1", 9, 4, {"mset": 15}), "6 keys evicted"),
        (KeyspaceFacts("run1", "master", "repl1", 3, 5, {"mset": 15}), "1 keys expired"),
        (KeyspaceFacts("run1", "master", "repl1", 3, 4, {"mset": 4}), "counters were reset"),
        (
            KeyspaceFacts("run1", "master", "repl1", 3, 4, {"mset": 15, "del": 2, "flushall": 1}),
            "1 FLUSHALL ran",
        ),
        (KeyspaceFacts("run1", "master", "repl1", 3, 4, {"mset": 15, "del": 3}), "1 DEL ran"),
    ],
)
def test_what_the_counters_call_a_possible_loss(after, why):
    """Pure logic of the gate (no server needed): the reasons it gives up the proof."""
    got = after.changed_since(BEFORE, msets=5)
    assert got is None if why is None else why in got


def test_lost_word_hashes_are_damage_too(store, model_file):
    """The hashes that tell a lost row from an unknown word are written at every commit;
    gone (evicted, lost in a failover), a miss is damage, not a KeyError."""
    path, _, _ = model_file
    info = load_file(path, name="M", store=store, progress=False)
    assert info.word_hashes and store.vocab_hashes(info) is not None
    store.client.delete(f"vecserve:vocabh:{info.prefix}")
    # a store of its own (no vocabulary hashes cached), closed here: a client given a
    # store leaves it open, and a socket the garbage collector finds is a warning
    with closing(Store.from_url(store.url)) as fresh, RedisKeyedVectors("M", store=fresh) as kv:
        assert kv["w1"].shape == (50,)  # found rows need no hashes
        with pytest.raises(ModelDamaged, match="its vocabulary's word hashes are gone"):
            kv["never-a-word"]
    line = error_line(cli(store.url, "models", "check", "M"))
    assert line == (
        "Error: M (generation 1) is damaged: gone from Redis (evicted, lost in a failover, "
        "or deleted by hand): its vocabulary's word hashes; load it again (vecserve load "
        "FILE --key M)"
    )


def test_the_check_goes_by_slot_group_on_a_cluster(cluster_store):
    tokens = [f"c{i}" for i in range(2000)]
    rng = np.random.default_rng(2)
    info = load_arrays(tokens, rng.random((2000, 8), np.float32), name="M", store=cluster_store)
    assert cluster_store.check_rows(info).missing == 0
    cluster_store.client.delete(*cluster_store.vector_keys(info.prefix, ["c5"], info.buckets))
    check = cluster_store.check_rows(info)
    assert (check.checked, check.missing, check.words) == (2000, 1, ["c5"])
    with pytest.raises(ModelDamaged, match="1 of the 2 words"):
        cluster_store.read_rows(info, ["c4", "c5"])
    with pytest.raises(KeyError):
        RedisKeyedVectors("M", store=cluster_store)["nope"]


# -- eviction ---------------------------------------------------------------------------


def _protect_metadata(r: redis.Redis) -> None:
    """Read vecserve's metadata keys often, so LFU eviction (lfu-log-factor 0) takes the
    neighbour's keys and the model's vectors, not the registry."""
    read = {b"hash": r.hlen, b"list": lambda k: r.lindex(k, 0), b"string": r.strlen}
    for key in r.scan_iter("vecserve:*"):
        touch = read.get(r.type(key), r.exists)
        for _ in range(200):
            touch(key)


def test_train_takes_the_flag_its_refusal_names(valkey, tmp_path):
    """`vecserve train` commits through the same pre-flight: refused on an evicting
    policy, in one line naming --allow-eviction, which train accepts."""
    p = valkey(maxmemory_policy="allkeys-lru")
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat\nthe dog sat on the log\n" * 20)
    train = argv("train {} --key T --min-count 1 --vector-size 8 --epochs 1 --workers 1", corpus)
    line = error_line(cli(p.url, *train))
    assert "maxmemory-policy allkeys-lru" in line and "--allow-eviction" in line
    proc = cli(p.url, *train, "--allow-eviction")
    assert proc.returncode == 0, proc.stderr
    assert "T: 7 vectors x 8 committed" in proc.stdout and "(--allow-eviction)" in proc.stderr


def test_an_evicting_policy_is_refused_then_evicted_words_are_damage(valkey, model_file, tmp_path):
    path, tokens, vectors = model_file
    p = valkey(maxmemory_policy="allkeys-lfu", lfu_log_factor=0)
    line = error_line(cli(p.url, "load", str(path), "--key", "M"))
    assert "maxmemory-policy allkeys-lfu" in line and "--allow-eviction" in line
    r = redis.Redis(port=p.port)
    assert r.dbsize() == 0
    proc = cli(p.url, "load", str(path), "--key", "M", "--allow-eviction")
    assert proc.returncode == 0, proc.stderr
    assert "(--allow-eviction)" in proc.stderr and "ModelDamaged" in proc.stderr
    # a neighbour fills memory: the server evicts part of the model
    _protect_metadata(r)
    r.config_set("maxmemory", r.info("memory")["used_memory"] + 400_000)
    for i in range(200):
        r.set(f"neighbour:{i}", b"x" * 20_000)
    r.config_set("maxmemory", "0")  # eviction over: what is lost stays lost
    keys = [f"M:{t}" for t in tokens]
    pipe = r.pipeline(transaction=False)
    for k in keys:
        pipe.exists(k)
    exists = np.array(pipe.execute(), dtype=bool)
    lost = [t for t, ok in zip(tokens, exists, strict=True) if not ok]
    kept = [t for t, ok in zip(tokens, exists, strict=True) if ok]
    assert lost and kept and r.hexists("vecserve:models", "M")

    with RedisKeyedVectors("M", redis_url=p.url) as kv:
        np.testing.assert_array_equal(kv[kept[0]], vectors[tokens.index(kept[0])])
        with pytest.raises(ModelDamaged) as err:
            kv[lost[0]]
        assert not isinstance(err.value, KeyError)
        assert str(err.value).startswith("model 'M' (generation 1) is damaged: 1 of the 1 ")
        with pytest.raises(ModelDamaged, match=f"2 of the 3 words asked.*'{lost[0]}'"):
            kv[[lost[0], kept[0], lost[1]]]
        with pytest.raises(KeyError, match="not present"):
            kv["never-a-word"]  # an unknown word is still gensim's KeyError
    with RedisKeyedVectors("M", redis_url=p.url, cache=True) as kv:
        kv[kept[:5]]
        kv[kept[:5]]  # cached hits
        with pytest.raises(ModelDamaged):
            kv[[kept[0], lost[0]]]

    from vecserve.api import create_app
    from vecserve.service.settings import Settings

    from .api_support import AppClient

    settings = Settings(redis_url=p.url, default_model="M", cache_dir=tmp_path / "cache")
    with AppClient(create_app(settings)) as client:
        got = client.get("/vectors", params={"words": f"{kept[0]},{lost[0]}"})
        assert got.status_code == 500 and got.json()["error"] == "ModelDamaged"
        assert got.json()["lost"] == 1 and got.json()["words"] == [lost[0]]
        unknown = client.get("/vectors", params={"words": f"{kept[0]},never-a-word"})
        assert unknown.status_code == 200 and unknown.json()["missing"] == ["never-a-word"]
        metrics = client.get("/metrics").text
        assert 'vecserve_model_damaged_total{model="M"} 1.0' in metrics

    line = error_line(cli(p.url, "models", "check", "M"))
    assert f"M (generation 1) is damaged: {len(lost):,} of its 20,000 rows are missing" in line
    proc = cli(p.url, "models", "info", "M")
    assert f'"missing": {len(lost)}' in proc.stdout and '"current": true' in proc.stdout


def test_the_cache_counts_keys_that_leave_a_live_generation(store, caplog):
    """A cached client hears keys of its live generation leave Redis without a reload
    (a DEL here; an eviction sends the same message): it asks which are gone and counts
    them lost at once (stats, metrics, a warning); an overwritten key is not lost."""
    rng = np.random.default_rng(5)
    tokens = [f"x{i}" for i in range(1000)]
    info = load_arrays(tokens, rng.random((1000, 8), "f4"), name="M", store=store)
    with (
        caplog.at_level(logging.WARNING, "vecserve.cache"),
        closing(Store.from_url(store.url)) as fresh,  # closed: a client leaves a given store open
        RedisKeyedVectors("M", store=fresh, cache=True) as kv,
    ):
        kv[tokens[:10]]
        cache = kv._reader.cache()
        assert cache.wait_ready(5) and cache.lost_keys == 0
        x8 = store.vector_keys(info.prefix, ["x8"])[0]
        store.client.set(x8, store.client.get(x8))  # overwritten: still there
        store.client.delete(*store.vector_keys(info.prefix, ["x3", "x7"]))
        wait_until(lambda: cache.lost_keys >= 2, timeout=5, interval=0.01, what="2 lost keys")
        time.sleep(0.1)  # the overwrite's message too
        assert cache.stats()["lost_keys"] == 2 and cache.stats()["lost_words"] == ["x3", "x7"]
        said = "generation 1: 2 vector keys gone from Redis without a reload (evicted or deleted"
        assert f"{said}: 'x3', 'x7'), 2 in all" in caplog.text
        with pytest.raises(ModelDamaged, match="1 of the 1 words asked"):
            kv["x3"]
        assert kv["x8"].shape == (8,)


def test_models_check_passes_a_whole_model_and_shows_progress(store, model_file):
    path, _, _ = model_file
    load_file(path, name="M", store=store, progress=False)
    url = store.url
    proc = cli(url, "models", "check", "M")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith("M (generation 1): all 20,000 rows present")
    assert "checking M: 20,000/20,000 rows (100%)" in proc.stderr


def test_lru_eviction_of_the_vocabulary_is_damage(valkey, model_file):
    """An allkeys-lru server evicts the oldest keys first: the vocabulary blobs, written
    at the load and not read since, go before rows that were read after them. `models
    check` reports the loss (never "all 0 rows present", never a ValueError), and
    reading the vocabulary is ModelDamaged."""
    path, tokens, _ = model_file
    p = valkey(maxmemory_policy="allkeys-lru", maxmemory_samples=10)
    r = redis.Redis(port=p.port)
    info = load_file(path, name="M", redis_url=p.url, allow_eviction=True, progress=False)
    keys = [f"M:{t}" for t in tokens]
    time.sleep(1.1)  # the LRU clock ticks in seconds
    for lo in range(0, len(keys), 1000):
        r.mget(keys[lo : lo + 1000])  # the rows are read: younger than the vocabulary
    time.sleep(1.1)
    r.config_set("maxmemory", r.info("memory")["used_memory"] + 400_000)
    for i in range(200):
        r.set(f"neighbour:{i}", b"x" * 20_000)
        r.hget("vecserve:models", "M")  # the registry is read all along
    r.config_set("maxmemory", "0")  # eviction over: what is lost stays lost
    assert not r.exists(vocab_key(info.prefix)) and r.hexists("vecserve:models", "M")
    proc = cli(p.url, "models", "check", "M")
    line = error_line(proc)
    assert line.startswith("Error: M (generation 1) is damaged: gone from Redis (evicted, ")
    assert "its vocabulary (0 of its 20,000 words listed)" in line
    assert "20,000 of its 20,000 rows cannot be checked without it" in line
    assert "all 0 rows" not in proc.stdout + proc.stderr
    with (
        RedisKeyedVectors("M", redis_url=p.url) as kv,
        pytest.raises(ModelDamaged, match=r"its vocabulary \(.*\) is gone from Redis"),
    ):
        len(kv.index_to_key)


def test_lost_vocabulary_keys_are_damage(store, model_file):
    """Each of a generation's metadata keys deleted by hand: `models check` names what
    is gone, and checks the rows it still can."""
    path, tokens, _ = model_file
    info = load_file(path, name="M", store=store, progress=False)
    sizes = vocab_sizes_key(info.prefix)
    raw = store.client.get(sizes)
    store.client.delete(sizes)  # the index is gone; the blobs still list every word
    check = store.check_rows(info)
    assert (check.lost, check.missing, check.unlisted) == (
        ("its vocabulary's index of blob sizes",),
        0,
        0,
    )
    assert check.damaged and check.checked == 20_000
    line = error_line(cli(store.url, "models", "check", "M"))
    assert "gone from Redis (evicted, lost in a failover, or deleted by hand): its " in line
    assert "vocabulary's index of blob sizes; load it again" in line
    store.client.set(sizes, raw)
    store.client.rpop(vocab_key(info.prefix))  # the last blob: its words are unlisted
    store.client.delete(f"M:{tokens[0]}")
    check = store.check_rows(info)
    assert check.missing == 1 and check.words == [tokens[0]] and 0 < check.unlisted < 20_000
    listed = 20_000 - check.unlisted
    assert check.lost == (f"its vocabulary ({listed:,} of its 20,000 words listed)",)
    line = error_line(cli(store.url, "models", "check", "M"))
    assert f"{check.unlisted:,} of its 20,000 rows cannot be checked without it; 1 of " in line
    with pytest.raises(ModelDamaged, match=r"its vocabulary \(blobs \d+ to \d+\) is gone"):
        store.vocab(info)


def test_lost_counts_are_damage(store):
    info = load_arrays(
        ["a", "b"], np.eye(2, dtype=np.float32), name="C", store=store, counts=np.array([5, 3])
    )
    assert store.counts(info).tolist() == [5, 3]
    store.client.delete(info.counts_key)
    assert store.lost_metadata(info) == ["its word counts"]
    with pytest.raises(ModelDamaged, match="its word counts are gone"):
        store.counts(info)
    assert "its word counts; load it again" in error_line(cli(store.url, "models", "check", "C"))


def test_a_lost_registry_entry_is_damage_not_an_unknown_model(store, model_file):
    """The registry entry gone (deleted here; evicted alike) while the generation's keys
    remain: `models check` says so, naming what remains; a retired generation or an
    unfinished load is no such remainder, and a model never loaded is still unknown."""
    path, _, _ = model_file
    load_file(path, name="M", store=store, progress=False)
    load_file(path, name="M", store=store, progress=False)  # generation 1 is retired
    load_arrays(["a"], np.ones((1, 2), np.float32), name="OTHER", store=store)
    assert store.orphans() == {}
    store.client.hdel("vecserve:models", "M")
    assert store.remains("M") == {"M~2": ["vocabulary", "vocabulary sizes", "word hashes"]}
    line = error_line(cli(store.url, "models", "check", "M"))
    assert line == (
        "Error: M is damaged: its registry entry is gone from Redis (evicted, lost in a "
        "failover, or deleted by hand) but keys of it remain (M~2: vocabulary, vocabulary "
        "sizes, word hashes); load it again (vecserve load FILE --key M)"
    )
    assert store.orphans() == {"M": {"M~2": ["vocabulary", "vocabulary sizes", "word hashes"]}}
    listing = cli(store.url, "models").stdout  # the listing shows it, not "no models"
    assert "M                        DAMAGED: its registry entry is gone" in listing
    assert json.loads(cli(store.url, "models", "--json").stdout)["damaged"] == ["M"]
    for kind in (vocab_key, vocab_sizes_key, vocab_hashes_key):
        store.client.delete(kind("M~2"))
    assert store.remains("M") == {"M~2": ["rows"]}  # the rows alone still tell
    assert "keys of it remain (M~2: rows)" in error_line(cli(store.url, "models", "check", "M"))
    assert "model 'NEVER' not found" in error_line(cli(store.url, "models", "check", "NEVER"))


# -- every other error reply ------------------------------------------------------------


def test_loading_into_a_replica_is_one_line(valkey, model_file):
    path, _, _ = model_file
    primary = valkey("primary")
    replica = valkey("replica", replicaof=f"127.0.0.1 {primary.port}")
    line = error_line(cli(replica.url, "load", str(path), "--key", "M"))
    assert "is a read-only replica (READONLY: " in line and "point vecserve at its primary" in line


def test_a_server_that_cannot_save_is_one_line(valkey, model_file, tmp_path):
    path, _, _ = model_file
    p = valkey(enable_protected_configs="yes")
    r = redis.Redis(port=p.port)
    gone = tmp_path / "gone"
    gone.mkdir()
    r.config_set("dir", str(gone))
    shutil.rmtree(gone)  # the snapshot cannot be written: MISCONF from now on
    r.config_set("save", "3600 1")
    r.bgsave()
    wait_until(
        lambda: r.info("persistence")["rdb_last_bgsave_status"] == "err",
        timeout=10,
        what="the snapshot to fail",
    )
    line = error_line(cli(p.url, "load", str(path), "--key", "M"))
    assert "refuses writes because it cannot save its snapshot (MISCONF: " in line
    assert "stop-writes-on-bgsave-error" in line


def test_a_server_still_loading_is_one_line(valkey, tmp_path):
    p = valkey()
    redis.Redis(port=p.port).mset({f"k{i}": "v" * 100 for i in range(5000)})
    redis.Redis(port=p.port).save()
    p.stop()
    slow = ValkeyProcess(
        p.data_dir,
        port=p.port,
        config={"key-load-delay": "2000", "loading-process-events-interval-bytes": "1024"},
    )
    starting = threading.Thread(target=slow.start, kwargs={"timeout": 60})
    starting.start()
    try:

        def loading() -> ServerRefused | None:
            try:
                Store.from_url(slow.url).close()
            except ServerRefused as exc:
                return exc
            except StoreUnavailable:
                return None  # not listening yet
            raise AssertionError("the server answered before it had loaded")

        exc = wait_until(loading, timeout=10, what="the server to answer LOADING")
        assert exc.transient and exc.reply == "LOADING"
        line = error_line(cli(slow.url, "models"))
        assert "is still loading its dataset into memory (LOADING: " in line
        assert "retry when it has finished" in line
    finally:
        starting.join()
        slow.stop()


def test_a_busy_server_is_one_line(valkey):
    p = valkey(busy_reply_threshold=100)
    script = (
        "local s = tonumber(redis.call('TIME')[1]) "
        "while tonumber(redis.call('TIME')[1]) < s + 4 do end return 1"
    )
    outcome = []
    slow = redis.Redis(port=p.port, socket_timeout=30)  # no retry while the script runs
    runner = threading.Thread(target=lambda: outcome.append(slow.eval(script, 0)))
    runner.start()
    try:
        time.sleep(0.3)
        line = error_line(cli(p.url, "models"))
        assert "is busy running a script or function (BUSY: " in line and "SCRIPT KILL" in line
    finally:
        runner.join()
    assert outcome == [1]


def test_credentials_refused_and_max_clients_are_one_line(valkey):
    p = valkey()
    admin = redis.Redis(port=p.port)
    admin.config_set("requirepass", "s3cret")  # on the connection already authenticated
    line = error_line(cli(p.url, "models"))
    assert "requires a password (NOAUTH: " in line and "redis://USER:PASSWORD@host" in line
    bad = f"redis://default:wrong@127.0.0.1:{p.port}/0"
    line = error_line(cli(bad, "models"))
    assert "refused the credentials of user 'default' (WRONGPASS: " in line
    assert ":wrong@" not in line and "default:***@" in line  # the password is never shown
    with pytest.raises(AuthenticationFailed):
        Store.from_url(bad)
    admin.config_set("maxclients", 1)
    with pytest.raises(TooManyClients, match="has reached its maxclients limit") as err:
        Store.from_url(f"redis://:s3cret@127.0.0.1:{p.port}/0")
    assert err.value.transient and isinstance(err.value, VecserveError)
    admin.config_set("maxclients", 10000)  # on the one connection there is
    admin.config_set("requirepass", "")


# -- least privilege and the suite's own servers ----------------------------------------


def test_the_loader_role_reads_info_and_writes_transactions():
    line = setuser_line("loader", user="l", model="M", password="pw").split()
    assert "+info" in line and "+@transaction" in line
    assert line.index("-@dangerous") < line.index("+info")  # only INFO of @dangerous
    assert "+info" not in setuser_line("worker", password="pw").split()


def test_the_suite_never_touches_the_users_server(valkey):
    """With $VECSERVE_REDIS_URL naming a server that holds other data, running tests
    (which flush their server between tests) leaves that data alone."""
    p = valkey("users")
    r = redis.Redis(port=p.port)
    r.set("precious", "data")
    env = {**os.environ, "VECSERVE_REDIS_URL": p.url}
    env.pop("VECSERVE_TEST_REDIS_URL", None)
    proc = subprocess.run(
        argv(
            "{} -m pytest -q -p no:cacheprovider tests/test_store.py -k {}",
            sys.executable,
            "vocab or delete",
        ),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert " passed" in proc.stdout
    assert r.get("precious") == b"data" and r.dbsize() == 1


# -- replication ------------------------------------------------------------------------


def _synced(replica) -> redis.Redis:
    r = redis.Redis(port=replica.port)
    wait_until(
        lambda: r.info("replication").get("master_link_status") == "up",
        timeout=15,
        what="the replica to sync",
    )
    return r


def test_a_commit_waits_for_the_replicas(valkey):
    """When the load returns, the replica has every row and the registry entry: a failover
    right after the commit loses nothing (WAIT, not the replication's usual speed)."""
    primary = valkey("primary")
    replica = _synced(valkey("replica", replicaof=f"127.0.0.1 {primary.port}"))
    tokens = [f"w{i}" for i in range(5_000)]
    vectors = np.random.default_rng(3).standard_normal((5_000, 8)).astype(np.float32)
    info = load_arrays(tokens, vectors, name="R", redis_url=primary.url, batch_size=500)
    keys = Store.vector_keys(info.prefix, tokens)
    assert replica.exists(*keys) == len(tokens)  # read at once: no polling
    assert replica.hget("vecserve:models", "R") is not None


def test_a_replica_that_does_not_acknowledge_is_named(valkey, monkeypatch, caplog):
    """A replica that stopped answering (SIGSTOP) does not block the commit forever: the
    load commits after the wait and warns that a failover now could lose part of it."""
    import signal

    from vecserve.store import registry

    primary = valkey("primary")
    replica = valkey("replica", replicaof=f"127.0.0.1 {primary.port}")
    _synced(replica)
    wait = registry.Store.wait_for_replicas
    monkeypatch.setattr(
        registry.Store,
        "wait_for_replicas",
        lambda self, s, timeout=10.0: wait(self, s, timeout=0.3),
    )
    os.kill(replica.process.pid, signal.SIGSTOP)
    try:
        tokens = [f"w{i}" for i in range(1_000)]
        vectors = np.ones((1_000, 4), dtype=np.float32)
        with caplog.at_level("WARNING", logger="vecserve.load"):
            load_arrays(tokens, vectors, name="S", redis_url=primary.url)
    finally:
        os.kill(replica.process.pid, signal.SIGCONT)
    warned = [r.getMessage() for r in caplog.records if "have not acknowledged" in r.getMessage()]
    assert len(warned) == 2, warned  # the new generation, then the commit
    assert "(0 of 1 replicas)" in warned[0] and "vecserve models check S" in warned[0]


# -- the vocabulary a commit vouches for ------------------------------------------------
# A Redis Cluster client resends a pipeline's commands whose reply it lost (redis-py's
# ClusterPipeline re-executes every command of a connection that failed), and a failover
# can lose a primary's last acknowledged writes. The vocabulary is an ordered list: a
# push run twice, or lost, shifts every later blob. These tests make both happen on
# purpose, through the session's writer.


def _small_file(tmp_path, n: int = 3000):
    tokens = [f"v{i}" for i in range(n)]
    vectors = np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)
    return write_w2v(tmp_path / "v.bin", tokens, vectors), tokens, vectors


def _assert_whole_model(store: Store, tokens, vectors) -> None:
    info = store.get_model("M")
    assert info.count == len(tokens)
    assert store.vocab(info) == list(tokens)
    assert store.check_rows(info).missing == 0
    _, rows, found = store.read_rows(info, tokens)
    assert found.all() and np.array_equal(rows, vectors)
    assert len(store.vocab_hashes(info)) == len(tokens)


def _resend_vocabulary(monkeypatch, batch: int) -> None:
    """Batch number ``batch`` sends its vocabulary writes twice, as a cluster client does
    when a connection dies after the server ran them but before their replies arrived."""

    def resend(original):
        def twice(self, commands, progress, keys, encoded, **kwargs):
            if commands and self.state.chunks == batch:
                commands = [*commands, *commands]
            return original(self, commands, progress, keys, encoded, **kwargs)

        return twice

    for name in ("_write_single", "_write_cluster"):
        monkeypatch.setattr(LoadSession, name, resend(getattr(LoadSession, name)))


@pytest.mark.parametrize("where", ["single", pytest.param("cluster", marks=pytest.mark.cluster)])
def test_a_vocabulary_write_run_twice_is_written_once(where, request, tmp_path, monkeypatch):
    store = request.getfixturevalue("store" if where == "single" else "cluster_store")
    path, tokens, vectors = _small_file(tmp_path)
    _resend_vocabulary(monkeypatch, batch=2)
    info = load_file(path, name="M", store=store, batch_size=500, progress=False)
    assert info.count == len(tokens)
    _assert_whole_model(store, tokens, vectors)


@pytest.mark.parametrize("where", ["single", pytest.param("cluster", marks=pytest.mark.cluster)])
def test_a_vocabulary_that_lost_its_tail_stops_the_load_and_resume_rewrites(
    where, request, tmp_path, monkeypatch
):
    """The server drops the vocabulary's last blob after acknowledging it (a failover):
    the load stops in one line with nothing visible, and --resume makes the model whole."""

    store = request.getfixturevalue("store" if where == "single" else "cluster_store")
    path, tokens, vectors = _small_file(tmp_path)
    write = LoadSession.write_encoded

    def then_lose(self, *args, **kwargs):
        write(self, *args, **kwargs)
        if self.state.chunks == 3:
            store.client.rpop(vocab_key(self.state.prefix))

    monkeypatch.setattr(LoadSession, "write_encoded", then_lose)
    with pytest.raises(StoreUnavailable, match="lost") as err:
        load_file(path, name="M", store=store, batch_size=500, progress=False)
    assert len(str(err.value).splitlines()) == 1 and "--resume" in str(err.value)
    assert store.list_models() == []
    monkeypatch.undo()
    load_file(path, name="M", store=store, batch_size=500, progress=False, resume=True)
    _assert_whole_model(store, tokens, vectors)


def test_a_commit_refuses_a_vocabulary_with_a_repeated_blob_and_resume_rewrites(store, tmp_path):
    """What a push run twice leaves once its tail is trimmed: as many blobs and words as
    the load wrote, every listed word's key present, yet one batch's words missing. The
    commit counts the distinct words, refuses in one line, and --resume starts again."""

    path, tokens, vectors = _small_file(tmp_path)
    session = begin_load(store, "M", dim=8, codec="f32")
    for lo in range(0, 3000, 500):
        session.write(tokens[lo : lo + 500], vectors[lo : lo + 500])
    key = vocab_key(session.state.prefix)
    store.client.lset(key, 5, store.client.lindex(key, 4))  # the last batch's words are gone
    with pytest.raises(StoreUnavailable, match=r"2,500 distinct words.*wrote 3,000") as err:
        session.commit()
    assert len(str(err.value).splitlines()) == 1
    assert store.list_models() == []
    session.abort(keep=True)
    resumed = begin_load(store, "M", dim=8, codec="f32", resume=True)
    assert resumed.written == 0  # what was written cannot be vouched for: from the start
    resumed.abort(keep=False)
    load_file(path, name="M", store=store, batch_size=500, progress=False)
    _assert_whole_model(store, tokens, vectors)


def test_a_commit_refuses_fewer_words_than_the_file_holds(store):
    rng = np.random.default_rng(5)
    session = begin_load(store, "M", dim=8, codec="f32")
    session.write([f"t{i}" for i in range(500)], rng.random((500, 8), np.float32))
    with pytest.raises(LoadIncomplete, match=r"wrote 500 words of the 1,000 its source holds"):
        session.commit(words=1000)
    assert store.list_models() == []
    session.abort(keep=False)


def test_a_first_batch_whose_progress_record_was_lost_is_rewritten_once(store, tmp_path):
    """A failover as the load begins: the first batch's vocabulary blob landed, its
    progress record did not. Resuming from nothing drops that blob (``LTRIM key 0 -1``
    would keep it, and every later blob would sit one place off)."""

    path, tokens, vectors = _small_file(tmp_path)
    session = begin_load(store, "M", dim=8, codec="f32")
    before = session.state
    session.write(tokens[:500], vectors[:500], resume={"offset": 1, "records": 500})
    store.client.hset(LOADS, "M", replace(before, pid=0).to_json())
    session.lease.release()
    resumed = begin_load(store, "M", dim=8, codec="f32", resume=True)
    assert resumed.written == 0 and store.client.llen(vocab_key(before.prefix)) == 0
    resumed.lease.release()
    load_file(path, name="M", store=store, batch_size=500, progress=False, resume=True)
    _assert_whole_model(store, tokens, vectors)
