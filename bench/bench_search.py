"""Similarity search at the users' scale: exact and approximate, single queries and
batches, against gensim's ``KeyedVectors.most_similar`` in RAM, in one run.

Data sets (``--data``, comma-separated):

- ``real``: word vectors trained by vecserve's own trainer: the word2vec files given by
  ``--real`` (``vecserve train ... --save FILE``), else skip-gram, 100 dims, ``min_count``
  2, 3 epochs on ``../shared/data/wiki100m.zip``, trained once and cached under
  ``--cache`` (about a minute on 2 cores);
- ``1m``, ``3m``: 1,000,000 or 3,000,000 rows x ``--dim`` (300) generated as in
  ``bench_ann_levers.py``: 1,000 Gaussian centres + 0.8 noise, unit rows.

For each set, every figure from the same array in the same process: gensim's
``most_similar(word, topn=10)`` one query after another (over a ``KeyedVectors`` sharing
the array: in RAM), vecserve's exact :meth:`SimilarityIndex.most_similar` one at a time
(the two interleaved, query by query)
and :meth:`SimilarityIndex.most_similar_batch` for ``--batch`` queries at once (answers
checked equal to gensim's: words and scores; with the int8 first pass where the CPU has
AVX-512 VNNI, and with the float32 one, each with the rate of its multiply-adds), and
the approximate index (:class:`AnnIndex`, default parameters, built into a temporary
directory; ``--no-ann`` skips it): recall@10 against the exact answers, p50/p99 one at a
time, and queries/s of a batch.

Memory: a 3M x 300 set is 3.6 GB, shared by gensim and vecserve, plus the approximate
index's int8 copy (0.9 GB). Run it under the bench lock::

    flock /tmp/vecserve-bench.lock python bench/bench_search.py --data real,1m,3m
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

#: Approximate batches timed (the median is reported).
BATCH_RUNS = 5

CORPUS = Path(__file__).resolve().parents[1] / ".." / ".." / "shared" / "data" / "wiki100m.zip"


def real_vectors(cache: Path, corpus: Path) -> tuple[list[str], np.ndarray]:
    """The trained wiki100m vectors (training them first if they are not cached)."""
    npy = cache / "wiki100m-mc2-d100.npy"
    words = cache / "wiki100m-mc2-d100.words.json"
    if not (npy.exists() and words.exists()):
        from vecserve.train import Word2Vec

        cache.mkdir(parents=True, exist_ok=True)
        text = cache / "wiki100m"
        if not text.exists():
            with zipfile.ZipFile(corpus) as z:
                z.extract("wiki100m", cache)
        start = time.perf_counter()
        model = Word2Vec(
            str(text), vector_size=100, min_count=2, epochs=3, sg=1, sample=1e-4, workers=2, seed=1
        )
        print(f"trained {len(model.vocab.words):,} words in {time.perf_counter() - start:.0f} s")
        words.write_text(json.dumps(list(model.vocab.words)))
        tmp = npy.with_name(".tmp.npy")
        np.save(tmp, model.syn0)
        os.replace(tmp, npy)
    return json.loads(words.read_text()), np.load(npy)


def word2vec_file(path: Path) -> tuple[list[str], np.ndarray]:
    """The words and float32 vectors of a word2vec file (binary if it ends in ``.bin``)."""
    from gensim.models import KeyedVectors

    kv = KeyedVectors.load_word2vec_format(str(path), binary=path.suffix == ".bin")
    return list(kv.index_to_key), np.ascontiguousarray(kv.vectors, dtype=np.float32)


def generated(n: int, dim: int, clusters: int = 1000, seed: int = 0) -> np.ndarray:
    """Unit rows: ``clusters`` Gaussian centres + 0.8 noise (bench_ann_levers' data)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    out = np.empty((n, dim), dtype=np.float32)
    for lo in range(0, n, 100_000):
        hi = min(lo + 100_000, n)
        block = centres[rng.integers(0, clusters, hi - lo)]
        block += 0.8 * rng.standard_normal((hi - lo, dim), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[lo:hi] = block
    return out


def timed(fn, items) -> tuple[list, np.ndarray]:
    out, times = [], []
    for item in items:
        start = time.perf_counter()
        out.append(fn(item))
        times.append(time.perf_counter() - start)
    return out, np.asarray(times)


def pct(times: np.ndarray) -> str:
    return f"{np.percentile(times, 50) * 1e3:.2f} / {np.percentile(times, 99) * 1e3:.2f}"


def run(name: str, words: list[str], vectors: np.ndarray, args) -> None:
    from gensim.models import KeyedVectors
    from vecserve.search._exact import VNNI

    from vecserve.search.ann import AnnIndex, AnnParams, recall_at_k
    from vecserve.search.snapshot import SimilarityIndex

    n, dim = vectors.shape
    print(f"\n## {name}: {n:,} x {dim}")
    kv = KeyedVectors(dim, count=0, dtype=np.float32)
    kv.index_to_key = words
    kv.key_to_index = {w: i for i, w in enumerate(words)}
    kv.vectors = vectors
    kv.fill_norms()
    sim = SimilarityIndex(words, vectors, kv.norms, name=name)
    rng = np.random.default_rng(1)
    asked = [words[int(i)] for i in rng.choice(n, max(args.batch, args.queries), replace=False)]
    singles = asked[: args.queries]
    sim.most_similar(singles[0])  # first-use costs out of the timings
    kv.most_similar(singles[0])
    rows = []

    # interleaved, query by query: both see the same moments of the box's other load
    want, got, t_gensim, t_exact = [], [], [], []
    for w in singles:
        (a,), (ta,) = timed(lambda w: kv.most_similar(w, topn=10), [w])
        (b,), (tb,) = timed(lambda w: sim.most_similar(w, topn=10), [w])
        want.append(a), got.append(b), t_gensim.append(ta), t_exact.append(tb)
    t_gensim, t_exact = np.asarray(t_gensim), np.asarray(t_exact)
    rows.append(("gensim in RAM, one at a time", pct(t_gensim), len(singles) / t_gensim.sum(), ""))
    same = sum(g == w for g, w in zip(got, want, strict=True))
    rows.append(
        (
            "exact, one at a time",
            pct(t_exact),
            len(singles) / t_exact.sum(),
            f"{same}/{len(singles)} equal to gensim",
        )
    )

    batch = [{"positive": [w], "topn": 10} for w in asked[: args.batch]]
    default = sim.exact.first_pass  # int8 for large matrices where the CPU has VNNI
    for first in ["int8", "float32"] if VNNI else ["float32"]:
        sim.exact.first_pass = first
        start = time.perf_counter()
        sim.most_similar_batch(batch[:2])  # one-off: the probe of the matrix, the int8 rows
        t_first = time.perf_counter() - start
        start = time.perf_counter()
        got_b = sim.most_similar_batch(batch)
        t_batch = time.perf_counter() - start
        same_b = sum(g == w for g, w in zip(got_b[: len(singles)], want, strict=True))
        ops = 2 * len(batch) * n * dim / t_batch / 1e9  # the pass's multiply-adds, x2
        what = f"exact, batches of {len(batch)}, {first} pass"
        what += " (the default)" if first == default else ""
        rows.append(
            (
                what,
                "",
                len(batch) / t_batch,
                f"{same_b}/{len(singles)} equal to gensim; {ops:.0f} GOP/s; "
                f"first use {t_first:.1f} s",
            )
        )
    sim.exact.first_pass = default

    if args.redis and n < 1_000_000:
        rows += through_redis(words, vectors, singles, batch, want, args, kv)

    with tempfile.TemporaryDirectory(dir=args.cache) as tmp:
        if not args.ann:
            return report(rows)
        start = time.perf_counter()
        ann = AnnIndex.build(sim, path=Path(tmp) / AnnParams().resolved(n).filename)
        build = time.perf_counter() - start
        exact_words = [[w for w, _ in r] for r in got_b]
        approx, t_ann = timed(lambda w: ann.most_similar(sim, [w], [], 10), singles)
        recall = recall_at_k(exact_words[: len(singles)], [[w for w, _ in r] for r in approx])
        rows.append(
            (
                f"approximate ({ann.params.kind}), one at a time",
                pct(t_ann),
                len(singles) / t_ann.sum(),
                f"recall@10 {recall:.3f}",
            )
        )
        asked_b = [([w], [], 10) for w in asked[: args.batch]]
        ann.most_similar_batch(sim, asked_b[:2])
        t_all = []
        for _ in range(BATCH_RUNS):  # the median of a few: one batch is ~50 ms on a busy box
            start = time.perf_counter()
            got_ab = ann.most_similar_batch(sim, asked_b)
            t_all.append(time.perf_counter() - start)
        t_ab = float(np.median(t_all))
        recall_b = recall_at_k(exact_words, [[w for w, _ in r] for r in got_ab])
        meta = ann.meta.to_json()
        settings = {k: v for k, v in meta.items() if k in ("nlist", "recall_at_10")}
        settings.update(meta.get("target", {}).get("setting", {}))
        rows.append(
            (
                f"approximate, batches of {len(batch)} (median of {BATCH_RUNS})",
                "",
                len(batch) / t_ab,
                f"recall@10 {recall_b:.3f}; built in {build:.0f} s {settings}",
            )
        )

    report(rows)


def report(rows) -> None:
    print(f"(load average {os.getloadavg()[0]:.1f})")
    base = rows[0][2]
    print("\n| search | p50 / p99 ms | queries/s | vs gensim | answers |")
    print("|---|---:|---:|---:|---|")
    for what, p, qps, note in rows:
        print(f"| {what} | {p} | {qps:,.1f} | {qps / base:.2f}x | {note} |")


def through_redis(words, vectors, singles, batch, want, args, kv) -> list[tuple]:
    """The same queries through ``RedisKeyedVectors`` (a throw-away valkey-server, the
    model loaded into it, the local snapshot built from it), single ones interleaved
    with gensim's (``kv``)."""
    from vecserve.embedded import ValkeyProcess, free_port
    from vecserve.keyedvectors import RedisKeyedVectors
    from vecserve.loader import load_arrays
    from vecserve.store import Store

    with tempfile.TemporaryDirectory(dir=args.cache) as tmp:
        server = ValkeyProcess(Path(tmp) / "valkey", port=free_port()).start()
        try:
            store = Store.from_url(server.url)
            load_arrays(words, vectors, name="BENCH", store=store)
            rkv = RedisKeyedVectors("BENCH", store=store, cache_dir=Path(tmp) / "snap")
            rkv.most_similar(singles[0])  # builds the snapshot
            got, times, t_gensim = [], [], []
            for w in singles:  # interleaved with gensim in RAM, query by query
                (a,), (ta,) = timed(lambda w: rkv.most_similar(w, topn=10), [w])
                _, (tb,) = timed(lambda w: kv.most_similar(w, topn=10), [w])
                got.append(a), times.append(ta), t_gensim.append(tb)
            times, t_gensim = np.asarray(times), np.asarray(t_gensim)
            same = sum(g == w for g, w in zip(got, want, strict=True))
            rkv.most_similar_batch(batch[:2])
            start = time.perf_counter()
            got_b = rkv.most_similar_batch(batch)
            t_batch = time.perf_counter() - start
            same_b = sum(g == w for g, w in zip(got_b[: len(want)], want, strict=True))
            rkv.close()
            store.close()
        finally:
            server.stop()
    return [
        (
            "`RedisKeyedVectors.most_similar`",
            pct(times),
            len(singles) / times.sum(),
            f"{same}/{len(singles)} equal to gensim; gensim interleaved: p50 "
            f"{np.median(t_gensim) * 1e3:.2f} ms, {len(singles) / t_gensim.sum():.1f} q/s",
        ),
        (
            f"`RedisKeyedVectors.most_similar_batch` of {len(batch)}",
            "",
            len(batch) / t_batch,
            f"{same_b}/{len(singles)} equal to gensim",
        ),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data", default="real,1m,3m", help="real, 1m, 3m or a row count (comma-separated)"
    )
    ap.add_argument("--dim", type=int, default=300, help="dimensions of the generated sets")
    ap.add_argument("--queries", type=int, default=100, help="single queries timed")
    ap.add_argument("--batch", type=int, default=256, help="queries in one batch")
    ap.add_argument(
        "--cache",
        type=Path,
        default=Path("/tmp/vecserve-bench"),
        help="where the trained vectors and temporary indexes go",
    )
    ap.add_argument("--corpus", type=Path, default=CORPUS, help="wiki100m.zip")
    ap.add_argument(
        "--real",
        default="",
        help="word2vec files (comma-separated) that `real` measures instead of its own",
    )
    ap.add_argument(
        "--no-redis",
        dest="redis",
        action="store_false",
        help="skip the RedisKeyedVectors rows (sets under 1M rows)",
    )
    ap.add_argument(
        "--no-ann",
        dest="ann",
        action="store_false",
        help="exact search only (skip building the approximate index)",
    )
    args = ap.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    for name in args.data.split(","):
        if name == "real" and args.real:
            for path in args.real.split(","):
                words, vectors = word2vec_file(Path(path))
                run(f"real: {Path(path).name}", words, vectors, args)
        elif name == "real":
            words, vectors = real_vectors(args.cache, args.corpus)
            run("real: vecserve skip-gram on wiki100m, min_count 2", words, vectors, args)
        else:
            n = {"1m": 1_000_000, "3m": 3_000_000}.get(name) or int(name)
            vectors = generated(n, args.dim)
            words = [f"w{i}" for i in range(n)]
            run(f"generated: {name}, 1,000 Gaussian clusters", words, vectors, args)
        del vectors, words
        gc.collect()


if __name__ == "__main__":
    main()
