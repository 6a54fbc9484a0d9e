"""Open a similarity snapshot in a process of its own and answer a batch through the int8
first pass: ``i8rows_batch.py SNAPSHOT WORDS_JSON``; prints JSON ``{"packed", "answers"}``
(``packed``: 1 if this process packed the int8 rows file, 0 if it mapped another's)."""

import json
import sys

from vecserve.search import i8rows
from vecserve.search.snapshot import SimilarityIndex

packed = []
write = i8rows.write
i8rows.write = lambda *a, **k: (packed.append(1), write(*a, **k))
ix = SimilarityIndex.open(sys.argv[1])
ix.exact.first_pass = "int8"
asked = json.loads(sys.argv[2])
got = ix.most_similar_batch([{"positive": [w], "topn": 10} for w in asked])
assert ix.exact._i8 is not None and not ix.exact._i8.codes.flags.writeable
print(json.dumps({"packed": len(packed), "answers": [[list(p) for p in g] for g in got]}))
