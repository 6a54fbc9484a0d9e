"""Pins (vecserve/store/pins.py), retired generations, collection and rollback
(vecserve/store/generations.py) against real servers: the embedded valkey, a 3-node Redis
Cluster, a least-privilege worker user, a pin holder SIGKILLed in a real subprocess, and
the real `vecserve models history` / `rollback` commands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest
import redis

from tests.api_support import run_vecserve
from tests.helpers import program, wait_until
from vecserve.acl import setuser_line
from vecserve.errors import (
    LoadInProgress,
    ModelNotFound,
    PermissionDenied,
    PinLost,
    VecserveError,
)
from vecserve.store import Store, begin_load
from vecserve.store.generations import collect, history, live_pins, rollback
from vecserve.store.layout import history_key, pins_key
from vecserve.store.pins import Pin

WORDS = ["king", "queen", "man"]


def vecs(seed: int, n: int = 3, dim: int = 4) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


def load(store, name, vectors, tokens=WORDS):
    s = begin_load(store, name, dim=vectors.shape[1], codec="f32", restart=True)
    s.write(tokens, vectors)
    return s.commit()


def rows(store, info, tokens=WORDS) -> np.ndarray:
    """The rows of one generation, read by its prefix (what a pinned read sends)."""
    raw = store.fetch(info, tokens)
    assert None not in raw, f"generation {info.generation} lost keys"
    return np.frombuffer(b"".join(raw), "<f4").reshape(len(tokens), -1)


def gens(store, name) -> dict[int, str]:
    return {
        g.info.generation: "live" if g.live else "kept" if g.kept else "pinned" if g.pins else "-"
        for g in history(store, name)
    }


def cli(url, *args, check=True, **env):
    return run_vecserve(*args, env={**os.environ, "VECSERVE_REDIS_URL": url, **env}, check=check)


def test_a_pinned_generation_survives_two_reloads_then_goes_with_its_pin(store):
    first = load(store, "M", vecs(1))
    pin = Pin.take(store, "M", lease=30)
    assert pin.info == first and store.client.exists(pin.key)
    second = load(store, "M", vecs(2))
    third = load(store, "M", vecs(3))
    assert store.get_model("M") == third
    # generation 1 is pinned: whole; generation 2 was not: deleted at the next commit
    assert np.array_equal(rows(store, first), vecs(1))
    assert store.fetch(second, WORDS) == [None] * 3
    assert gens(store, "M") == {3: "live", 1: "pinned"}
    [state] = live_pins(store, "M")[1]
    assert state.holder == pin.holder and 25 < state.ttl <= 30
    # a new load never reuses the prefix of a generation that still has keys
    assert len({first.prefix, third.prefix}) == 2
    assert pin.renew() and not pin.lost
    time.sleep(0.01)
    pin.valid_until = 0  # as if the renewals had stalled: confirm asks the server
    pin.confirm()
    assert pin.holds()
    pin.release()
    assert collect(store, "M") == [first]
    assert gens(store, "M") == {3: "live"}
    assert store.fetch(first, WORDS) == [None] * 3
    assert not store.client.exists(history_key("M"), pins_key("M"))
    assert not pin.renew() and pin.lost  # a pin once gone never comes back


def test_an_expired_pin_is_never_renewed_and_frees_its_generation(store):
    first = load(store, "M", vecs(1))
    pin = Pin.take(store, "M", lease=0.2)
    load(store, "M", vecs(2))
    assert gens(store, "M") == {2: "live", 1: "pinned"}
    assert pin.holds()
    time.sleep(0.35)
    assert not pin.holds()
    with pytest.raises(PinLost, match=r"generation 1 of 'M' expired \(not renewed within 0.2s\)"):
        pin.confirm()  # after a read: the pin may have gone under it
    assert not pin.renew() and pin.lost
    assert not store.client.exists(pin.key)
    assert gens(store, "M") == {2: "live", 1: "-"}  # retired, waiting for a collector
    third = load(store, "M", vecs(3))  # the next load collects it, first of all
    assert gens(store, "M") == {3: "live"}
    assert third.prefix == first.prefix  # so its prefix was free again
    assert np.array_equal(rows(store, third), vecs(3))


def test_taking_a_pin_follows_a_reload_that_raced_it(store):
    first = load(store, "M", vecs(1))
    second = load(store, "M", vecs(2))
    pin = Pin.take(store, "M", info=first)  # the caller's registry entry was stale
    assert pin.info == second
    assert [i.decode() for i in store.client.smembers(pins_key("M"))] == [pin.id]
    pin.release()
    with pytest.raises(ModelNotFound):
        Pin.take(store, "NOPE")


def test_keep_generations_and_rollback(store, monkeypatch):
    monkeypatch.setenv("VECSERVE_KEEP_GENERATIONS", "1")
    infos = [load(store, "M", vecs(seed)) for seed in (1, 2, 3)]
    assert gens(store, "M") == {3: "live", 2: "kept"}  # 1 fell out of the window
    now, replaced = rollback(store, "M")
    assert (now, replaced) == (infos[1], infos[2])
    assert store.get_model("M") == infos[1] and np.array_equal(rows(store, now), vecs(2))
    assert gens(store, "M") == {3: "kept", 2: "live"}
    now, _ = rollback(store, "M", 3)  # and forward again
    assert now == infos[2] and gens(store, "M") == {3: "live", 2: "kept"}
    with pytest.raises(VecserveError, match=r"generation 1 of 'M' is not retained .*: 2"):
        rollback(store, "M", 1)
    # the stored setting rules later collections; a load stores its own
    monkeypatch.setenv("VECSERVE_KEEP_GENERATIONS", "0")
    assert collect(store, "M") == []
    load(store, "M", vecs(4))
    assert gens(store, "M") == {4: "live"}
    with pytest.raises(VecserveError, match="no retired generation to roll back to"):
        rollback(store, "M")


def test_rollback_waits_for_no_load_and_a_bad_setting_names_itself(store, monkeypatch):
    load(store, "M", vecs(1))
    running = begin_load(store, "M", dim=4, codec="f32")
    with pytest.raises(LoadInProgress):
        rollback(store, "M")
    running.abort(keep=False)
    monkeypatch.setenv("VECSERVE_KEEP_GENERATIONS", "two")
    with pytest.raises(VecserveError, match="VECSERVE_KEEP_GENERATIONS must be a whole number"):
        begin_load(store, "M", dim=4, codec="f32")


def test_cli_history_and_rollback(store, redis_url, monkeypatch):
    monkeypatch.setenv("VECSERVE_KEEP_GENERATIONS", "2")
    for seed in (1, 2, 3):
        load(store, "M", vecs(seed))
    monkeypatch.delenv("VECSERVE_KEEP_GENERATIONS")  # the CLI goes by the stored number
    pin = Pin.take(store, "M")
    out = cli(redis_url, "models", "history", "M").stdout.splitlines()
    assert out[0].split()[:3] == ["GEN", "STATE", "VECTORS"]
    assert [line.split()[:2] for line in out[1:]] == [["3", "live"], ["2", "kept"], ["1", "kept"]]
    assert pin.holder in out[1] and "s left)" in out[1]
    proc = cli(redis_url, "models", "rollback", "M")
    assert proc.stdout.strip() == (
        "M: generation 2 is live again (3 vectors); generation 3 retired"
    )
    assert store.get_model("M").generation == 2
    lines = [
        json.loads(x)
        for x in cli(redis_url, "models", "history", "M", "--json").stdout.splitlines()
    ]
    assert [(g["generation"], g["live"]) for g in lines] == [(3, False), (2, True), (1, False)]
    assert lines[0]["pins"][0]["holder"] == pin.holder  # the pin stays on generation 3
    bad = cli(redis_url, "models", "rollback", "M", "9", check=False)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines() == [
        "Error: generation 9 of 'M' is not retained (live: 2; retained: 3, 1)"
    ]
    missing = cli(redis_url, "models", "history", "NOPE", check=False)
    assert missing.returncode == 1 and "model 'NOPE' not found" in missing.stderr
    # deleting the model ends its pins and deletes every generation
    assert "and 2 retired generations" in cli(redis_url, "models", "delete", "M", "--yes").stdout
    assert not pin.renew()
    assert store.client.dbsize() == 1  # vecserve:generation, the counter


def test_a_sigkilled_holder_lets_its_generation_go_after_the_lease(store, redis_url):
    first = load(store, "M", vecs(1))
    holder = subprocess.Popen(
        program("store_pin_holder", redis_url, "1.0"), stdout=subprocess.PIPE, text=True
    )
    try:
        key = holder.stdout.readline().strip()
        assert key and store.client.exists(key)
        load(store, "M", vecs(2))
        time.sleep(1.5)  # renewed meanwhile: the holder is alive
        assert store.client.exists(key) and gens(store, "M") == {2: "live", 1: "pinned"}
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        wait_until(
            lambda: not store.client.exists(key), timeout=5, what="the dead holder's pin to expire"
        )
        assert np.array_equal(rows(store, first), vecs(1))  # expired, not yet collected
        out = cli(redis_url, "models", "history", "M")
        assert "deleted generation 1: no pin holds it any more" in out.stderr
        assert [line.split()[:2] for line in out.stdout.splitlines()[1:]] == [["2", "live"]]
        assert store.fetch(first, WORDS) == [None] * 3
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def test_the_worker_user_reads_a_pinned_generation_and_holds_its_pin_only(store, redis_url):
    store.client.execute_command(*setuser_line("worker", user="w", password="wpw").split())
    store.client.execute_command(
        *setuser_line("worker", user="wm", password="wpw", model="M").split()
    )
    pool = store.client.connection_pool
    try:
        for seed, user in enumerate(("w", "wm")):
            first = load(store, "M", vecs(seed))
            kwargs = {**pool.connection_kwargs, "username": user, "password": "wpw"}
            worker = Store(redis.Redis(connection_pool=type(pool)(pool.connection_class, **kwargs)))
            pin = Pin.take(worker, "M", lease=5)
            load(store, "M", vecs(9))
            assert pin.info == first and np.array_equal(rows(worker, first), vecs(seed))
            assert pin.holds()
            pin.confirm()
            assert pin.renew()
            with pytest.raises(redis.exceptions.NoPermissionError):
                worker.client.set(f"{first.prefix}:king", b"x")  # no vector writes
            with pytest.raises(redis.exceptions.NoPermissionError):
                worker.client.hset("vecserve:models", "M", "{}")
            with pytest.raises(redis.exceptions.NoPermissionError):
                worker.client.delete(f"{pin.info.prefix}:king")
            with pytest.raises(PermissionDenied, match="Redis user"):
                collect(worker, "M")  # collecting is a writer's job
            pin.release()
            worker.close()
            assert collect(store, "M") == [pin.info]
    finally:
        for seed, user in enumerate(("w", "wm")):
            first = load(store, "M", vecs(seed))
            store.client.execute_command("ACL", "DELUSER", user)


def test_pins_on_a_cluster(cluster_store):
    first = load(cluster_store, "M", vecs(1))
    pin = Pin.take(cluster_store, "M", lease=5)
    load(cluster_store, "M", vecs(2))
    load(cluster_store, "M", vecs(3))
    assert gens(cluster_store, "M") == {3: "live", 1: "pinned"}
    assert np.array_equal(rows(cluster_store, first), vecs(1))
    assert pin.renew()
    pin.release()
    assert collect(cluster_store, "M") == [first]
    assert cluster_store.fetch(first, WORDS) == [None] * 3


def test_an_asyncio_task_keeps_a_pin_and_its_confirm_tells_when_it_is_gone(store, redis_url):
    import asyncio

    import redis.asyncio

    from vecserve.store.asyncwire import arun
    from vecserve.store.pins import keep_alive_async

    load(store, "M", vecs(1))
    pin = Pin.take(store, "M", lease=0.3)

    async def main():
        aclient = redis.asyncio.Redis.from_url(redis_url)

        def run(steps):
            return arun(steps, aclient, redis_url)

        task = asyncio.create_task(keep_alive_async(pin, run))
        await asyncio.sleep(1.0)  # three leases: renewed all along
        assert pin.holds() and store.client.exists(pin.key)
        await run(pin.confirm_steps())
        task.cancel()
        await asyncio.sleep(0.4)
        assert not store.client.exists(pin.key)
        with pytest.raises(PinLost):
            await run(pin.confirm_steps())
        await aclient.aclose()

    asyncio.run(main())


def test_cleanup_collects_what_no_pin_holds(store, redis_url):
    load(store, "M", vecs(1))
    pin = Pin.take(store, "M")
    load(store, "M", vecs(2))
    assert cli(redis_url, "models", "cleanup").stdout.strip() == "nothing to clean up"
    pin.release()
    out = cli(redis_url, "models", "cleanup").stdout.strip()
    assert out == "deleted generation 1 of M (no pin holds it)"
    assert gens(store, "M") == {2: "live"}
