"""The snapshot's shared vocabulary (``vocab.idx``) against a per-process list + dict, and
its share of the queries users make.

    python bench/bench_vocab.py --words 300000          # ~1 min, no lock needed
    flock /tmp/vecserve-bench.lock python bench/bench_vocab.py --words 3000000

Writes a GoogleNews-shaped vocabulary (the tokens of ``bench_load``) as a snapshot's
``vocab.idx`` and as a JSON list, then measures, each in a fresh process: the memory a
process holds alone after opening it (anonymous RSS from ``/proc/self/smaps_rollup``,
minus the same process before opening) and the time to open. In this process,
``SharedVocab`` against the ``dict``/``list`` gensim uses:

- word -> row for a batch of 1000 words (``get``); row -> word for the 2,560 rows of a
  batch of 256 answers and the 10 of one answer (``words``) and for 10 rows one by one
  (``[row]``); each the median of 21 runs (warm: the same words again); and 20,000 words
  and rows each asked once (cold: their memory out of the CPU's caches, as a server at
  3M meets them);
- the users' paths through :class:`~vecserve.search.planner.Planner` (what the HTTP API
  runs) on an ``N x dim`` matrix (clustered unit rows, ``bench_search``'s) with a ready
  IVF index: an approximate query, an approximate batch of 256 (``POST
  /most_similar/batch``), an exact query, an analogy, an exact batch of 256, and 100
  vectors read from the snapshot by word (``get_vector``); each timed with the snapshot's
  vocabulary and with a list + dict swapped in (the same index), interleaved, the order
  alternating. The difference is the vocabulary's cost on that path.

Memory at 3M x 100: ~1.2 GB of vectors, 0.6 GB of IVF rows, ~0.7 GB of list + dict.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_load import make_tokens
from bench_search import generated

from vecserve.search.ann import AnnManager, AnnParams
from vecserve.search.planner import Planner, Query
from vecserve.search.snapshot import SimilarityIndex
from vecserve.search.vocab import SharedVocab, write

CHILD = Path(__file__).parent / "programs" / "vocab_open.py"
VOCABS = ("SharedVocab", "list + dict")


class ListVocab(list):
    """A list of the words with ``SharedVocab.words``: the per-process vocabulary the
    search code accepts in its place."""

    def words(self, rows) -> list[str]:
        return [self[r] for r in np.asarray(rows).ravel().tolist()]


def median_s(fn, repeat: int = 21) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def opened(idx: Path, words: list[str], tmp: str) -> list[tuple[str, str, str]]:
    """Memory held alone and time to open, each vocabulary in a fresh process."""
    old = Path(tmp) / "vocab.json"
    with open(old, "w", encoding="utf-8", errors="surrogateescape") as f:
        json.dump(words, f, ensure_ascii=False)
    rows = []
    for kind, path, label in (("json", old, "list + dict"), ("idx", idx, "SharedVocab")):
        argv = [sys.executable, str(CHILD), kind, str(path)]
        got = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
        rows.append(
            (
                f"open, {label}: memory held alone",
                f"{got['anon_mb']:,.1f} MB",
                f"opened in {got['open_s'] * 1e3:,.0f} ms",
            )
        )
    return rows


def lookups(shared: SharedVocab, words: list[str], index: dict, rng) -> list[tuple]:
    """word -> row and row -> word, SharedVocab against the dict and the list."""
    batch = [words[i] for i in rng.choice(len(words), 1000)]
    answers = rng.choice(len(words), 2560)
    top = rng.choice(len(words), 10).tolist()
    assert [shared.get(w) for w in batch] == [index.get(w) for w in batch]
    assert shared.words(answers) == [words[r] for r in answers.tolist()]
    rows = []
    for label, ours, theirs in [
        (
            "word -> row, 1000 words (get)",
            lambda: [shared.get(w) for w in batch],
            lambda: [index.get(w) for w in batch],
        ),
        (
            "row -> word, 2,560 rows (words)",
            lambda: shared.words(answers),
            lambda: [words[r] for r in answers.tolist()],
        ),
        (
            "row -> word, 10 rows (words: one answer)",
            lambda: shared.words(top),
            lambda: [words[r] for r in top],
        ),
        (
            "row -> word, 10 rows ([row])",
            lambda: [shared[r] for r in top],
            lambda: [words[r] for r in top],
        ),
    ]:
        a, b = median_s(ours), median_s(theirs)
        rows.append(
            (f"{label}, median", f"{a * 1e6:,.1f} us", f"dict/list {b * 1e6:,.1f} us; {a / b:.1f}x")
        )
    # as a server meets them: each word or row once, its memory not in the CPU's caches
    fresh = [words[i] for i in rng.choice(len(words), 20_000)]
    spread = rng.choice(len(words), 20_000).tolist()
    for label, ours, theirs in [
        ("word -> row, 20,000 words once each", shared.get, index.get),
        ("row -> word, 20,000 rows once each", shared.__getitem__, words.__getitem__),
    ]:
        items = fresh if label.startswith("word") else spread
        half = len(items) // 2
        a = per_item_s(ours, items[:half]) + per_item_s(ours, items[half:])
        b = per_item_s(theirs, items[half:]) + per_item_s(theirs, items[:half])
        rows.append(
            (f"{label}, per item", f"{a / 2 * 1e9:,.0f} ns", f"dict/list {b / 2 * 1e9:,.0f} ns")
        )
    return rows


def per_item_s(fn, items) -> float:
    start = time.perf_counter()
    for item in items:
        fn(item)
    return (time.perf_counter() - start) / len(items)


def paths(ix: SimilarityIndex, words: list[str], index: dict, args, rng) -> list[tuple]:
    """The users' paths through the planner, each vocabulary swapped in turn."""
    start = time.perf_counter()
    manager = AnnManager(enabled=True, params=AnnParams(kind="ivf", recall=None, recall_queries=50))
    assert manager.get(ix, wait=True) is not None, "the IVF index was not built"
    built = time.perf_counter() - start
    planner = Planner(ix, ann=manager)
    listed = ListVocab(words)
    kinds = {"SharedVocab": (ix.index_to_key, ix.key_to_index), "list + dict": (listed, index)}
    n = len(words)

    def one(approx: bool):
        return lambda w: planner.answer(Query(positive=(w,), topn=10, approx=approx))

    def batch(approx: bool):
        return lambda ws: planner.answer_batch(
            [Query(positive=(w,), topn=10, approx=approx) for w in ws]
        )

    def analogy(abc):
        return planner.answer(Query(positive=abc[1:], negative=abc[:1], topn=1))

    def vectors(ws):
        return np.stack([ix.get_vector(w) for w in ws])

    def picks(count: int, size: int = 0):
        chosen = [words[i] for i in rng.choice(n, count * max(size, 1))]
        return chosen if not size else [chosen[i : i + size] for i in range(0, len(chosen), size)]

    cases = [
        ("approximate, one query", one(True), picks(args.queries * 5)),
        ("approximate, batch of 256", batch(True), picks(args.batches, 256)),
        ("exact, one query", one(False), picks(args.queries)),
        ("analogy (exact, topn 1)", analogy, picks(args.queries // 2, 3)),
        ("exact, batch of 256", batch(False), picks(5, 256)),
        ("100 snapshot vectors by word (get_vector)", vectors, picks(args.queries, 100)),
    ]
    out = []
    for label, run, asked in cases:
        run(asked[0])  # first use out of the timings
        times: dict[str, list[float]] = {k: [] for k in VOCABS}
        answers: dict[str, list] = {k: [] for k in VOCABS}
        for i, q in enumerate(asked):
            for kind in sorted(VOCABS, reverse=bool(i % 2)):
                ix.index_to_key, ix.key_to_index = kinds[kind]
                t = time.perf_counter()
                got = run(q)
                times[kind].append(time.perf_counter() - t)
                answers[kind].append(got)
        ix.index_to_key, ix.key_to_index = kinds["SharedVocab"]
        for a, b in zip(answers["SharedVocab"], answers["list + dict"], strict=True):
            assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b, label
        ours, theirs = (float(np.median(times[k])) for k in VOCABS)
        out.append(
            (
                f"{label}: p50, SharedVocab",
                f"{ours * 1e3:,.3f} ms",
                f"list + dict {theirs * 1e3:,.3f} ms; {ours / theirs:.3f}x; "
                f"difference {(ours - theirs) * 1e6:+,.0f} us",
            )
        )
    out.append(("IVF index built (fixed nprobe)", f"{built:.0f} s", f"{len(cases[0][2])} singles"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--words", type=int, default=300_000)
    ap.add_argument("--dim", type=int, default=100, help="of the query matrix")
    ap.add_argument("--queries", type=int, default=40, help="exact queries (x5 approximate)")
    ap.add_argument("--batches", type=int, default=11, help="approximate batches of 256")
    ap.add_argument("--no-paths", dest="paths", action="store_false", help="lookups only")
    args = ap.parse_args()
    words = make_tokens(args.words)
    rows: list[tuple[str, str, str]] = []
    rng = np.random.default_rng(5)
    with tempfile.TemporaryDirectory(prefix="vs-vocab-") as tmp:
        idx = Path(tmp) / "vocab.idx"
        t = time.perf_counter()
        write(idx, words)
        took = time.perf_counter() - t
        rows.append(("write vocab.idx", f"{took:.2f} s", f"{idx.stat().st_size / 2**20:,.1f} MB"))
        rows += opened(idx, words, tmp)
        shared = SharedVocab.open(idx)
        index = {w: i for i, w in enumerate(words)}
        rows += lookups(shared, words, index, rng)
        if args.paths:
            ix = SimilarityIndex(shared, generated(len(words), args.dim), name="VOCAB")
            rows += paths(ix, words, index, args, rng)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n{args.words:,} words, dim {args.dim}, {os.cpu_count()} cores, load {load}")
    print(f"{'step':60s} {'value':>12s}  note")
    for label, value, note in rows:
        print(f"{label:60s} {value:>12s}  {note}")


if __name__ == "__main__":
    main()
