"""The service's per-request metrics cost: the hand-written module of before against
prometheus_client, single-process and multiprocess (several uvicorn workers).

    flock /tmp/vecserve-bench.lock python bench/bench_metrics.py

Prints, per mode, the cost of the three metric updates one /vectors request makes and
of rendering one scrape. The old module is taken from git (commit 1b221dd).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OLD_COMMIT = "1b221dd"
N = 100_000


def old_module():
    src = subprocess.run(
        ["git", "show", f"{OLD_COMMIT}:vecserve/service/metrics.py"],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parent,
    ).stdout.replace("from ..procs import pid_alive", "from vecserve.procs import pid_alive")
    path = Path(tempfile.mkdtemp()) / "old_metrics.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("old_metrics", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure(mode: str) -> tuple[float, float]:
    if mode == "hand-written (before)":
        m = old_module().Metrics()
    else:
        from vecserve.service.metrics import Metrics

        m = Metrics(directory=tempfile.mkdtemp() if mode.endswith("multiprocess") else None)
    t = time.perf_counter()
    for _ in range(N):
        m.inc("vecserve_requests_total", endpoint="/vectors", method="GET", status="200")
        m.observe("vecserve_request_duration_seconds", 0.0012, endpoint="/vectors")
        m.inc("vecserve_vectors_served_total", 100)
    per_request = (time.perf_counter() - t) / N * 1e6
    t = time.perf_counter()
    for _ in range(200):
        m.render()
    return per_request, (time.perf_counter() - t) / 200 * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("mode", nargs="?", help=argparse.SUPPRESS)  # the child's one mode
    args = ap.parse_args()
    if args.mode:  # one mode per process: multiprocess mode is process-wide
        req, scrape = measure(args.mode)
        print(f"{req:.2f} {scrape:.3f}")
        return
    print(f"{'metrics':34s} {'us / request':>12s} {'ms / scrape':>12s}")
    for mode in ("hand-written (before)", "prometheus_client", "prometheus_client multiprocess"):
        out = subprocess.run([sys.executable, __file__, mode], capture_output=True, text=True)
        req, scrape = out.stdout.split()
        print(f"{mode:34s} {float(req):12.2f} {float(scrape):12.3f}")


if __name__ == "__main__":
    main()
