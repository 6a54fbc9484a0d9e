"""Redis Cluster failover (3 primaries + 3 replicas of valkey-server): readers carry on
after the promotion, and the client-side caches come back on the new topology."""

from __future__ import annotations

import contextlib
import time

import numpy as np
import pytest
import redis

from tests.api_support import AppClient
from tests.helpers import argv, wait_until
from vecserve.errors import StoreUnavailable
from vecserve.keyedvectors import RedisKeyedVectors
from vecserve.loader import load_arrays
from vecserve.store import Store

from .helpers import cluster_client, start_cluster

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
    """``fn()``'s first truthy answer, and how many tries met an unavailable store."""
    errors = 0

    def attempt():
        nonlocal errors
        try:
            return fn()
        except StoreUnavailable:
            errors += 1
            return None

    out = wait_until(attempt, timeout=timeout, what=lambda: f"{what} ({errors} errors)")
    return out, errors


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

        def recovered() -> bool:
            r = client.post("/vectors", json=body)
            codes.append(r.status_code)
            if r.status_code != 200:
                assert r.status_code == 503 and "retry-after" in r.headers
                return False
            stats = client.get("/models/F").json().get("vector_cache") or {}
            return bool(stats.get("ready"))

        wait_until(recovered, timeout=30, what=lambda: f"recovery: {codes[-5:]}")
        got = np.asarray(client.post("/vectors", json=body).json()["vectors"], np.float32)
        np.testing.assert_array_equal(got, vectors[:50])
    with pytest.raises(redis.ConnectionError):
        redis.Redis(port=replicated[1].port, socket_connect_timeout=0.5).ping()


def _owner(nodes, slot: int):
    """The node process serving *slot* (a primary), as a live node sees it."""
    for p in nodes:
        try:
            with redis.Redis(port=p.port, socket_connect_timeout=0.5) as c:
                rows = c.execute_command("CLUSTER", "SLOTS")
            break
        except redis.ConnectionError:
            continue
    for lo, hi, primary, *_ in rows:
        if lo <= slot <= hi:
            port = int(primary[1])
            return next(p for p in nodes if p.port == port)
    raise AssertionError(f"nobody serves slot {slot}")


def _move_slot(nodes, slot: int, dest) -> int:
    """Move *slot* to *dest* the way redis-cli --cluster reshard does (IMPORTING,
    MIGRATING, MIGRATE the keys a batch at a time, SETSLOT NODE everywhere); returns the
    keys moved."""
    src = _owner(nodes, slot)
    s, d = redis.Redis(port=src.port), redis.Redis(port=dest.port)
    src_id = s.execute_command("CLUSTER", "MYID").decode()
    dest_id = d.execute_command("CLUSTER", "MYID").decode()
    d.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    s.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dest_id)
    moved = 0
    while keys := s.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 50):
        s.execute_command("MIGRATE", "127.0.0.1", dest.port, "", 0, 5000, "KEYS", *keys)
        moved += len(keys)
        time.sleep(0.01)  # readers run meanwhile: they meet ASK redirections
    for p in nodes:
        with contextlib.suppress(redis.ConnectionError, redis.ResponseError):
            redis.Redis(port=p.port).execute_command("CLUSTER", "SETSLOT", slot, "NODE", dest_id)
    s.close()
    d.close()
    return moved


def test_reads_and_the_cache_carry_on_while_a_slot_moves(replicated):
    """A slot holding part of the model moves to another primary while a worker reads in
    a loop: every read is right (redirections are followed), the cache keeps working, and
    a reload after the move is seen at once (no stale vector)."""
    import threading

    url = f"redis://127.0.0.1:{replicated[0].port}"
    vectors = np.random.default_rng(2).standard_normal((len(WORDS), 8)).astype(np.float32)
    load_arrays(WORDS, vectors, name="S", redis_url=url)
    kv = RedisKeyedVectors("S", redis_url=url, cache=1000)
    r = cluster_client(url)
    try:
        assert kv._get_cache().wait_ready(10)
        key = next(k for k in r.scan_iter(match="S:*", count=1000) if b"{" in k)
        slot = r.keyslot(key)
        dest = next(p for p in replicated[:3] if p is not _owner(replicated, slot))
        stop, wrong, errors, reads = threading.Event(), [], [], [0]

        def reader():
            plain = RedisKeyedVectors("S", redis_url=url)  # no cache: every read hits Redis
            try:
                while not stop.is_set():
                    try:
                        ok = np.array_equal(plain[WORDS], vectors)
                    except StoreUnavailable as exc:
                        errors.append(str(exc))
                        continue
                    reads[0] += 1
                    if not ok:
                        wrong.append(reads[0])
            finally:
                plain.close()

        t = threading.Thread(target=reader)
        t.start()
        try:
            moved = _move_slot(replicated, slot, dest)
            time.sleep(0.3)
        finally:
            stop.set()
            t.join(30)
        assert moved > 0 and reads[0] > 0
        assert wrong == [] and errors == [], (wrong[:3], errors[:3])
        assert _owner(replicated, slot) is dest
        np.testing.assert_array_equal(kv[WORDS], vectors)  # the cached reader too
        load_arrays(WORDS, vectors * 3, name="S", redis_url=url)
        _until(lambda: np.array_equal(kv[WORDS], vectors * 3), 10, "the reload")
    finally:
        kv.close()
        r.close()


