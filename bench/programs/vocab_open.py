"""Open a vocabulary in a fresh process and report its cost: ``vocab_open.py KIND PATH``
with KIND ``json`` (a JSON word list read into a list and a dict) or ``idx`` (a
:class:`~vecserve.search.vocab.SharedVocab` mapped from ``vocab.idx``); prints JSON
``{"open_s", "anon_mb"}`` (seconds to open, anonymous memory it added in MB)."""

import json
import sys
import time

from vecserve.search.vocab import SharedVocab


def anon_mb() -> float:
    with open("/proc/self/smaps_rollup") as f:
        return sum(int(line.split()[1]) for line in f if line.startswith("Anonymous:")) / 1024


before = anon_mb()
start = time.perf_counter()
if sys.argv[1] == "json":
    with open(sys.argv[2], encoding="utf-8", errors="surrogateescape") as f:
        words = json.load(f)
    index = {w: i for i, w in enumerate(words)}
    assert index[words[-1]] == len(words) - 1
else:
    words = SharedVocab.open(sys.argv[2])
    assert words.key_to_index[words[-1]] == len(words) - 1
print(json.dumps({"open_s": time.perf_counter() - start, "anon_mb": anon_mb() - before}))
