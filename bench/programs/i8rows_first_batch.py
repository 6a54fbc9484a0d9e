"""Open a similarity snapshot in a fresh process and time its first int8 batches:
``i8rows_first_batch.py SNAPSHOT MODE`` with MODE ``memory`` (int8 rows packed in the
process), ``pack`` (packed into the snapshot's file) or ``map`` (mapped from that file);
prints JSON ``{"odd", "first", "batch", "anon"}``: seconds for the odd rows, a first
batch of 2 and a batch of 256, and the anonymous memory (MB) they added."""

import json
import sys
import time
from pathlib import Path

import numpy as np

from vecserve.search.snapshot import SimilarityIndex


def anon_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


path, mode = Path(sys.argv[1]), sys.argv[2]
ix = SimilarityIndex.open(path)
ix.exact.first_pass = "int8"
if mode == "memory":
    ix.exact.rows_file = None
rng = np.random.default_rng(1)
asked = [{"positive": [int(i)], "topn": 10} for i in rng.choice(ix.count, 256, replace=False)]
ix.most_similar(0)  # imports and first-use costs of any query out of the timings
before = anon_mb()
start = time.perf_counter()
ix.exact.odd_rows()
odd = time.perf_counter() - start
start = time.perf_counter()
ix.most_similar_batch(asked[:2])
first = time.perf_counter() - start
start = time.perf_counter()
ix.most_similar_batch(asked)
batch = time.perf_counter() - start
print(json.dumps({"odd": odd, "first": first, "batch": batch, "anon": anon_mb() - before}))
