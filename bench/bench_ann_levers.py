"""HNSW levers at GoogleNews scale: build time, recall@10 and latency per setting.

Standalone (NumPy + usearch only, no Redis), so it also runs on a bare machine. A
clustered matrix like ``bench_api.make_model`` (``--clusters`` centres + noise; rows unit
length), ``--queries`` rows as queries; the exact top 10 (self excluded) by blocked
matrix products. Each setting ``dtype:M:ef_add`` is built with ``--threads`` threads;
then for each ``ef_search`` the queries run one at a time on one thread the way
vecserve's ``AnnIndex`` answers: ``oversample x 11`` candidates re-scored exactly in
float32, self dropped, top 10 kept. Prints one Markdown table.

Usage::

    flock /tmp/vecserve-bench.lock python bench/bench_ann_levers.py --n 3000000 \\
        --configs f16:16:128,i8:16:128,i8:24:128 --threads 2
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def make(n: int, dim: int, clusters: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    out = np.empty((n, dim), dtype=np.float32)
    for lo in range(0, n, 100_000):
        hi = min(lo + 100_000, n)
        k = rng.integers(0, clusters, hi - lo)
        out[lo:hi] = centres[k] + 0.8 * rng.standard_normal((hi - lo, dim), dtype=np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


def exact_top(x: np.ndarray, qi: np.ndarray, k: int = 10) -> np.ndarray:
    q = x[qi]
    best_s = np.full((len(qi), k + 1), -np.inf, np.float32)
    best_i = np.zeros((len(qi), k + 1), np.int64)
    for lo in range(0, len(x), 200_000):
        s = q @ x[lo : lo + 200_000].T
        part = np.argpartition(-s, k, axis=1)[:, : k + 1]
        ps = np.take_along_axis(s, part, 1)
        s_all = np.concatenate([best_s, ps], 1)
        i_all = np.concatenate([best_i, part + lo], 1)
        top = np.argsort(-s_all, axis=1)[:, : k + 1]
        best_s = np.take_along_axis(s_all, top, 1)
        best_i = np.take_along_axis(i_all, top, 1)
    pairs = zip(best_i, qi, strict=True)
    return np.array([[i for i in row if i != own][:k] for row, own in pairs])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3_000_000)
    ap.add_argument("--dim", type=int, default=300)
    ap.add_argument("--clusters", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--oversample", type=int, default=2)
    ap.add_argument("--configs", default="f16:16:128,i8:16:128")
    ap.add_argument("--ef-search", default="64,128,256")
    args = ap.parse_args()
    from usearch.index import Index

    t0 = time.perf_counter()
    x = make(args.n, args.dim, args.clusters)
    qi = np.random.default_rng(1).choice(args.n, args.queries, replace=False)
    truth = exact_top(x, qi)
    # the exact engine's query time, one query at a time (a BLAS matrix-vector product)
    t = time.perf_counter()
    for i in qi[:20]:
        s = x @ x[i]
        np.argpartition(-s, 11)[:11]
    exact_ms = (time.perf_counter() - t) / 20 * 1000
    made = time.perf_counter() - t0
    print(f"data {args.n:,} x {args.dim}, {args.clusters} clusters, made in {made:.0f}s; "
          f"exact query {exact_ms:.1f} ms\n", flush=True)  # fmt: skip
    print("| dtype | M | ef_add | build s | threads | ef_search | recall@10 | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    keys = np.arange(args.n, dtype=np.uint64)
    for cfg in args.configs.split(","):
        dtype, m, ef_add = cfg.split(":")
        index = Index(ndim=args.dim, metric="ip", dtype=dtype, connectivity=int(m),
                      expansion_add=int(ef_add))  # fmt: skip
        t = time.perf_counter()
        for lo in range(0, args.n, 50_000):
            index.add(keys[lo : lo + 50_000], x[lo : lo + 50_000], threads=args.threads)
        build = time.perf_counter() - t
        want = args.oversample * 11
        for ef in (int(e) for e in args.ef_search.split(",")):
            index.expansion_search = ef
            lat, hits = [], 0
            for row, i in enumerate(qi):
                t = time.perf_counter()
                cand = index.search(x[i], want, threads=1).keys.astype(np.int64)
                scores = x[cand] @ x[i]
                order = cand[np.argsort(-scores)]
                top = [c for c in order if c != i][:10]
                lat.append(time.perf_counter() - t)
                hits += len(set(top) & set(truth[row].tolist()))
            p50, p99 = np.percentile(np.array(lat) * 1000, [50, 99])
            recall = hits / (10 * len(qi))
            print(f"| {dtype} | {m} | {ef_add} | {build:.0f} | {args.threads} | {ef} "
                  f"| {recall:.3f} | {p50:.2f} | {p99:.2f} |", flush=True)  # fmt: skip
        del index


if __name__ == "__main__":
    main()
