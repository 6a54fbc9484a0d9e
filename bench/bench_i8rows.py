"""The first exact batch of a process, with the int8 rows (and the odd rows) made in its
own memory (as before they were a snapshot's files) and from the snapshot's files: made
there by the first process, mapped (read) by the next.

For each size, a snapshot directory (``vectors.npy``, ``norms.npy``, ``vocab.idx``) of
``bench_search.py``'s generated rows is written under ``--cache``; then fresh processes
each open it and time their first ``most_similar_batch`` of 2 queries (which makes the
int8 rows and finds the odd rows; the odd-row probe is timed apart, after a single
query) and a following batch
of 256, and report the anonymous memory they hold (``RssAnon``: the rows packed in
memory are there, the mapped file's pages are shared page cache). Modes, in order:
``memory`` (no file), ``pack`` (the first process: packs the file), ``map`` (the next:
maps it).

    flock /tmp/vecserve-bench.lock python bench/bench_i8rows.py --rows 1m,3m
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_search import generated

CHILD = Path(__file__).parent / "programs" / "i8rows_first_batch.py"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1m,3m", help="1m, 3m or a row count (comma-separated)")
    ap.add_argument("--dim", type=int, default=300)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/vecserve-bench/i8rows"))
    args = ap.parse_args()
    from vecserve.search import i8rows
    from vecserve.search.vocab import write as write_vocab

    print(f"(load average {os.getloadavg()[0]:.1f})")
    print(
        "| rows x dims | int8 rows | odd-row probe s | first batch s (rows made, "
        "probe apart) | batch of 256 q/s | anonymous MB held |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for name in args.rows.split(","):
        n = {"1m": 1_000_000, "3m": 3_000_000}.get(name) or int(name)
        path = args.cache / f"{name}x{args.dim}"
        if not (path / "vocab.idx").exists():
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True)
            x = generated(n, args.dim)
            np.save(path / "vectors.npy", x)
            np.save(path / "norms.npy", np.linalg.norm(x, axis=1))
            del x
            write_vocab(path / "vocab.idx", [f"w{i}" for i in range(n)])
        for old in [path / i8rows.FILE, *path.glob("odd-rows.*.json")]:
            old.unlink(missing_ok=True)
        for mode in ("memory", "pack", "map"):
            out = subprocess.run(
                [sys.executable, str(CHILD), str(path), mode],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            r = json.loads(out)
            what = {
                "memory": "packed in the process",
                "pack": "packed into the file",
                "map": "mapped from the file",
            }[mode]
            print(
                f"| {n:,} x {args.dim} | {what} | {r['odd']:.2f} | "
                f"{r['first']:.2f} | {256 / r['batch']:,.0f} | {r['anon']:,.0f} |"
            )
    print(f"(load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
