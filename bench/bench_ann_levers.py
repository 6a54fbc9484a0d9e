"""Approximate-index levers at GoogleNews scale: build time, recall@10, latency, bytes.

Standalone (NumPy + the index libraries, no Redis), so it also runs on a bare machine.
Data: ``--data clustered`` (``--clusters`` Gaussian centres + 0.8 noise, as
``bench_api.make_model``), ``uniform`` (uniform on the sphere) or ``--rows M.npy`` (a real
matrix, e.g. vectors trained on wiki100m), rows unit length,
written once to a memory-mapped ``.npy`` in ``--cache`` (default /tmp) and reused, with
the exact top 10 of ``--queries`` query rows (self excluded). Every family answers the
queries one at a time on one thread the way vecserve's ``AnnIndex`` does: the index
proposes candidates, they are re-scored exactly in float32, self dropped, top 10 kept.
One warm-up pass over the queries runs before the timed one (memory-mapped indexes are
then in the page cache, as they are in a serving process). Prints one Markdown table.

Families (``--configs``, comma-separated; search settings from ``--ef-search`` /
``--nprobe``):

- ``hnsw:DTYPE:M:EF_ADD``: usearch HNSW over the rows, ``oversample x 11`` candidates.
- ``pca:DIMS:DTYPE:M:EF_ADD``: usearch HNSW over a PCA projection to DIMS, then
  ``--pca-oversample x 11`` candidates re-ranked exactly.
- ``ann:KIND[:DTYPE]``: vecserve's ``AnnIndex`` end to end (``auto``, ``ivf`` or
  ``hnsw`` with default parameters, DTYPE its ``dtype``; build s then includes the norms
  and the recall measured at build, and the queries run ``AnnIndex.most_similar``, its
  exact re-rank included).
- ``ivf:NLIST[:DTYPE]``: vecserve's own IVF (``vecserve.search.ivf``): spherical k-means on a
  sample, lists stored contiguously (DTYPE ``f16``, the default, or ``f32``), one C pass
  over the ``nprobe`` nearest lists.
- ``faiss-flat:NLIST`` / ``faiss-sq8:NLIST`` / ``faiss-pq:NLIST:M``: faiss-cpu
  IndexIVFFlat / IndexIVFScalarQuantizer (8 bit) / IndexIVFPQ (M bytes a vector), inner
  product, written and read back memory-mapped (``IO_FLAG_MMAP``). These need
  ``pip install faiss-cpu`` (not a vecserve dependency: measured, not chosen).

Usage::

    flock /tmp/vecserve-bench.lock python bench/bench_ann_levers.py --n 3000000 \\
        --configs ivf:4096,hnsw:i8:16:64 --nprobe 8,16,32 --threads 2
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def make(
    n: int,
    dim: int,
    clusters: int,
    kind: str = "clustered",
    seed: int = 0,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Unit rows: ``clusters`` centres + 0.8 noise, or uniform on the sphere."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    out = np.empty((n, dim), dtype=np.float32) if out is None else out
    for lo in range(0, n, 100_000):
        hi = min(lo + 100_000, n)
        if kind == "clustered":
            k = rng.integers(0, clusters, hi - lo)
            block = centres[k] + 0.8 * rng.standard_normal((hi - lo, dim), dtype=np.float32)
        else:
            block = rng.standard_normal((hi - lo, dim), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[lo:hi] = block
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


def dataset(args) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """The memory-mapped rows, the query rows and their exact top 10 (made once, reused)."""
    if args.rows:  # a real matrix (e.g. trained vectors): its unit rows
        x = np.load(args.rows).astype(np.float32)
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        args.n, args.dim, args.data = *x.shape, Path(args.rows).name
        qi = np.random.default_rng(1).choice(args.n, args.queries, replace=False)
        return x, qi, exact_top(x, qi), f"{args.rows} (unit rows)"
    base = Path(args.cache) / (
        f"vecserve-ann-{args.data}-{args.n}x{args.dim}"
        + (f"-c{args.clusters}" if args.data == "clustered" else "")
    )
    rows, truth = base.with_suffix(".npy"), Path(f"{base}-truth-q{args.queries}.npy")
    note = "reused"
    if not rows.exists():
        tmp = rows.with_name(f".{rows.name}.{os.getpid()}")
        out = np.lib.format.open_memmap(tmp, "w+", np.float32, (args.n, args.dim))
        make(args.n, args.dim, args.clusters, args.data, out=out)
        out.flush()
        del out
        os.replace(tmp, rows)
        note = "made"
    x = np.load(rows, mmap_mode="r")
    qi = np.random.default_rng(1).choice(args.n, args.queries, replace=False)
    if truth.exists():
        top = np.load(truth)
    else:
        top = exact_top(x, qi)
        np.save(truth, top)
    return x, qi, top, f"{rows} ({note})"


def timed(x, qi, truth, propose, by_row=False) -> tuple[float, float, float]:
    """recall@10, p50 and p99 ms of ``propose(query) -> candidate rows`` + exact re-rank,
    BLAS on one thread (as usearch and faiss search here)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return _timed(x, qi, truth, propose, by_row)


