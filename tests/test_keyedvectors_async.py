"""AsyncRedisKeyedVectors beyond the shared parity cases (tests/test_keyedvectors.py runs
those against both clients): cancellation, concurrency, the calls Python's syntax makes.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from vecserve import AsyncRedisKeyedVectors, RedisKeyedVectors
from vecserve.loader import load_arrays

WORDS = [f"w{i}" for i in range(5000)]


@pytest.fixture
def model(store):
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((len(WORDS), 64)).astype(np.float32)
    load_arrays(WORDS, vectors, name="M", store=store)
    return vectors


def test_cancelled_calls_leave_the_connections_usable(store, model):
    """Calls cancelled at every stage (before the request, mid-reply, while a big batch
    is decoded in a thread) never leave a reply behind for the next call to read."""

    async def scenario():
        kv = await AsyncRedisKeyedVectors.connect("M", store=store)
        try:
            cancelled = 0
            for i in range(60):
                task = asyncio.ensure_future(kv.get_vectors(WORDS[: 100 + 80 * i]))
                for _ in range(i % 6):
                    await asyncio.sleep(0)
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    cancelled += 1
                # the very next calls, on whatever connection is free, answer right
                words = [WORDS[i], WORDS[-1 - i]]
                got, found = await kv.get_vectors(words)
                assert found.all()
                np.testing.assert_array_equal(got, model[[i, len(WORDS) - 1 - i]])
                assert (await kv["w7"]).tolist() == model[7].tolist()
            assert cancelled > 10  # the cancellations did land mid-call
        finally:
            await kv.aclose()

    asyncio.run(scenario())


def test_concurrent_coroutines_get_their_own_answers(store, model):
    async def scenario():
        async with AsyncRedisKeyedVectors("M", store=store, cache=500) as kv:

            async def ask(seed):
                r = np.random.default_rng(seed)
                for _ in range(10):
                    idx = r.integers(0, len(WORDS), 100)
                    got, _ = await kv.get_vectors([WORDS[i] for i in idx])
                    np.testing.assert_array_equal(got, model[idx])

            await asyncio.gather(*(ask(s) for s in range(32)))

    asyncio.run(scenario())


def test_syntax_calls_and_metadata(store, model, tmp_path):
    async def scenario():
        async with AsyncRedisKeyedVectors("M", store=store, cache_dir=tmp_path) as kv:
            with pytest.raises(TypeError):
                len(AsyncRedisKeyedVectors("M", store=store))  # nothing read yet
            assert len(kv) == len(WORDS) and kv.vector_size == 64
            assert await kv.contains("w1") and not await kv.contains("nope")
            with pytest.raises(TypeError, match=r"await kv\.contains"):
                "w1" in kv  # noqa: B015
            assert (await kv.index_to_key)[:2] == ["w0", "w1"]
            assert (await kv.key_to_index)["w3"] == 3
            with pytest.raises(KeyError):
                await kv["nope"]
            sync = RedisKeyedVectors("M", store=store, cache_dir=tmp_path)
            assert await kv.most_similar("w5", topn=3) == sync.most_similar("w5", topn=3)
            assert (await kv.vectors).shape == (len(WORDS), 64)
            sync.close()

    asyncio.run(scenario())


def test_a_big_batch_lets_the_loop_run_while_it_is_read(store, model):
    """A 5,000-word batch (keys built, request packed, reply decoded in chunks) answers
    right, and other coroutines run while it is read: it never holds the loop whole."""

    async def scenario():
        async with AsyncRedisKeyedVectors("M", store=store) as kv:
            ticks = 0
            running = True

            async def ticker():
                nonlocal ticks
                while running:
                    ticks += 1
                    await asyncio.sleep(0)

            tick = asyncio.ensure_future(ticker())
            await asyncio.sleep(0)
            before = ticks
            got, found = await kv.get_vectors(WORDS)
            during = ticks - before
            running = False
            await tick
            assert found.all()
            np.testing.assert_array_equal(got, model)
            assert during >= 10  # keys, packing and decoding each yield several times

    asyncio.run(scenario())


def test_many_coroutines_share_few_connections_and_survive_their_loss(store, model):
    """64 concurrent callers are served on at most a few pipelined connections; when the
    server drops them all, the next calls connect again and answer right."""

    async def scenario():
        async with AsyncRedisKeyedVectors("M", store=store) as kv:

            async def ask(seed):
                r = np.random.default_rng(seed)
                idx = r.integers(0, len(WORDS), 100)
                got, _ = await kv.get_vectors([WORDS[i] for i in idx])
                np.testing.assert_array_equal(got, model[idx])

            await asyncio.gather(*(ask(s) for s in range(64)))
            assert 1 <= len(kv._connections._pipes) <= kv._connections.size < 64
            store.client.client_kill_filter(_type="normal", skipme=True)
            await asyncio.gather(*(ask(s) for s in range(64, 80)))

    asyncio.run(scenario())


def test_sync_single_words_follow_a_reload_and_name_missing_words(store, model):
    """``kv[word]`` (one pre-packed GET and the registry entry) reads the new generation
    right after a reload, raises KeyError for a missing word, and survives a dropped
    connection."""
    kv = RedisKeyedVectors("M", store=store)
    try:
        assert kv["w3"].tolist() == model[3].tolist()
        assert not kv["w3"].flags.writeable
        load_arrays(WORDS, model * 2, name="M", store=store)
        assert kv["w3"].tolist() == (model[3] * 2).tolist()
        with pytest.raises(KeyError):
            kv["nope"]
        store.client.client_kill_filter(_type="normal", skipme=True)
        assert kv["w4"].tolist() == (model[4] * 2).tolist()
    finally:
        kv.close()


def test_one_client_serves_one_event_loop_after_another(store, model):
    """A client used under ``asyncio.run`` twice connects again on the second loop."""
    kv = AsyncRedisKeyedVectors("M", store=store)
    for i in range(3):
        got, found = asyncio.run(kv.get_vectors([WORDS[i]]))
        assert found.all()
        np.testing.assert_array_equal(got[0], model[i])
    asyncio.run(kv.aclose())


@pytest.mark.cluster
def test_a_cluster_is_read_through_the_asyncio_cluster_client(cluster_store):
    vectors = np.arange(12, dtype=np.float32).reshape(4, 3)
    load_arrays(["a", "b", "c", "d"], vectors, name="ASYNC_CLUSTER", store=cluster_store)

    async def scenario():
        async with AsyncRedisKeyedVectors("ASYNC_CLUSTER", store=cluster_store) as kv:
            got, found = await kv.get_vectors(["d", "zz", "a"], missing="zeros")
            assert found.tolist() == [True, False, True]
            assert got.tolist() == [vectors[3].tolist(), [0.0] * 3, vectors[0].tolist()]
            assert (await kv["b"]).tolist() == vectors[1].tolist()

    asyncio.run(scenario())
