"""Import the client and the query planner with pydantic, FastAPI and Starlette made
unimportable (the base install has none of them), build a query and print one item's
weight: ``base_install_query.py``."""

import sys

for name in ("pydantic", "fastapi", "starlette"):
    sys.modules[name] = None  # an import of it raises ImportError

import vecserve.keyedvectors  # noqa: E402,F401
from vecserve.search.planner import Query  # noqa: E402

print(Query(positive=["a", ["b", 2.0]]).positive[1].weight)