def _timed(x, qi, truth, propose, by_row):
    for i in qi:  # warm-up: page cache, lazy allocations
        propose(np.asarray(x[i]), i) if by_row else propose(np.asarray(x[i]))
    lat, hits = [], 0
    for row, i in enumerate(qi):
        t = time.perf_counter()
        q = np.asarray(x[i])
        if by_row:  # the whole query path of AnnIndex.most_similar: its own top 10
            top = propose(q, i)
            lat.append(time.perf_counter() - t)
            hits += len(set(top.tolist()) & set(truth[row].tolist()))
            continue
        cand = np.unique(propose(q))
        cand = cand[cand >= 0]
        scores = x[cand] @ q
        order = cand[np.argsort(-scores, kind="stable")]
        top = order[order != i][:10]
        lat.append(time.perf_counter() - t)
        hits += len(set(top.tolist()) & set(truth[row].tolist()))
    p50, p99 = np.percentile(np.array(lat) * 1000, [50, 99])
    return hits / (10 * len(qi)), p50, p99


def chunks(x, size=50_000):
    for lo in range(0, len(x), size):
        yield lo, np.ascontiguousarray(x[lo : lo + size], dtype=np.float32)


def run_hnsw(args, x, dtype, m, ef_add, dims=None):
    from usearch.index import Index

    want = args.oversample * 11 if dims is None else args.pca_oversample * 11
    t = time.perf_counter()
    proj = None
    if dims is not None:  # PCA on a sample: covariance, top eigenvectors
        sample = np.asarray(x[np.sort(np.random.default_rng(2).choice(len(x), 100_000))])
        mean = sample.mean(0)
        _, vecs = np.linalg.eigh(np.cov(sample - mean, rowvar=False).astype(np.float64))
        proj = np.ascontiguousarray(vecs[:, ::-1][:, :dims], dtype=np.float32)
    index = Index(
        ndim=dims or args.dim, metric="ip", dtype=dtype, connectivity=m, expansion_add=ef_add
    )
    for lo, block in chunks(x):
        if proj is not None:
            block = block @ proj
        index.add(np.arange(lo, lo + len(block), dtype=np.uint64), block, threads=args.threads)
    build = time.perf_counter() - t
    with tempfile.TemporaryDirectory(dir=args.cache) as tmp:
        index.save(f"{tmp}/i.usearch")
        size = os.path.getsize(f"{tmp}/i.usearch") + (0 if proj is None else proj.nbytes)
    for ef in (int(e) for e in args.ef_search.split(",")):
        index.expansion_search = ef

        def propose(q, index=index):
            q = q if proj is None else q @ proj
            return index.search(q, want, threads=1).keys.astype(np.int64)

        yield build, f"ef {ef}", size, timed(x, args.qi, args.truth, propose)


def run_ivf(args, x, nlist, dtype="f16"):
    from vecserve.search.ivf import IvfIndex

    with tempfile.TemporaryDirectory(dir=args.cache) as tmp:
        t = time.perf_counter()
        IvfIndex.build_arrays(
            x, Path(tmp) / "i.ivf", nlist=nlist, threads=args.threads, dtype=dtype
        )
        build = time.perf_counter() - t
        index = IvfIndex.open(Path(tmp) / "i.ivf")
        size = index.nbytes
        for nprobe in (int(p) for p in args.nprobe.split(",")):
            index.nprobe = nprobe

            def propose(q, index=index):
                found = index.candidates(q[None, :], args.oversample * 11)[0]
                return found[found >= 0]

            yield build, f"nprobe {nprobe}", size, timed(x, args.qi, args.truth, propose)
        del index


def run_ann(args, x, kind, dtype=None):
    """vecserve's own path end to end: ``AnnIndex.build`` over a snapshot of the rows (norms,
    build, write, recall measured over 200 words) and ``AnnIndex.most_similar`` queries."""
    from vecserve.search.ann import AnnIndex, AnnParams
    from vecserve.search.snapshot import SimilarityIndex

    t = time.perf_counter()
    sim = SimilarityIndex([str(i) for i in range(len(x))], np.asarray(x))
    params = AnnParams(kind=kind, **({"dtype": dtype} if dtype else {}))
    with tempfile.TemporaryDirectory(dir=args.cache) as tmp:
        path = Path(tmp) / params.resolved(sim.count).filename
        ann = AnnIndex.build(sim, path=path, params=params, threads=args.threads)
        build = time.perf_counter() - t
        size = ann.meta.index_bytes
        settings = args.nprobe if ann.params.kind == "ivf" else args.ef_search
        for value in (int(v) for v in settings.split(",")):
            if ann.params.kind == "ivf":
                ann.index.nprobe, label = value, f"nprobe {value}"
            else:
                ann.index.expansion_search, label = value, f"ef {value}"

            def propose(q, i=None, ann=ann):
                got = ann.most_similar(sim, [int(i)], [], 10)
                return np.array([int(w) for w, _ in got], dtype=np.int64)

            yield build, label, size, timed(x, args.qi, args.truth, propose, by_row=True)
        del ann


