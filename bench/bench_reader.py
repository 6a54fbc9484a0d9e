"""The read path against its floor: single words vs a raw GET, batches vs a raw MGET,
the asyncio client vs the sync one, and the event loop's worst lag.

Starts its own throw-away valkey-server on a unix socket, loads a random 300-d model of
100,000 tokens, then measures, in one run:

1. **Single words, uncached**: ``kv[word]`` (the registry entry checked in the same round
   trip) against a raw ``GET`` of the word's key, both on a raw connection (the floor:
   a hand-written request, hiredis reply parsing) and through redis-py's ``client.get``;
   and a raw ``GET`` + ``HGET`` of the entry in one request (the floor of a checked read).
2. **1000-word batches, uncached**: ``kv[words]`` against a raw ``MGET`` +
   ``np.frombuffer``, both ways.
3. **Throughput** at 1, 8 and 64 concurrent callers, each asking 100-word batches:
   RedisKeyedVectors on N threads against AsyncRedisKeyedVectors on N coroutines of one
   event loop (words per second; the median of 5 alternating slices of each).
4. **The event loop's worst lag** while 10,000-word batches are read by the asyncio
   client: a ticker coroutine sleeps 1 ms at a time and records how late it wakes; and
   the longest the loop spent in one callback, in its thread's CPU time (the wall-clock
   lag also counts the machine's scheduling: on a busy 2-core box, milliseconds).

Run (the machine is shared: take the lock)::

    flock /tmp/vecserve-bench.lock .venv/bin/python bench/bench_reader.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import redis

from vecserve import AsyncRedisKeyedVectors, RedisKeyedVectors
from vecserve.embedded import ValkeyProcess
from vecserve.loader import load_arrays
from vecserve.store import Store
from vecserve.store.resp import pack

SLICES = 5


def compare(calls: dict, *, seconds: float) -> dict[str, float]:
    """Median seconds a call of each ``name: (fn, args)``, measured in interleaved rounds
    of 20 calls, so a busy machine slows every contender alike. Each contender cycles
    through its own share of ``args``: a word another contender has just read is in the
    server's CPU caches, and the first contender of a round would pay for the others'
    (a raw GET measured 7% slower first in a round than after itself)."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    shares = {name: args[j :: len(calls)] for j, (name, (_, args)) in enumerate(calls.items())}
    start = time.perf_counter()
    i = 0
    while time.perf_counter() - start < seconds or len(samples[next(iter(calls))]) < 5:
        for name, (fn, _) in calls.items():
            mine = shares[name]
            t = time.perf_counter()
            for k in range(20):
                fn(mine[(i + k) % len(mine)])
            samples[name].append((time.perf_counter() - t) / 20)
        i += 20
    return {name: statistics.median(v) for name, v in samples.items()}


