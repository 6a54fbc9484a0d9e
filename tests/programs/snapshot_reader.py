"""Open a similarity snapshot in a process of its own and report what it reads and how
its vocabulary file is mapped: ``snapshot_reader.py SNAPSHOT WORDS_JSON``; prints JSON
``{"lookups", "answer", "mapped"}`` (``mapped``: Rss and Private_Dirty kB of vocab.idx)."""

import json
import sys

from vecserve.search.snapshot import SimilarityIndex

ix = SimilarityIndex.open(sys.argv[1])
lookups = [ix.key_to_index.get(w) for w in json.loads(sys.argv[2])]
answer = ix.most_similar("Köln", topn=5)
mapped = {}
with open("/proc/self/smaps") as f:
    name = None
    for line in f:
        head = line.split()
        if "-" in head[0] and not head[0].endswith(":"):  # a mapping's first line
            name = head[5] if len(head) >= 6 else None
        elif name and name.endswith("vocab.idx") and head[0] in ("Rss:", "Private_Dirty:"):
            mapped[head[0]] = mapped.get(head[0], 0) + int(head[1])
print(json.dumps({"lookups": lookups, "answer": answer, "mapped": mapped}))
