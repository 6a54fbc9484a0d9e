"""The snapshot's shared vocabulary (``vocab.idx``) against a per-process list + dict.

    python bench/bench_vocab.py --words 300000          # < 30 s, no lock needed
    flock /tmp/vecserve-bench.lock python bench/bench_vocab.py --words 3000000

Writes a GoogleNews-shaped vocabulary (the tokens of ``bench_load``) as a snapshot's
``vocab.idx`` and as the older ``vocab.json``, then measures, each in a fresh process:
the memory a process holds alone after opening it (anonymous RSS from
``/proc/self/smaps_rollup``, minus the same process before opening) and the time to open;
and in this process: word -> row for a batch of 1000 words and row -> word for 10 rows,
``SharedVocab`` against the ``dict``/``list`` gensim and the old snapshot use, and exact
``most_similar`` p50 on an ``N x dim`` matrix with each vocabulary (the same index, its
vocabulary swapped). Prints one table.
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

from vecserve.search.snapshot import SimilarityIndex
from vecserve.search.vocab import SharedVocab, write

CHILD = Path(__file__).parent / "programs" / "vocab_open.py"


def median_s(fn, repeat: int = 21) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--words", type=int, default=300_000)
    ap.add_argument("--dim", type=int, default=100, help="of the most_similar matrix")
    ap.add_argument("--queries", type=int, default=40)
    args = ap.parse_args()
    words = make_tokens(args.words)
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="vs-vocab-") as tmp:
        idx, old = Path(tmp) / "vocab.idx", Path(tmp) / "vocab.json"
        t = time.perf_counter()
        write(idx, words)
        rows.append(
            (
                "write vocab.idx",
                f"{time.perf_counter() - t:.2f} s",
                f"{idx.stat().st_size / 2**20:,.1f} MB on disk",
            )
        )
        with open(old, "w", encoding="utf-8", errors="surrogateescape") as f:
            json.dump(words, f, ensure_ascii=False)
        got = {}
        for kind, path in (("json", old), ("idx", idx)):
            out = subprocess.run(
                [sys.executable, str(CHILD), kind, str(path)],
                capture_output=True,
                text=True,
                check=True,
            )
            got[kind] = json.loads(out.stdout)
        for kind, label in (("json", "list + dict (vocab.json)"), ("idx", "SharedVocab")):
            rows.append(
                (
                    f"open, {label}: memory held alone",
                    f"{got[kind]['anon_mb']:,.1f} MB",
                    f"opened in {got[kind]['open_s'] * 1e3:,.0f} ms",
                )
            )
        shared = SharedVocab.open(idx)
        index = {w: i for i, w in enumerate(words)}
        rng = np.random.default_rng(5)
        batch = [words[i] for i in rng.choice(len(words), 1000)]
        top = rng.choice(len(words), 10).tolist()
        assert [shared.get(w) for w in batch] == [index.get(w) for w in batch]
        for label, ours, theirs in [
            (
                "word -> row, 1000 words",
                lambda: [shared.get(w) for w in batch],
                lambda: [index.get(w) for w in batch],
            ),
            (
                "row -> word, 10 rows",
                lambda: [shared[r] for r in top],
                lambda: [words[r] for r in top],
            ),
        ]:
            a, b = median_s(ours), median_s(theirs)
            rows.append(
                (
                    f"{label}: SharedVocab (median)",
                    f"{a * 1e6:,.1f} us",
                    f"dict/list {b * 1e6:,.1f} us; {a / b:.1f}x",
                )
            )
        vectors = np.random.default_rng(0).standard_normal((len(words), args.dim))
        ix = SimilarityIndex(shared, vectors.astype(np.float32))
        queries = [words[i] for i in rng.choice(len(words), args.queries)]
        kinds = {"SharedVocab": (shared, shared.key_to_index), "list + dict": (words, index)}
        times: dict[str, list[float]] = {k: [] for k in kinds}
        ix.most_similar(queries[0])
        for i, q in enumerate(queries):  # interleaved, alternating which goes first
            for label in sorted(kinds, reverse=bool(i % 2)):
                ix.index_to_key, ix.key_to_index = kinds[label]
                t = time.perf_counter()
                ix.most_similar(q, topn=10)
                times[label].append(time.perf_counter() - t)
        p50 = {k: float(np.median(v)) for k, v in times.items()}
        rows.append(
            (
                f"most_similar p50, {args.words:,} x {args.dim}, SharedVocab",
                f"{p50['SharedVocab'] * 1e3:.2f} ms",
                f"list + dict {p50['list + dict'] * 1e3:.2f} ms; "
                f"{p50['SharedVocab'] / p50['list + dict']:.3f}x",
            )
        )
    print(f"\n{args.words:,} words, {os.cpu_count()} cores")
    print(f"{'step':56s} {'value':>12s}  note")
    for label, value, note in rows:
        print(f"{label:56s} {value:>12s}  {note}")


if __name__ == "__main__":
    main()
