"""Reloads raced against reads: no reader ever labels rows with the wrong generation.

Every generation of model RACE is written with all components equal to its generation
number (generations are handed out 1, 2, 3, ... and prefixes are reused: generation 1
lives at ``RACE:``, 2 at ``RACE~2:``, 3 at ``RACE:`` again once 1 is deleted). Each read
reports the generation it read; every row it returned must hold exactly that number.
Missing rows are allowed only when a read raced a delete of its own generation, which
``Store.read_rows`` must never return: so every word is always found, too.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tests.api_support import AppClient
from vecserve.errors import GenerationChanged
from vecserve.loader import load_arrays
from vecserve.store import Store
from vecserve.store.layout import GENERATION

WORDS = [f"w{i}" for i in range(300)]
DIM = 8
RELOADS = 12
MAX_RELOADS = 400


def _load_next(store: Store) -> int:
    """Load the next generation of RACE, every component equal to its generation number."""
    nxt = int(store.client.hget(GENERATION, "RACE") or 0) + 1
    info = load_arrays(WORDS, np.full((len(WORDS), DIM), nxt, np.float32), name="RACE", store=store)
    assert info.generation == nxt
    return nxt


def _reload_forever(store: Store, stop: threading.Event, done: list[int], enough) -> None:
    """Reload at least RELOADS times, and on until ``enough()`` says the reader has seen
    the race (a slow or cached reader on a busy machine may need more reloads to see
    three generations); at most MAX_RELOADS."""
    try:
        while not stop.is_set() and len(done) < MAX_RELOADS:
            if len(done) >= RELOADS and enough():
                break
            done.append(_load_next(store))
    finally:
        stop.set()


def _race(store: Store, read) -> tuple[int, set[int]]:
    """Run ``read() -> (generation, rows, found)`` against reloads; check every answer."""
    if not store.client.hexists(GENERATION, "RACE"):
        _load_next(store)
    stop, done = threading.Event(), []
    reads, seen = 0, set()
    writer = threading.Thread(
        target=_reload_forever,
        args=(Store(store.client), stop, done, lambda: reads > 20 and len(seen) >= 3),
    )
    writer.start()
    deadline = time.monotonic() + 60
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                generation, rows, found = read()
            except GenerationChanged:
                continue  # allowed: a reader may give up, never lie
            rows = np.asarray(rows)
            assert np.all(found), f"generation {generation}: words missing mid-read"
            assert np.all(rows == generation), (
                f"rows labelled generation {generation} hold {sorted(set(rows.ravel()))}"
            )
            reads += 1
            seen.add(generation)
            time.sleep(0.0002)  # a cached read never waits on I/O: let the reloads run
    finally:
        stop.set()
        writer.join()
    assert len(done) >= RELOADS, "the reloads did not finish"
    return reads, seen


def _check(reads: int, seen: set[int]) -> None:
    assert reads > 20
    assert len(seen) >= 3, f"reads saw only generations {seen}: the race did not happen"


def test_store_read_rows_never_mislabels(store):
    def read():
        info = store.get_model("RACE")
        time.sleep(0.001)  # hold an entry that may go stale, as caches do
        got, rows, found = store.read_rows(info, WORDS)
        return got.generation, rows, found

    _check(*_race(store, read))


@pytest.mark.cluster
def test_store_read_rows_never_mislabels_on_a_cluster(cluster_store):
    def read():
        info = cluster_store.get_model("RACE")
        got, rows, found = cluster_store.read_rows(info, WORDS)
        return got.generation, rows, found

    _check(*_race(cluster_store, read))


def _lookup_sync(kv):
    got = kv._run(kv._reader.lookup_steps(WORDS))
    return got.info.generation, got.rows, got.found


@pytest.mark.parametrize("cache", [0, 1000])
def test_keyedvectors_never_mislabel(store, redis_url, cache):
    from vecserve import RedisKeyedVectors

    _load_next(store)
    kv = RedisKeyedVectors("RACE", redis_url=redis_url, cache=cache)
    try:
        _check(*_race(store, lambda: _lookup_sync(kv)))
    finally:
        kv.close()


def _service_read(client):
    r = client.post("/vectors", json={"words": WORDS, "model": "RACE"})
    if r.status_code == 503:
        raise GenerationChanged(r.text)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["missing"] == [], f"generation {body['generation']}: words missing"
    return body["generation"], body["vectors"], True


def test_service_never_mislabels(store, redis_url):
    from vecserve.api import create_app
    from vecserve.service.settings import Settings

    app = create_app(Settings(redis_url=redis_url, model_ttl=5.0, vector_cache=1000))
    _load_next(store)
    with AppClient(app) as client:
        _check(*_race(store, lambda: _service_read(client)))


@pytest.mark.parametrize("cache", [0, 1000])
def test_service_and_both_clients_agree(store, redis_url, cache):
    """The service, RedisKeyedVectors and AsyncRedisKeyedVectors read in turn against
    the reloads: each answer's rows are its own generation's, and the answers' public
    forms (the clients' get_vectors, the service's JSON) are the same rows."""
    import asyncio

    from vecserve import AsyncRedisKeyedVectors, RedisKeyedVectors
    from vecserve.api import create_app
    from vecserve.service.settings import Settings

    app = create_app(Settings(redis_url=redis_url, model_ttl=5.0, vector_cache=cache))
    _load_next(store)
    kv = RedisKeyedVectors("RACE", redis_url=redis_url, cache=cache)
    loop = asyncio.new_event_loop()
    akv = loop.run_until_complete(
        AsyncRedisKeyedVectors.connect("RACE", redis_url=redis_url, cache=cache)
    )
    turn = [0]

    async def async_read():
        got = await akv._arun(akv._reader.lookup_steps(WORDS))
        vectors, _ = await akv.get_vectors(WORDS)
        assert np.all(vectors == vectors[0, 0]), "get_vectors mixed generations"
        return got.info.generation, got.rows, got.found

    def read():
        turn[0] += 1
        which = turn[0] % 3
        if which == 0:
            vectors, _ = kv.get_vectors(WORDS)
            assert np.all(vectors == vectors[0, 0]), "get_vectors mixed generations"
            return _lookup_sync(kv)
        if which == 1:
            return loop.run_until_complete(async_read())
        return _service_read(client)

    try:
        with AppClient(app) as client:
            reads, seen = _race(store, read)
            _check(reads, seen)
            # at rest, all three give the same rows of the same generation
            want = _lookup_sync(kv)
            for got in (loop.run_until_complete(async_read()), _service_read(client)):
                assert got[0] == want[0]
                np.testing.assert_array_equal(np.asarray(got[1]), want[1])
    finally:
        kv.close()
        loop.run_until_complete(akv.aclose())
        loop.close()
