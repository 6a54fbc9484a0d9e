"""One service worker's metrics in a shared directory:
``metrics_worker.py DIR REQUESTS ROWS ENTRIES``; prints ``ready`` and stays alive (a live
worker) until a line arrives on stdin."""

import sys

from vecserve.service.metrics import Metrics

m = Metrics(directory=sys.argv[1])
n, rows, entries = (int(x) for x in sys.argv[2:5])
m.inc("vecserve_requests_total", n, endpoint="/v", method="GET", status="200")
m.observe("vecserve_request_duration_seconds", 0.001 if n == 3 else 0.2, endpoint="/v")
m.set("vecserve_index_rows", rows, model="M")
m.set("vecserve_vector_cache_entries", entries, model="M")
print("ready", flush=True)
sys.stdin.readline()
