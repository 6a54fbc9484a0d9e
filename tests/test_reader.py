"""The reader core (vecserve/reader.py): its pinned mode, the shape kv.pin() builds on."""

from __future__ import annotations

import asyncio

import numpy as np

from vecserve import AsyncRedisKeyedVectors, RedisKeyedVectors
from vecserve.loader import load_arrays
from vecserve.reader import Reader


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
