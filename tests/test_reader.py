"""The reader core (vecserve/reader.py): its pinned mode, the shape kv.pin() builds on."""

from __future__ import annotations

import asyncio

import numpy as np

from vecserve import AsyncRedisKeyedVectors, RedisKeyedVectors
from vecserve.loader import load_arrays
from vecserve.reader import Reader
from vecserve.store import Store
from vecserve.store.layout import vector_key


def test_a_pinned_reader_reads_its_generation_after_a_reload(store, monkeypatch):
    monkeypatch.setenv("VECSERVE_KEEP_GENERATIONS", "1")  # the old generation's keys stay
    first = load_arrays(["a", "b"], np.ones((2, 3)), name="M", store=store)
    live = Reader(store, "M")
    pinned = live.pinned(first)
    load_arrays(["a", "b"], 2 * np.ones((2, 3)), name="M", store=store)
    got = store.run(pinned.lookup_steps(["a", "b"]))
    assert got.info.generation == first.generation and got.rows.tolist() == [[1.0] * 3] * 2
    assert store.run(pinned.info_steps(fresh=True)) is first  # no registry read, ever
    got = store.run(live.lookup_steps(["a"]))
    assert got.info.generation > first.generation and got.rows.tolist() == [[2.0] * 3]

    # both clients' views of a pinned reader answer from the pinned generation
    kv = RedisKeyedVectors("M", store=store)
    view = kv._view(kv._reader.pinned(first))
    assert view["a"].tolist() == [1.0] * 3 and kv["a"].tolist() == [2.0] * 3
    assert view.vector_size == 3 and len(view) == 2

    async def scenario():
        async with AsyncRedisKeyedVectors("M", store=store) as akv:
            aview = akv._view(akv._reader.pinned(first))
            assert (await aview["a"]).tolist() == [1.0] * 3
            assert (await akv["a"]).tolist() == [2.0] * 3

    asyncio.run(scenario())
    kv.close()


class _ReloadOnSend:
    """A socket that commits ``reload`` after the request was built, before sending it."""

    def __init__(self, sock, reload):
        self._sock, self._reload = sock, reload

    def sendall(self, data):
        if self._reload is not None:
            self._reload, reload = None, self._reload
            reload()
        return self._sock.sendall(data)

    def __getattr__(self, name):
        return getattr(self._sock, name)


def test_a_reload_between_a_words_request_and_its_reply_is_detected(store, redis_url, monkeypatch):
    monkeypatch.setenv("VECSERVE_KEEP_GENERATIONS", "1")  # the old generation's keys stay
    first = load_arrays(["a", "b"], np.ones((2, 3)), name="M", store=store)
    kv = RedisKeyedVectors("M", store=store, model_ttl=3600)  # trusts its entry meanwhile
    assert kv["a"].tolist() == [1.0] * 3
    single = kv._reader.single
    assert single is not None  # the one-request path is taken from now on
    assert single.get("b").tolist() == [1.0] * 3 and single.get("zz") is None

    other = Store.from_url(redis_url)
    reload = lambda: load_arrays(["a", "b"], 2 * np.ones((2, 3)), name="M", store=other)  # noqa: E731
    raw = store._connections._local.raw
    raw.sock = _ReloadOnSend(raw.sock, reload)
    # built for the first generation, sent after the second committed: its row (still
    # there, kept for rollback) is refused, as the entry read after it is another's
    assert store.client.exists(vector_key(first.key_prefix, "a"))
    assert single.get("a") is None
    raw.sock = raw.sock._sock
    # kv[word] reads it again, from the live generation, and builds the new request
    assert kv["a"].tolist() == [2.0] * 3
    assert kv._reader.last_info.generation > first.generation
    assert kv._reader.single is not single and kv["b"].tolist() == [2.0] * 3
    kv.close()
    other.close()
