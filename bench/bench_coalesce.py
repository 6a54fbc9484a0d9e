"""Coalescing concurrent ``most_similar`` requests: the service with and without it, under
``--connections`` concurrent clients, in one run.

A clustered ``--rows`` x 300 model (bench_api's generator) is loaded into a throw-away
valkey-server; its snapshot and approximate (IVF) index are built once into a shared
cache directory; then one uvicorn worker is started with ``VECSERVE_COALESCE=1`` and one
with ``0`` (all map the same files), and ``wrk`` sends ``GET /most_similar`` of random
words for ``--seconds`` each: approximate ones (``VECSERVE_ANN=1``), then exact ones as
a default service answers them (no approximate index). Printed: requests/s and p50/p99
latency of each, one client alone and ``--connections`` at once, and whether every
answer under load was the one the word gets alone.

    flock /tmp/vecserve-bench.lock python bench/bench_coalesce.py --rows 1000000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_api import DIM, WRK_PATHS_LUA, make_model, parse_wrk, start_server
from bench_load import argv

from vecserve.embedded import ValkeyProcess, free_port
from vecserve.loader import load_arrays
from vecserve.search.ann import AnnManager
from vecserve.search.snapshot import IndexManager
from vecserve.store import Store


def paths_file(work: Path, words: list[str], approx: bool) -> Path:
    flag = "&approx=true" if approx else ""
    out = work / f"paths-{'approx' if approx else 'exact'}.txt"
    out.write_text("".join(f"/most_similar?positive={w}&topn=10{flag}\n" for w in words))
    return out


def wrk(base: str, paths: Path, clients: int, seconds: int) -> dict:
    """One wrk run, each request the next path of ``paths``; a request may take 60 s
    (wrk's default of 2 s would count a slow exact batch as a timeout, not a latency)."""
    script = paths.with_suffix(".lua")
    script.write_text(WRK_PATHS_LUA)
    cmd = argv(
        f"wrk -t1 -c{clients} -d{seconds}s --timeout 60s --latency -s {{}} {{}} -- {{}}",
        script,
        f"{base}/",
        paths,
    )
    return parse_wrk(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def answers_under_load(base: str, words: list[str], approx: bool, clients: int) -> bool:
    """Whether ``clients`` threads asking at once get the answers each word gets alone."""
    flag = "&approx=true" if approx else ""
    with httpx.Client(timeout=120) as c:
        alone = [c.get(f"{base}/most_similar?positive={w}{flag}").json()["results"] for w in words]
    local = threading.local()

    def ask(w: str):
        if not hasattr(local, "c"):
            local.c = httpx.Client(timeout=120)
        return local.c.get(f"{base}/most_similar?positive={w}{flag}").json()["results"]

    with ThreadPoolExecutor(clients) as pool:
        together = list(pool.map(ask, words))
    return together == alone


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--clusters", type=int, default=1000)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--exact-seconds", type=int, default=20)
    ap.add_argument("--work", type=Path, default=None)
    args = ap.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="vecserve-bench-coalesce-"))
    server = ValkeyProcess(work / "valkey", port=free_port()).start()
    procs = []
    try:
        store = Store.from_url(server.url)
        words, vectors = make_model(args.rows, DIM, args.clusters)
        info = load_arrays(words, vectors, name="BENCH", store=store, progress=False)
        del vectors
        cache = work / "cache"
        t = time.perf_counter()
        index = IndexManager(store, cache_dir=cache).get("BENCH", info=info)
        ann = AnnManager(enabled=True).get(index, wait=True)
        print(
            f"{args.rows:,} x {DIM}: snapshot and IVF index built in "
            f"{time.perf_counter() - t:.0f} s ({ann.meta.target and ann.meta.target.setting})",
            flush=True,
        )
        rng = np.random.default_rng(7)
        asked = [words[int(i)] for i in rng.choice(args.rows, 5000, replace=False)]
        rows = []
        # approximate queries with the IVF index; exact ones as `vecserve serve` answers
        # them by default (no approximate index: with one, its float16 shortcut answers
        # each exact query alone, coalescing or not)
        for approx in (True, False):
            for coalesce in ("1", "0"):
                port = free_port()
                env = {
                    "VECSERVE_REDIS_URL": server.url,
                    "VECSERVE_CACHE_DIR": str(cache),
                    "VECSERVE_ANN": "1" if approx else "0",
                    "VECSERVE_PRELOAD": "1",
                    "VECSERVE_DEFAULT_MODEL": "BENCH",
                    "VECSERVE_COALESCE": coalesce,
                }
                procs.append(start_server(env, port))
                base = f"http://127.0.0.1:{port}"
                same = answers_under_load(base, asked[:64], approx, args.connections)
                seconds = args.seconds if approx else args.exact_seconds
                # one client alone (what coalescing costs without load), then many
                for clients in (1, args.connections):
                    got = wrk(base, paths_file(work, asked, approx), clients, seconds)
                    rows.append((coalesce == "1", approx, clients, got, same))
                    print(rows[-1], flush=True)
                procs.pop().terminate()
        print(f"\n`GET /most_similar` of one word, {args.rows:,} x {DIM}:\n")
        print("| search | clients | coalescing | requests/s | p50 ms | p99 ms | answers |")
        print("|---|---:|---|---:|---:|---:|---|")
        for on, approx, clients, got, same in rows:
            answers = ("each its own" if same else "DIFFER") + (
                f", {got['errors']} errors" if got["errors"] else ""
            )
            print(
                f"| {'approximate' if approx else 'exact'} | {clients} | "
                f"{'on' if on else 'off'} | {got['rps']:,.0f} | {got['p50']:.1f} | "
                f"{got['p99']:.1f} | {answers} |"
            )
    finally:
        for p in procs:
            p.terminate()
        server.stop()
        if args.work is None:
            import shutil

            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
