"""Lookup latency: gensim in memory vs the old bz2(pickle) GETs vs RedisKeyedVectors.

Starts its own throw-away valkey-server (TCP loopback), loads a random 300-d model of
100,000 tokens with ``load_arrays``, then times, for batches of 1, 10, 100 and 1000 words
drawn with a Zipf law over the vocabulary:

- gensim ``KeyedVectors`` in memory: ``kv[word]`` / ``kv[words]``
- the old approach: one ``GET`` per word of ``bz2(pickle(vector))``
- raw ``MGET`` + ``np.frombuffer`` (the floor for one round trip)
- ``RedisKeyedVectors`` uncached, and cached (warm)

Run (the machine is shared: take the lock)::

    flock /tmp/vecserve-bench.lock /tmp/venv/bin/python bench/bench_lookup.py
"""

from __future__ import annotations

import argparse
import bz2
import pickle
import statistics
import tempfile
import time

import numpy as np
import redis
from gensim.models import KeyedVectors

from vecserve.embedded import ValkeyProcess, free_port
from vecserve.keyedvectors import RedisKeyedVectors
from vecserve.loader import load_arrays
from vecserve.store import Store


def timed(fn, batches, *, min_seconds=0.3, max_rounds=2000) -> float:
    """Median seconds per call of ``fn(batch)`` over cycling batches."""
    samples = []
    start = time.perf_counter()
    i = 0
    while (time.perf_counter() - start < min_seconds or len(samples) < 5) and i < max_rounds:
        b = batches[i % len(batches)]
        t = time.perf_counter()
        fn(b)
        samples.append(time.perf_counter() - t)
        i += 1
    return statistics.median(samples)


def timed_single(fn, words, *, repeat=20_000) -> float:
    """Per-call seconds of a tight loop of ``fn(word)`` (for sub-microsecond calls)."""
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for w in words[:repeat]:
            fn(w)
        best = min(best, (time.perf_counter() - t) / min(repeat, len(words)))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    tokens = [f"tok{i}_{'x' * int(rng.integers(0, 8))}" for i in range(args.vocab)]
    vectors = rng.standard_normal((args.vocab, args.dim)).astype(np.float32)
    ranks = np.minimum(rng.zipf(1.1, 400_000), args.vocab) - 1
    draws = [tokens[i] for i in ranks]

    tmp = tempfile.TemporaryDirectory(prefix="vecserve-bench-")
    server = ValkeyProcess(tmp.name, port=free_port()).start()
    try:
        store = Store.from_url(server.url)
        t = time.perf_counter()
        load_arrays(tokens, vectors, name="BENCH", store=store, progress=False)
        load_s = time.perf_counter() - t
        raw = redis.Redis.from_url(server.url)
        # the old approach: bz2(pickle) per key, for the words we will ask for
        needed = sorted(set(draws[:60_000]))
        pipe = raw.pipeline(transaction=False)
        index = {w: i for i, w in enumerate(tokens)}
        for w in needed:
            pipe.set(f"OLD:{w}", bz2.compress(pickle.dumps(vectors[index[w]])))
        pipe.execute()

        gkv = KeyedVectors(args.dim)
        gkv.add_vectors(tokens, vectors)
        rkv = RedisKeyedVectors("BENCH", store=store)
        ckv = RedisKeyedVectors("BENCH", store=store, cache=100_000)
        ckv.get_vector(tokens[0])
        assert ckv._cache.wait_ready(5)

        def old(batch):
            return np.vstack([pickle.loads(bz2.decompress(raw.get(f"OLD:{w}"))) for w in batch])

        def raw_mget(batch):
            vals = raw.mget([f"BENCH:{w}" for w in batch])
            return np.frombuffer(b"".join(vals), dtype="<f4").reshape(len(batch), args.dim)

        rows = []
        for size in (1, 10, 100, 1000):
            batches = [draws[i : i + size] for i in range(0, 60_000 - size, size)][:200]
            if size == 1:
                words = [b[0] for b in batches] * 100
                ckv[words[:20_000]]  # warm
                res = {
                    "gensim": timed_single(gkv.__getitem__, words),
                    "old": timed(lambda b: old(b), batches),
                    "mget": timed(raw_mget, batches),
                    "uncached": timed(lambda b: rkv[b[0]], batches),
                    "cached": timed_single(ckv.__getitem__, words),
                }
            else:
                for b in batches:
                    ckv[b]  # warm
                res = {
                    "gensim": timed(gkv.__getitem__, batches),
                    "old": timed(old, batches, min_seconds=1.0 if size < 1000 else 2.0),
                    "mget": timed(raw_mget, batches),
                    "uncached": timed(rkv.__getitem__, batches),
                    "cached": timed(ckv.__getitem__, batches),
                }
            rows.append((size, res))
        # correctness spot check
        b = draws[:1000]
        np.testing.assert_array_equal(rkv[b], gkv[b])
        np.testing.assert_array_equal(ckv[b], gkv[b])
        stats = ckv._cache.stats()
        rkv.close()
        ckv.close()
        raw.close()
        store.close()
    finally:
        server.stop()
        tmp.cleanup()

    def us(s):
        return f"{s * 1e6:,.1f}" if s < 1e-3 else f"{s * 1e6:,.0f}"

    print(
        f"model: {args.vocab:,} x {args.dim} float32 (f32 codec), loaded in {load_s:.1f}s; "
        f"valkey-server on loopback TCP; cache {stats['size']:,} entries"
    )
    print()
    print(
        "| batch | gensim in-memory | old bz2(pickle) GETs | raw MGET+frombuffer "
        "| RKV uncached | RKV cached | old / uncached | uncached / MGET | cached / gensim |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size, r in rows:
        print(
            f"| {size} | {us(r['gensim'])} | {us(r['old'])} | {us(r['mget'])} "
            f"| {us(r['uncached'])} | {us(r['cached'])} | {r['old'] / r['uncached']:.0f}x "
            f"| {r['uncached'] / r['mget']:.2f}x | {r['cached'] / r['gensim']:.1f}x |"
        )
    print(
        "\n(times in microseconds per call, median; single-word gensim/cached: best of 5 "
        "tight loops)"
    )


if __name__ == "__main__":
    main()
