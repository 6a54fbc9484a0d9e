"""Coalescing (vecserve/service/coalesce.py, through the single-query routes): requests
that arrive while others are answered go together in one batch, and each caller gets its
own answer (or its own error), the one it gets alone."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from vecserve.api import create_app
from vecserve.loader import load_arrays
from vecserve.service import similar
from vecserve.service.coalesce import Coalescer
from vecserve.service.settings import Settings

from .api_support import AppClient, wait_for_ann

N, DIM = 3000, 16


@pytest.fixture
def model(store):
    rng = np.random.default_rng(5)
    centres = rng.standard_normal((20, DIM))
    vectors = centres[rng.integers(0, 20, N)] + 0.4 * rng.standard_normal((N, DIM))
    load_arrays(
        [f"w{i}" for i in range(N)],
        vectors.astype(np.float32),
        name="M",
        store=store,
        progress=False,
    )


def _slow_batches(monkeypatch) -> list[int]:
    """The size of every coalesced batch; each takes 50 ms more, so that requests queue."""
    sizes, real = [], similar.most_similar_many

    def slow(items):
        sizes.append(len(items))
        time.sleep(0.05)
        return real(items)

    monkeypatch.setattr(similar, "most_similar_many", slow)
    return sizes


@pytest.mark.parametrize("approx", [False, True])
def test_requests_arriving_together_each_get_their_own_answer(
    redis_url, model, tmp_path, monkeypatch, approx
):
    settings = Settings(
        redis_url=redis_url,
        default_model="M",
        preload=True,
        cache_dir=tmp_path,
        ann=approx,
        coalesce=True,
        vector_cache=0,
    )
    flag = "&approx=true" if approx else ""
    paths = [f"/most_similar?positive=w{i}&topn={1 + i % 7}{flag}" for i in range(40)]
    paths += [
        f"/most_similar?positive=nope{flag}",
        f"/most_similar?positive=w1,w2&negative=w3{flag}",
    ]
    paths += [f"/most_similar?positive=w5&topn=100000{flag}"]  # over the limit: 422
    with AppClient(create_app(settings)) as client:
        if approx:
            wait_for_ann(client, "M")
        alone = [client.get(p) for p in paths]
        sizes = _slow_batches(monkeypatch)
        with ThreadPoolExecutor(16) as pool:
            together = list(pool.map(client.get, paths))
    assert max(sizes) > 1 and sum(sizes) <= len(paths)  # batches formed
    assert [r.status_code for r in together] == [r.status_code for r in alone]
    assert [r.json() for r in together] == [r.json() for r in alone]
    assert {r.status_code for r in alone} == {200, 404, 422}
    assert all(r.json()["approximate"] is approx for r in alone if r.status_code == 200)


def test_the_coalescer_hands_the_lead_on_and_keeps_errors_apart():
    c = Coalescer(max_batch=3)
    gate, batches = threading.Event(), []

    def run(items):
        batches.append(list(items))
        if items[0] == 0:
            gate.wait(5)  # the first batch holds: the others queue behind it
        return [ValueError(f"odd {i}") if i % 2 else i * 10 for i in items]

    def call(i):
        try:
            return c.submit("m", i, run)
        except ValueError as exc:
            return str(exc)

    with ThreadPoolExecutor(8) as pool:
        first = pool.submit(call, 0)
        while not batches:
            time.sleep(0.001)
        rest = [pool.submit(call, i) for i in range(1, 8)]
        while len(c._queues.get("m", [])) < 7:
            time.sleep(0.001)
        gate.set()
        got = [first.result()] + [f.result() for f in rest]
    assert got == [0, "odd 1", 20, "odd 3", 40, "odd 5", 60, "odd 7"]
    assert batches[0] == [0] and sorted(len(b) for b in batches[1:]) == [1, 3, 3]
    assert (c.batches, c.calls) == (4, 8) and not c._queues and not c._leading
