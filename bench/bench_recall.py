"""The recall target on real embeddings: what the build chose, what it estimated, and what
fresh queries get, against the exact answers and gensim in RAM in the same run.

For each vector file: the approximate index is built at the default settings (recall
target 0.95, ``kind="auto"``; ``--kinds`` adds forced ones), then 500 fresh rows (never
used by the build's tuning or held-aside sets) are asked ``most_similar(row, topn=10)``
approximately, exactly (the snapshot) and by gensim's ``KeyedVectors`` in RAM. Printed:
the setting chosen, the build's estimate and 95% interval, the fresh queries' recall@10,
the recall@10 of the file's first 1,000 words (a file's most frequent words by convention:
what users ask most, where the build's uniform sample holds few),
p50/p99 of each, and approximate p50 as a share of exact. The fixed ``nprobe`` 16 the
index used before the target (``recall=None``) is measured on the same fresh queries.

Vectors: word2vec files (give their paths): one trained by ``vecserve train``, or real
pretrained vectors a package ships (GloVe 6B 50d, converted by ``convert_npy_words.py``);
``--limits`` also measures each file's first N rows (its most frequent words, as gensim's
``limit=`` loads them); and gensim's own shipped test vectors (``--gensim``).

    flock /tmp/vecserve-bench.lock python bench/bench_recall.py /tmp/wiki_mc1.bin --gensim
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from gensim.models import KeyedVectors

from vecserve.search import recall
from vecserve.search.ann import AnnIndex, AnnParams
from vecserve.search.snapshot import SimilarityIndex

#: The file's first (most frequent) words asked, besides the fresh sample.
TOP_WORDS = 1000

GENSIM_FILES = (
    "lee_fasttext.vec",
    "pang_lee_polarity_fasttext.vec",
    "EN.1-10.cbow1_wind5_hs0_neg10_size300_smpl1e-05.txt",
)


def gensim_files() -> list[Path]:
    import gensim

    data = Path(gensim.__file__).parent / "test" / "test_data"
    return [data / name for name in GENSIM_FILES if (data / name).exists()]


def load(path: Path, limit: int | None = None) -> KeyedVectors:
    binary = path.suffix == ".bin"
    return KeyedVectors.load_word2vec_format(
        str(path), binary=binary, unicode_errors="ignore", limit=limit
    )


def timed(fn, rows) -> tuple[list, np.ndarray]:
    out, times = [], []
    for r in rows:
        start = time.perf_counter()
        out.append(fn(int(r)))
        times.append(time.perf_counter() - start)
    return out, np.array(times) * 1e3


def fresh_rows(count: int, n: int, params: AnnParams) -> tuple[np.ndarray, bool]:
    """Rows the build never asked, or (a small model: fewer than 100 left) any rows;
    and whether they are fresh."""
    used = set(np.concatenate(recall.query_sets(count, params.recall_queries)).tolist())
    rng = np.random.default_rng(12345)
    pool = [r for r in rng.permutation(count) if r not in used][:n]
    if len(pool) >= 100:
        return np.array(pool), True
    return np.sort(rng.choice(count, min(n, count), replace=False)), False


def run(path: Path, kinds: list[str], queries: int, limit: int | None = None) -> None:
    kv = load(path, limit)
    words = list(kv.index_to_key)
    sim = SimilarityIndex.from_arrays(words, kv.vectors.astype(np.float32), name=path.name)
    rows, fresh = fresh_rows(sim.count, queries, AnnParams())
    truth = recall.exact_neighbours(sim, rows)
    _, exact_ms = timed(lambda r: sim.most_similar(r, topn=10), rows)
    kv.fill_norms()
    _, gensim_ms = timed(lambda r: kv.most_similar(words[r], topn=10), rows)
    which = "fresh" if fresh else "sampled"
    top = np.arange(min(TOP_WORDS, sim.count))
    truth_top = recall.exact_neighbours(sim, top)
    print(
        f"\n{path.name}{f' (first {limit:,} rows)' if limit else ''}: {sim.count:,} x "
        f"{sim.dim}; {len(rows)} {which} queries; exact p50 "
        f"{np.median(exact_ms):.2f} ms (p99 {np.percentile(exact_ms, 99):.2f}), gensim in "
        f"RAM p50 {np.median(gensim_ms):.2f} ms"
    )
    print(
        "| index | setting | build s | estimate (95% CI) | fresh recall@10 | first 1,000 words "
        "| p50 ms | p99 ms | p50 / exact | target met |"
    )
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---|")
    for kind in kinds:
        params = AnnParams(kind=kind)
        start = time.perf_counter()
        ann = AnnIndex.build(sim, params=params)
        build_s = time.perf_counter() - start
        setting = "nprobe" if ann.params.kind == "ivf" else "expansion_search"
        runs = [("target 0.95", getattr(ann.index, setting))]
        if ann.params.kind == "ivf":
            runs.append(("fixed nprobe 16", 16))
        for label, value in runs:
            setattr(ann.index, setting, value)
            answers, ms = timed(lambda r, a=ann: a.most_similar(sim, [r], [], 10), rows)
            got = [[sim.get_index(w) for w, _ in answer] for answer in answers]
            found = recall.per_query_recall(truth, got).mean()
            got_top = [
                [sim.get_index(w) for w, _ in ann.most_similar(sim, [int(r)], [], 10)] for r in top
            ]
            found_top = recall.per_query_recall(truth_top, got_top).mean()
            target = ann.meta.to_json().get("target", {})
            if label.startswith("target"):
                low, high = ann.meta.recall_interval or (float("nan"), float("nan"))
                est = f"{ann.recall_at_10:.3f} ({low:.3f}-{high:.3f})"
                met = "yes" if target.get("met") else f"no: {target.get('reason')}"
            else:
                est, met = "-", "-"
            print(
                f"| {ann.params.kind} {label} | {setting} {value} | {build_s:.1f} | {est} "
                f"| {found:.3f} | {found_top:.3f} | {np.median(ms):.2f} | "
                f"{np.percentile(ms, 99):.2f} | "
                f"{np.median(ms) / np.median(exact_ms):.3f} | {met} |",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path, help="word2vec .bin / .txt / .vec files")
    ap.add_argument("--gensim", action="store_true", help="also gensim's shipped test vectors")
    ap.add_argument("--kinds", default="auto", help="comma-separated: auto, ivf, hnsw")
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument(
        "--limits",
        default="",
        help="comma-separated row counts: also each file's first N rows, before the whole",
    )
    args = ap.parse_args()
    limits = [int(n) for n in args.limits.split(",") if n]
    for path in args.files:
        for limit in limits:
            run(path, args.kinds.split(","), args.queries, limit)
        run(path, args.kinds.split(","), args.queries)
    for path in gensim_files() if args.gensim else []:
        run(path, args.kinds.split(","), args.queries)


if __name__ == "__main__":
    main()