def run_faiss(args, x, kind, nlist, pq_m=None):
    import faiss

    faiss.omp_set_num_threads(args.threads)
    t = time.perf_counter()
    quant = faiss.IndexFlatIP(args.dim)
    ip = faiss.METRIC_INNER_PRODUCT
    if kind == "flat":
        index = faiss.IndexIVFFlat(quant, args.dim, nlist, ip)
    elif kind == "sq8":
        index = faiss.IndexIVFScalarQuantizer(
            quant, args.dim, nlist, faiss.ScalarQuantizer.QT_8bit, ip
        )
    else:
        index = faiss.IndexIVFPQ(quant, args.dim, nlist, pq_m, 8, ip)
    index.cp.niter = 10
    index.cp.max_points_per_centroid = 64
    sample = np.random.default_rng(2).choice(len(x), min(len(x), 64 * nlist), replace=False)
    index.train(np.ascontiguousarray(x[np.sort(sample)]))
    for _, block in chunks(x):
        index.add(block)
    build = time.perf_counter() - t
    with tempfile.TemporaryDirectory(dir=args.cache) as tmp:
        faiss.write_index(index, f"{tmp}/i.faiss")
        size = os.path.getsize(f"{tmp}/i.faiss")
        del index
        index = faiss.read_index(f"{tmp}/i.faiss", faiss.IO_FLAG_MMAP)
        faiss.omp_set_num_threads(1)
        for nprobe in (int(p) for p in args.nprobe.split(",")):
            index.nprobe = nprobe

            def propose(q, index=index):
                return index.search(q[None, :], args.oversample * 11)[1][0]

            yield build, f"nprobe {nprobe}", size, timed(x, args.qi, args.truth, propose)
        del index


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3_000_000)
    ap.add_argument("--dim", type=int, default=300)
    ap.add_argument("--data", choices=["clustered", "uniform"], default="clustered")
    ap.add_argument("--rows", help="a .npy matrix to use instead of generated data")
    ap.add_argument("--clusters", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--oversample", type=int, default=2)
    ap.add_argument("--pca-oversample", type=int, default=10)
    ap.add_argument("--configs", default="ivf:4096,hnsw:i8:16:64")
    ap.add_argument("--ef-search", default="64,128,256")
    ap.add_argument("--nprobe", default="8,16,32")
    ap.add_argument("--cache", default=tempfile.gettempdir())
    args = ap.parse_args()

    t0 = time.perf_counter()
    x, args.qi, args.truth, where = dataset(args)
    t = time.perf_counter()
    for i in args.qi[:20]:  # the exact engine: a BLAS matrix-vector product per query
        s = x @ x[i]
        np.argpartition(-s, 11)[:11]
    exact_ms = (time.perf_counter() - t) / 20 * 1000
    print(
        f"data {args.n:,} x {args.dim} {args.data}"
        + (f", {args.clusters} clusters" if args.data == "clustered" else "")
        + f": {where}, {time.perf_counter() - t0:.0f}s; exact query {exact_ms:.1f} ms; "
        f"{args.threads} build threads, queries on 1\n",
        flush=True,
    )
    print("| family | settings | build s | search | recall@10 | p50 ms | p99 ms | index MB |")
    print("|---|---|---:|---|---:|---:|---:|---:|", flush=True)
    for cfg in args.configs.split(","):
        family, *p = cfg.split(":")
        if family in ("f32", "f16", "bf16", "i8"):  # the older DTYPE:M:EF_ADD form
            family, p = "hnsw", [family, *p]
        if family == "hnsw":
            runs = run_hnsw(args, x, p[0], int(p[1]), int(p[2]))
            label = f"{p[0]} M{p[1]} ef_add {p[2]}"
        elif family == "pca":
            runs = run_hnsw(args, x, p[1], int(p[2]), int(p[3]), dims=int(p[0]))
            family, label = "pca+hnsw", f"{p[0]}d {p[1]} M{p[2]} ef_add {p[3]}"
        elif family == "ann":
            runs, label = run_ann(args, x, *p), f"vecserve AnnIndex kind={':'.join(p)}"
        elif family == "ivf":
            runs, label = run_ivf(args, x, int(p[0]), *p[1:]), f"nlist {':'.join(p)}"
        elif family.startswith("faiss-"):
            kind = family.removeprefix("faiss-")
            runs = run_faiss(args, x, kind, int(p[0]), int(p[1]) if len(p) > 1 else None)
            label = f"nlist {p[0]}" + (f" m{p[1]}" if len(p) > 1 else "")
        else:
            raise SystemExit(f"unknown family {family!r} in --configs")
        for build, search, size, (recall, p50, p99) in runs:
            print(
                f"| {family} | {label} | {build:.0f} | {search} | {recall:.3f} | {p50:.2f} "
                f"| {p99:.2f} | {size / 2**20:,.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