def sync_throughput(kv, batches, callers: int, seconds: float) -> float:
    done = [0] * callers
    stop = time.perf_counter() + seconds

    def work(n):
        i = n
        while time.perf_counter() < stop:
            kv.get_vectors(batches[i % len(batches)])
            done[n] += 1
            i += callers

    threads = [threading.Thread(target=work, args=(n,)) for n in range(callers)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sum(done) * len(batches[0]) / (time.perf_counter() - t)


async def async_throughput(kv, batches, callers: int, seconds: float) -> float:
    done = [0] * callers
    stop = time.perf_counter() + seconds

    async def work(n):
        i = n
        while time.perf_counter() < stop:
            await kv.get_vectors(batches[i % len(batches)])
            done[n] += 1
            i += callers

    t = time.perf_counter()
    await asyncio.gather(*(work(n) for n in range(callers)))
    return sum(done) * len(batches[0]) / (time.perf_counter() - t)


async def worst_lag(kv, words, rounds: int) -> tuple[float, float, float]:
    """(worst, median) lateness of a 1 ms ticker while ``rounds`` batches of ``words`` are
    read, and the longest the loop spent in one callback, in CPU time of its thread (what
    the client holds the loop for, without the machine's scheduling noise)."""
    lags = []
    running = True
    longest = 0.0
    run = asyncio.events.Handle._run

    def timed(handle):  # every callback the loop runs, and its CPU time
        nonlocal longest
        t = time.thread_time()
        run(handle)
        longest = max(longest, time.thread_time() - t)

    async def ticker():
        while running:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - t - 0.001)

    tick = asyncio.ensure_future(ticker())
    await asyncio.sleep(0.01)
    asyncio.events.Handle._run = timed
    try:
        for _ in range(rounds):
            await kv.get_vectors(words)
    finally:
        asyncio.events.Handle._run = run
    running = False
    await tick
    return max(lags), statistics.median(lags), longest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=2.0, help="per throughput point")
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    tokens = [f"tok{i}_{'x' * int(rng.integers(0, 8))}" for i in range(args.vocab)]
    vectors = rng.standard_normal((args.vocab, args.dim)).astype(np.float32)
    singles = [tokens[i] for i in rng.integers(0, args.vocab, 6000)]
    thousands = [[tokens[i] for i in rng.integers(0, args.vocab, 1000)] for _ in range(60)]
    hundreds = [[tokens[i] for i in rng.integers(0, args.vocab, 100)] for _ in range(500)]
    big = [tokens[i] for i in rng.integers(0, args.vocab, 10_000)]

    tmp = tempfile.TemporaryDirectory(prefix="vecserve-bench-")
    server = ValkeyProcess(tmp.name, port=0, unixsocket=Path(tmp.name) / "v.sock").start()
    out: dict = {}
    try:
        store = Store.from_url(server.url)
        load_arrays(tokens, vectors, name="BENCH", store=store, progress=False)
        kv = RedisKeyedVectors("BENCH", store=store)
        client = redis.Redis.from_url(server.url)
        kv[singles[0]]  # connected, the entry known

        def raw_get(word):  # the floor: one GET, packed by hand, on the same raw connection
            key = b"BENCH:" + word.encode()
            return store.request(b"*2\r\n$3\r\nGET\r\n$%d\r\n%b\r\n" % (len(key), key), 1)[0]

        def raw_mget(words):
            (vals,) = store.request(pack([("MGET", *[b"BENCH:" + w.encode() for w in words])]), 1)
            return np.frombuffer(b"".join(vals), "<f4").reshape(len(words), args.dim)

        def redispy_mget(words):
            vals = client.mget([b"BENCH:" + w.encode() for w in words])
            return np.frombuffer(b"".join(vals), "<f4").reshape(len(words), args.dim)

        np.testing.assert_array_equal(kv[thousands[0]], raw_mget(thousands[0]))
        hget = pack([("HGET", "vecserve:models", "BENCH")])

        def raw_get_hget(word):  # the floor of a checked read: GET + HGET, one request
            key = b"BENCH:" + word.encode()
            head = b"*2\r\n$3\r\nGET\r\n$%d\r\n%b\r\n" % (len(key), key)
            return np.frombuffer(store.request(head + hget, 2)[0], "<f4")

        def redispy_get(word):
            return client.get(b"BENCH:" + word.encode())

        compare({"w": (kv.__getitem__, singles), "g": (raw_get, singles)}, seconds=0.5)  # warm
        out.update(
            compare(
                {
                    "kv_single": (kv.__getitem__, singles),
                    "get_raw": (raw_get, singles),
                    "get_hget_raw": (raw_get_hget, singles),
                    "get_redispy": (redispy_get, singles),
                },
                seconds=3 * args.seconds,
            )
        )
        out.update(
            compare(
                {
                    "kv_batch": (kv.__getitem__, thousands),
                    "mget_raw": (raw_mget, thousands),
                    "mget_redispy": (redispy_mget, thousands),
                },
                seconds=3 * args.seconds,
            )
        )

        akv = AsyncRedisKeyedVectors("BENCH", store=store)
        loop = asyncio.new_event_loop()
        loop.run_until_complete(akv.get_vector(singles[0]))
        out["throughput"] = []
        for callers in (1, 8, 64):
            s, a = [], []
            for _ in range(SLICES):  # alternating slices: a busy machine slows both alike
                s.append(sync_throughput(kv, hundreds, callers, args.seconds / SLICES))
                a.append(
                    loop.run_until_complete(
                        async_throughput(akv, hundreds, callers, args.seconds / SLICES)
                    )
                )
            out["throughput"].append((callers, statistics.median(s), statistics.median(a)))
        out["lag"] = loop.run_until_complete(worst_lag(akv, big, 20))
        out["lag_small"] = loop.run_until_complete(worst_lag(akv, hundreds[0], 500))
        loop.run_until_complete(akv.aclose())
        loop.close()
        kv.close()
        client.close()
        store.close()
    finally:
        server.stop()
        tmp.cleanup()

    def us(s):
        return f"{s * 1e6:,.1f}"

    print(f"model: {args.vocab:,} x {args.dim} float32; valkey-server on a unix socket\n")
    print("| lookup (uncached) | vecserve | raw, same connection | ratio | redis-py | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    print(
        f"| one word: `kv[w]` vs `GET` | {us(out['kv_single'])} us | {us(out['get_raw'])} us "
        f"| {out['kv_single'] / out['get_raw']:.2f}x | {us(out['get_redispy'])} us "
        f"| {out['kv_single'] / out['get_redispy']:.2f}x |"
    )
    print(
        f"| 1000 words: `kv[ws]` vs `MGET` + frombuffer | {us(out['kv_batch'])} us "
        f"| {us(out['mget_raw'])} us | {out['kv_batch'] / out['mget_raw']:.2f}x "
        f"| {us(out['mget_redispy'])} us | {out['kv_batch'] / out['mget_redispy']:.2f}x |"
    )
    print(
        f"\nthe floor of a checked word: raw `GET` + `HGET` of the entry in one request, "
        f"+ frombuffer: {us(out['get_hget_raw'])} us ({out['get_hget_raw'] / out['get_raw']:.2f}x "
        f"the raw `GET`)"
    )
    print(
        "\n| callers (100-word batches) | sync, threads (words/s) | asyncio, coroutines "
        "(words/s) | async / sync |"
    )
    print("|---:|---:|---:|---:|")
    for callers, s, a in out["throughput"]:
        print(f"| {callers} | {s:,.0f} | {a:,.0f} | {a / s:.2f}x |")
    worst, median, longest = out["lag"]
    sworst, smedian, slongest = out["lag_small"]
    print(
        f"\nevent loop, 1 ms ticker: while 10,000-word batches are read: worst lag "
        f"{worst * 1e3:.2f} ms, median {median * 1e3:.3f} ms, longest callback "
        f"{longest * 1e3:.2f} ms of CPU; while 100-word batches are read: worst "
        f"{sworst * 1e3:.2f} ms, median {smedian * 1e3:.3f} ms, longest callback "
        f"{slongest * 1e3:.2f} ms of CPU"
    )
    print(f"\n{os.getloadavg()[0]:.2f} load average (1 min) at the end")


if __name__ == "__main__":
    main()