def _load_through_a_failover(replicated, tmp_path, name: str, *extra: str):
    """Start `vecserve load` of a 60,000-vector file, kill a primary once the load has
    begun, and return (the command, its env, the finished process, its stdout, stderr,
    the words, the vectors)."""
    import os
    import subprocess
    import sys

    from tests.helpers import write_w2v

    url = f"redis://127.0.0.1:{replicated[0].port}"
    n = 60_000
    words = [f"{name.lower()}{i}" for i in range(n)]
    vectors = np.random.default_rng(len(name)).standard_normal((n, 16)).astype(np.float32)
    path = write_w2v(tmp_path / "m.bin", words, vectors)
    env = {**os.environ, "VECSERVE_REDIS_URL": url}
    cmd = [
        *argv("{} -m vecserve.cli load {} --key {} --batch-size 500", sys.executable, path, name),
        *extra,
    ]
    # `with`: its pipes are closed even when the test fails here
    with subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            with cluster_client(url) as r:  # a new process starts slowly on a busy machine
                _until(lambda: r.hget("vecserve:loads", name), 60, "the load to start")
            _kill_a_primary(replicated)
            out, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
    return cmd, env, proc, out, err, words, vectors


def _assert_model(url, name, words, vectors) -> None:
    """Every vector of the committed model, also those the dead primary had acknowledged
    but not replicated."""
    with RedisKeyedVectors(name, redis_url=url) as kv:
        _until(lambda: len(kv) == len(words), 30, "the committed model")
        (got,), _ = _until(lambda: (kv[words],), 30, "reads")
        np.testing.assert_array_equal(got, vectors)


def test_a_load_interrupted_by_a_failover_resumes(replicated, tmp_path):
    """A primary dies while `vecserve load --retries 0` writes: the load ends with one
    line (or rides the failover out), nothing is visible meanwhile, and `--resume`
    finishes it; the model equals the file, although the dead primary had acknowledged
    writes its replica never got (the resume checks the written part and starts again
    if any is lost)."""
    import subprocess

    url = f"redis://127.0.0.1:{replicated[0].port}"
    cmd, env, proc, _, err, words, vectors = _load_through_a_failover(
        replicated, tmp_path, "MID", "--retries", "0"
    )
    assert "Traceback" not in err
    if proc.returncode:
        assert len(err.strip().splitlines()) == 1 and "--resume" in err, err
        with cluster_client(url) as r:
            assert r.hget("vecserve:models", "MID") is None  # nothing visible
        resumed, attempts = None, 0
        while resumed is None or resumed.returncode:  # until the cluster settles
            attempts += 1
            assert attempts < 40, resumed.stderr
            time.sleep(0.25)
            resumed = subprocess.run(
                [*cmd, "--resume"], env=env, capture_output=True, text=True, timeout=120
            )
        assert "Traceback" not in resumed.stderr
    _assert_model(url, "MID", words, vectors)


def test_a_load_rides_a_failover_out_by_itself(replicated, tmp_path):
    """With its default retries, `vecserve load` resumes by itself after the promotion:
    one line per retry, then the whole model, right."""
    url = f"redis://127.0.0.1:{replicated[0].port}"
    _, _, proc, out, err, words, vectors = _load_through_a_failover(replicated, tmp_path, "RIDE")
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "RIDE: 60,000 vectors" in out
    _assert_model(url, "RIDE", words, vectors)
