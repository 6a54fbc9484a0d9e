"""``kv.pin()`` on both clients against a real server: a pinned view reads the generation
live when it was pinned through reloads while the client follows them, renews its lease
on its own (a daemon thread; an asyncio task), lets its generation go when it ends, and
raises PinLost once its lease is gone; a holder SIGKILLed in a real subprocess frees its
generation after the lease; the worker ACL user pins and reads but writes no vector."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from tests.api_support import run_vecserve
from tests.helpers import program, wait_until
from vecserve import AsyncRedisKeyedVectors, PinLost, RedisKeyedVectors
from vecserve.acl import setuser_line
from vecserve.store import begin_load
from vecserve.store.generations import collect, history

WORDS = ["king", "queen", "man", "woman"]


def vecs(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((len(WORDS), 6)).astype(np.float32)


def load(store, seed: int):
    s = begin_load(store, "M", dim=6, codec="f32", restart=True)
    s.write(WORDS, vecs(seed))
    return s.commit()


def states(store) -> dict[int, str]:
    return {
        g.info.generation: "live" if g.live else "pinned" if g.pins else "retired"
        for g in history(store, "M")
    }


def test_a_pinned_view_reads_its_generation_through_two_reloads(store, redis_url):
    load(store, 1)
    kv = RedisKeyedVectors("M", redis_url=redis_url, cache=100)
    try:
        with kv.pin(lease=0.6) as pinned:
            assert np.array_equal(pinned[WORDS], vecs(1))
            for seed in (2, 3):
                load(store, seed)
                assert np.array_equal(kv[WORDS], vecs(seed))  # the client follows
                assert np.array_equal(pinned[WORDS], vecs(1))  # the view does not
                assert np.array_equal(pinned["queen"], vecs(1)[1])
                assert pinned.similarity("king", "man") == pytest.approx(
                    _cos(vecs(1)[0], vecs(1)[2]), abs=1e-6
                )
            assert states(store) == {3: "live", 1: "pinned"}
            time.sleep(1.5)  # two and a half leases: its thread renewed it
            assert np.array_equal(pinned.get_vector("woman"), vecs(1)[3])
            assert pinned.index_to_key == WORDS and len(pinned) == 4
            with pytest.raises(KeyError):
                pinned["nope"]
        assert states(store) == {3: "live", 1: "retired"}  # released: the next collector
        assert [g.generation for g in collect(store, "M")] == [1]
        assert np.array_equal(kv[WORDS], vecs(3))  # the client is untouched
    finally:
        kv.close()


def test_a_pinned_view_whose_lease_is_gone_raises_pin_lost(store, redis_url):
    load(store, 1)
    with RedisKeyedVectors("M", redis_url=redis_url) as kv:
        pinned = kv.pin(lease=0.3)
        store.client.delete(*store.client.keys("vecserve:pin:*"))  # as a collector would
        time.sleep(0.35)
        with pytest.raises(PinLost, match="generation 1 of 'M'"):
            pinned[WORDS]
        pinned.close()
        assert np.array_equal(kv[WORDS], vecs(1))


def test_the_async_client_pins_too(store, redis_url):
    load(store, 1)

    async def main():
        kv = await AsyncRedisKeyedVectors.connect("M", redis_url=redis_url)
        try:
            async with kv.pin(lease=0.6) as pinned:
                assert np.array_equal((await pinned.get_vectors(WORDS))[0], vecs(1))
                for seed in (2, 3):
                    await asyncio.to_thread(load, store, seed)
                    assert np.array_equal(await kv[WORDS], vecs(seed))
                    assert np.array_equal(await pinned[WORDS], vecs(1))
                await asyncio.sleep(1.5)  # its task renewed it
                assert np.array_equal(await pinned.get_vector("man"), vecs(1)[2])
                assert states(store) == {3: "live", 1: "pinned"}
            assert states(store) == {3: "live", 1: "retired"}
            pinned = await kv.pin(lease=0.3)  # awaited instead of `async with`
            assert np.array_equal(await pinned["king"], vecs(3)[0])
            await pinned.aclose()
            assert np.array_equal(await kv["king"], vecs(3)[0])  # its connections work
        finally:
            await kv.aclose()

    asyncio.run(main())


def test_a_sigkilled_holder_frees_its_generation_after_the_lease(store, redis_url):
    first = load(store, 1)
    with subprocess.Popen(
        program("model_pin_holder", redis_url, 1.0), stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout.readline().strip() == str(vecs(1)[0].tolist())
            load(store, 2)
            time.sleep(1.5)  # alive: its thread renews the pin
            assert states(store) == {2: "live", 1: "pinned"}
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait()
            wait_until(
                lambda: states(store) == {2: "live", 1: "retired"},
                timeout=5,
                what="the dead holder's pin to expire",
            )
            env = {**os.environ, "VECSERVE_REDIS_URL": redis_url}
            out = run_vecserve("models", "history", "M", env=env)
            assert "deleted generation 1: no pin holds it any more" in out.stderr
            assert store.fetch(first, WORDS) == [None] * 4
        finally:
            holder.kill()


def test_the_worker_user_pins_and_reads_but_writes_no_vector(store, redis_url):
    load(store, 1)
    store.client.execute_command(*setuser_line("worker", user="pw", password="pwpw").split())
    pool = store.client.connection_pool
    kwargs = {**pool.connection_kwargs, "username": "pw", "password": "pwpw"}
    import redis

    from vecserve.store import Store

    worker = Store(redis.Redis(connection_pool=type(pool)(pool.connection_class, **kwargs)))
    try:
        with RedisKeyedVectors("M", store=worker) as kv, kv.pin(lease=0.6) as pinned:
            load(store, 2)
            time.sleep(1.0)  # renewed as the worker user
            assert np.array_equal(pinned[WORDS], vecs(1))
            assert np.array_equal(kv[WORDS], vecs(2))
            with pytest.raises(redis.exceptions.NoPermissionError):
                worker.client.set(f"{pinned.info.prefix}:king", b"\0" * 24)
    finally:
        worker.close()
        store.client.execute_command("ACL", "DELUSER", "pw")


def _cos(a, b) -> float:
    return float(np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b))
