"""What the trainer benchmarks (``bench_train.py``, ``bench_train_subword.py``) share: their
command line, each run in a child process of its own, the results recorded, and the ratio
cells of their tables.

A run is ``SCRIPT --child SPEC`` (SPEC: the run's JSON), so its peak RSS is its own; it
prints its result as one JSON line, which is shown on stderr as it comes and appended to
``bench/out/NAME.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

__all__ = ["parser", "ratio", "run_children"]

OUT = Path(__file__).parent / "out"


def parser(doc: str, runs: dict) -> argparse.ArgumentParser:
    """The options every trainer benchmark takes (the first line of *doc* its
    description): the corpus, ``--runs`` (of *runs*), ``--epochs``, ``--workers``,
    ``--head-mb``, and the hidden ``--child``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("corpus", nargs="?", help="text8-style corpus (.zip or text file)")
    ap.add_argument("--runs", default=",".join(runs), help="comma-separated: " + ",".join(runs))
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--head-mb", type=float, default=None, help="only the first N MB")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    return ap


def run_children(script: str, runs: list[str], spec: dict, name: str, corpus: str) -> list[dict]:
    """Each of *runs* in a child process of *script* (its spec: *spec* and ``run``);
    each result, tagged with the *corpus* name, shown on stderr and appended to
    ``bench/out/NAME.jsonl``. A run that fails stops the benchmark with its stderr."""
    OUT.mkdir(exist_ok=True)
    results = []
    for run in runs:
        proc = subprocess.run(
            [sys.executable, script, "--child", json.dumps({**spec, "run": run})],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode:
            sys.exit(f"{run} failed:\n{proc.stderr}")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        res["corpus"] = corpus
        results.append(res)
        print(json.dumps(res), file=sys.stderr, flush=True)
        with open(OUT / f"{name}.jsonl", "a") as f:
            f.write(json.dumps(res) + "\n")
    return results


def ratio(result: dict, ref: dict | None, key: str = "words_per_s") -> str:
    """*result*'s *key* over *ref*'s, as a table cell (``-``: no reference run).

    >>> ratio({"words_per_s": 5.0}, {"words_per_s": 2.0}), ratio({"words_per_s": 5.0}, None)
    ('2.50x', '-')
    """
    return f"{result[key] / ref[key]:.2f}x" if ref else "-"
