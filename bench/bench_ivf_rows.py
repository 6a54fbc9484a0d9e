"""The IVF's stored rows, float16 against int8 + scale, at the users' scale: queries/s of
batches, recall@10, and exact queries answered through the index, in one run.

Data: ``--rows`` unit rows x ``--dim`` generated as in ``bench_search.py`` (1,000
Gaussian centres + 0.8 noise). One IVF file of each row type is built over the same rows
(``--nlist`` lists; into ``--cache``, reused when present). Then, for each ``--nprobe``:

- recall@10 of ``--queries`` rows of the set (self excluded), each index's ``k = 22``
  candidates re-scored exactly, against the exact top 10 of the whole set;
- queries/s of batches of ``--batch`` (``IvfIndex.candidates``: the one C call a thread),
  the row types alternated batch by batch, median of ``--repeat``;

and exact single queries through each index (``AnnIndex.exact_most_similar``: the
answer proven the full scan's, else the full scan answers; checked equal to
``SimilarityIndex.most_similar``), p50 against the full scan's, with how many were proven.

Memory at 3M x 300: the set (3.6 GB), both files (1.7 + 0.9 GB), ~0.4 GB of scores while
the exact top 10 are found. Run it under the bench lock::

    flock /tmp/vecserve-bench.lock python bench/bench_ivf_rows.py --rows 3000000
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from bench_ann_levers import exact_top
from bench_search import generated

from vecserve.search.ann import AnnIndex
from vecserve.search.ivf import IvfIndex, default_nlist
from vecserve.search.snapshot import SimilarityIndex

KINDS = ("f16", "i8")
CANDIDATES = 22  # AnnIndex's for topn 10: oversample 2 x (10 + the query's own word)


def recall(index: IvfIndex, x: np.ndarray, rows: np.ndarray, truth: np.ndarray) -> float:
    cand = index.candidates(x[rows], CANDIDATES)
    hits = 0
    for j, row in enumerate(rows):
        c = cand[j][(cand[j] >= 0) & (cand[j] != row)]
        best = c[np.argsort(-(x[c] @ x[row]), kind="stable")[:10]]
        hits += len(set(best.tolist()) & set(truth[j].tolist()))
    return hits / (10 * len(rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=3_000_000, help="rows of the generated set")
    ap.add_argument("--dim", type=int, default=300, help="dimensions")
    ap.add_argument("--nlist", type=int, default=0, help="lists (0: vecserve's default)")
    ap.add_argument("--nprobe", default="4,8", help="lists scanned a query (comma-separated)")
    ap.add_argument("--queries", type=int, default=512, help="queries for recall")
    ap.add_argument("--batch", type=int, default=256, help="queries in one batch")
    ap.add_argument("--repeat", type=int, default=7, help="batches timed a row type")
    ap.add_argument("--exact", type=int, default=30, help="exact single queries timed")
    ap.add_argument("--cache", type=Path, default=Path("/tmp"), help="where the files go")
    args = ap.parse_args()

    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    args.cache.mkdir(parents=True, exist_ok=True)
    x = generated(args.rows, args.dim)
    nlist = args.nlist or default_nlist(args.rows)
    indexes = {}
    for kind in KINDS:
        path = args.cache / f"vecserve-ivf-rows-{args.rows}x{args.dim}-{nlist}-{kind}.ivf"
        if not path.exists():
            start = time.perf_counter()
            IvfIndex.build_arrays(x, path, nlist=nlist, dtype=kind)
            print(f"{kind}: built in {time.perf_counter() - start:.0f} s", flush=True)
        indexes[kind] = IvfIndex.open(path)
    rng = np.random.default_rng(1)
    rows = rng.choice(args.rows, max(args.queries, args.batch), replace=False)
    truth = exact_top(x, rows[: args.queries])

    print(f"\n{args.rows:,} x {args.dim}, {nlist} lists; batches of {args.batch}\n")
    print("| rows | nprobe | recall@10 | batch q/s | vs float16 | index MB |")
    print("|---|---:|---:|---:|---:|---:|")
    for nprobe in [int(n) for n in args.nprobe.split(",")]:
        rates = {kind: [] for kind in KINDS}
        for index in indexes.values():
            index.nprobe = nprobe
            index.candidates(x[rows[: args.batch]], CANDIDATES)  # the pages in
        for rep in range(args.repeat):
            batch = x[np.roll(rows, rep * 37)[: args.batch]]
            for kind, index in indexes.items():
                start = time.perf_counter()
                index.candidates(batch, CANDIDATES)
                rates[kind].append(args.batch / (time.perf_counter() - start))
        base = float(np.median(rates["f16"]))
        for kind, index in indexes.items():
            rate = float(np.median(rates[kind]))
            got = recall(index, x, rows[: args.queries], truth)
            print(
                f"| {kind} | {nprobe} | {got:.3f} | {rate:,.0f} | {rate / base:.2f}x "
                f"| {index.nbytes / 2**20:,.0f} |"
            )

    sim = SimilarityIndex.from_arrays([f"w{i}" for i in range(args.rows)], x)
    anns = {
        kind: AnnIndex(index, {"params": {"kind": "ivf", "dtype": kind}})
        for kind, index in indexes.items()
    }
    words = [f"w{r}" for r in rows[: args.exact + 1]]
    sim.most_similar(words[0])
    for ann in anns.values():
        ann.exact_most_similar(sim, [words[0]], [], 10)
    times = {"full scan": [], **{kind: [] for kind in KINDS}}
    proven = dict.fromkeys(KINDS, 0)
    for word in words[1:]:
        start = time.perf_counter()
        want = sim.most_similar(word, topn=10)
        times["full scan"].append(time.perf_counter() - start)
        for kind, ann in anns.items():
            start = time.perf_counter()
            got = ann.exact_most_similar(sim, [word], [], 10)
            proven[kind] += got is not None
            got = got if got is not None else sim.most_similar(word, topn=10)
            times[kind].append(time.perf_counter() - start)
            assert [w for w, _ in got] == [w for w, _ in want], (kind, word)
    print(f"\nexact single queries ({args.exact}, answers equal to the full scan's)\n")
    print("| through | p50 ms | proven | score bound |")
    print("|---|---:|---:|---:|")
    for name, spent in times.items():
        bound = f"{indexes[name].score_bound:.4f}" if name in indexes else ""
        done = f"{proven[name]} of {args.exact}" if name in proven else ""
        print(f"| {name} | {np.median(spent) * 1000:.1f} | {done} | {bound} |")
    print(f"\nload average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
