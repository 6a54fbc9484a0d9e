"""The search kernels built two ways, measured in one process: two builds of
``vecserve/search/_exact`` and ``_ivfscan`` (``--a DIR``, ``--b DIR``: each a directory
holding both ``.so`` files, e.g. ``python setup.py build_ext --build-lib DIR`` before and
after a change of flags), loaded side by side, every measurement alternated between them
call by call, so the box's load falls on both alike: quote the ratio b / a.

Measured over ``--rows`` generated unit rows x ``--dim`` (as ``bench_search.py``):

- ``top_k``: the k = 11 best of one query's ``--rows`` scores (an exact single query's
  heap, ``_topk.h``);
- an exact batch of ``--batch`` queries (``SimilarityIndex.most_similar_batch``: from
  300,000 rows the int8 first pass, ``QuantizedRows``, VNNI where the CPU has it);
- the IVF scan (``Searcher.search`` through ``IvfIndex.candidates``): a batch of
  ``--batch`` queries at ``--nprobe`` lists, for float16 and int8 rows.

Both builds must answer alike: the candidates of every measurement are checked equal.
Run it under the bench lock::

    flock /tmp/vecserve-bench.lock python bench/bench_kernel_flags.py --a /tmp/fast --b /tmp/ieee
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_search import generated

from vecserve.search import exact
from vecserve.search.ivf import IvfIndex, default_nlist
from vecserve.search.snapshot import SimilarityIndex


def load(directory: Path, name: str):
    """The extension ``vecserve.search.<name>`` from the ``.so`` in ``directory``."""
    (path,) = directory.glob(f"{name}.*.so")
    fullname = f"vecserve.search.{name}"
    loader = importlib.machinery.ExtensionFileLoader(fullname, str(path))
    spec = importlib.util.spec_from_file_location(fullname, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def alternated(calls: dict, repeat: int) -> dict:
    """Median seconds of each call, the calls taking turns ``repeat`` times."""
    times = {k: [] for k in calls}
    for _ in range(repeat):
        for k, call in calls.items():
            start = time.perf_counter()
            call()
            times[k].append(time.perf_counter() - start)
    return {k: float(np.median(v)) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", type=Path, required=True, help="the first build's .so directory")
    ap.add_argument("--b", type=Path, required=True, help="the second build's .so directory")
    ap.add_argument("--rows", type=int, default=300_000, help="rows of the generated set")
    ap.add_argument("--dim", type=int, default=300, help="dimensions")
    ap.add_argument("--batch", type=int, default=256, help="queries in a batch")
    ap.add_argument("--nprobe", type=int, default=8, help="IVF lists scanned a query")
    ap.add_argument("--repeat", type=int, default=15, help="alternations a measurement")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    builds = {
        label: {n: load(d, n) for n in ("_exact", "_ivfscan")}
        for label, d in (("a", args.a), ("b", args.b))
    }
    x = generated(args.rows, args.dim)
    rng = np.random.default_rng(1)
    picked = rng.choice(args.rows, args.batch, replace=False)
    queries = x[picked]
    rows = []

    scores = x @ queries[0]
    calls = {k: (lambda m=m: m["_exact"].top_k(scores, 11)) for k, m in builds.items()}
    answers = {k: call()[0].tolist() for k, call in calls.items()}
    assert answers["a"] == answers["b"]
    rows.append((f"top_k: 11 of {args.rows:,} scores", alternated(calls, args.repeat * 4)))

    # the exact batch as SimilarityIndex runs it, each build's names swapped into exact.py
    words = [f"w{i}" for i in range(args.rows)]
    sims = {k: SimilarityIndex.from_arrays(words, x) for k in builds}
    asked = [{"positive": [f"w{r}"], "topn": 10} for r in picked]

    def batch(k):
        m = builds[k]["_exact"]
        exact.Heaps, exact.QuantizedRows, exact.top_k = m.Heaps, m.QuantizedRows, m.top_k
        return sims[k].most_similar_batch(asked)

    calls = {k: (lambda k=k: batch(k)) for k in builds}
    assert calls["a"]() == calls["b"]()
    kind = sims["a"].exact.first_pass
    rows.append(
        (f"exact batch of {args.batch} ({kind} first pass)", alternated(calls, args.repeat))
    )

    nlist = default_nlist(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("f16", "i8"):
            path = Path(tmp) / f"{kind}.ivf"
            IvfIndex.build_arrays(x, path, nlist=nlist, dtype=kind)
            index = IvfIndex.open(path)
            index.nprobe = args.nprobe
            searchers = {}
            for k, m in builds.items():
                ivf = m["_ivfscan"]
                packed = ivf.pack_centroids(index.centroids)
                searchers[k] = ivf.Searcher(
                    packed, index.nlist, index.rows, index.offsets, index.ids, index.scales
                )

            def candidates(k, index=index, searchers=searchers):
                index.__dict__["_searcher"] = searchers[k]
                return index.candidates(queries, 22)

            calls = {k: (lambda k=k: candidates(k)) for k in builds}
            assert np.array_equal(calls["a"](), calls["b"]())
            label = f"IVF batch of {args.batch}, {kind} rows, nprobe {args.nprobe} of {nlist}"
            rows.append((label, alternated(calls, args.repeat)))

    print(f"\n{args.rows:,} x {args.dim}; medians of alternated calls\n")
    print("| kernel | a ms | b ms | b / a |")
    print("|---|---:|---:|---:|")
    for label, t in rows:
        print(f"| {label} | {t['a'] * 1e3:.2f} | {t['b'] * 1e3:.2f} | {t['b'] / t['a']:.2f}x |")
    print(f"\nload average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
