"""Redis killed and restarted from its data while the service and a worker are busy.

A ``valkey-server`` with AOF persistence (``appendfsync everysec``) holds a model; a real
``vecserve serve`` answers a steady stream of ``POST /vectors`` (one client thread) while
a worker thread reads the same words through a cached ``RedisKeyedVectors`` in a loop.
After ``--before`` seconds the server is SIGKILLed; ``--down`` seconds later it is
started again on the same port and data directory; the run goes on for ``--after``
seconds. Every answer is checked against the loaded vectors.

Reported: requests and reads before/during/after, how the failures looked (HTTP 503 with
Retry-After; ``StoreUnavailable``), anything else (tracebacks, 500s, wrong vectors: must
be 0), and the time from the restart to the first right answer of each.

Usage::

    flock /tmp/vecserve-bench.lock python bench/bench_restart.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_load import argv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--words", type=int, default=20_000)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--batch", type=int, default=50, help="words per request / read")
    ap.add_argument("--before", type=float, default=3.0)
    ap.add_argument("--down", type=float, default=2.0)
    ap.add_argument("--after", type=float, default=8.0)
    args = ap.parse_args()

    from vecserve.embedded import ValkeyProcess, free_port
    from vecserve.errors import StoreUnavailable
    from vecserve.keyedvectors import RedisKeyedVectors
    from vecserve.loader import load_arrays

    tmp = Path(tempfile.mkdtemp(prefix="vecserve-restart-"))
    port = free_port()
    config = {"appendonly": "yes", "appendfsync": "everysec"}
    server = ValkeyProcess(tmp / "redis", port=port, config=config).start()
    url = server.url
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(args.words)]
    vectors = rng.standard_normal((args.words, args.dim)).astype(np.float32)
    load_arrays(words, vectors, name="R", redis_url=url)
    time.sleep(1.5)  # the AOF's everysec fsync: the model is on disk

    api_port = free_port()
    env = {**os.environ, "VECSERVE_CACHE_DIR": str(tmp / "cache")}
    with open(tmp / "serve.log", "wb") as log:
        serve = subprocess.Popen(
            argv(
                "{} -m vecserve.cli serve --port {} --redis-url {} --default-model R",
                sys.executable,
                api_port,
                url,
            ),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    base = f"http://127.0.0.1:{api_port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, (tmp / "serve.log").read_text()
        time.sleep(0.1)

    stop = threading.Event()
    api_log: list[tuple[float, str]] = []  # (time, outcome)
    worker_log: list[tuple[float, str]] = []

    def client() -> None:
        with httpx.Client(base_url=base, timeout=5) as c:
            i = 0
            while not stop.is_set():
                lo = (i * args.batch) % (args.words - args.batch)
                i += 1
                try:
                    r = c.post("/vectors", json={"words": words[lo : lo + args.batch]})
                except httpx.HTTPError as exc:
                    api_log.append((time.monotonic(), f"transport {type(exc).__name__}"))
                    continue
                if r.status_code == 200:
                    got = np.asarray(r.json()["vectors"], np.float32)
                    ok = np.array_equal(got, vectors[lo : lo + args.batch])
                    api_log.append((time.monotonic(), "ok" if ok else "WRONG"))
                elif r.status_code == 503:
                    has = "retry-after" in r.headers
                    api_log.append((time.monotonic(), "503" if has else "503 without Retry-After"))
                else:
                    api_log.append((time.monotonic(), f"HTTP {r.status_code}"))
                    time.sleep(0.01)

    def worker() -> None:
        kv = RedisKeyedVectors("R", redis_url=url, cache=args.words)
        i = 0
        while not stop.is_set():
            lo = (i * args.batch) % (args.words - args.batch)
            i += 1
            try:
                got = kv[words[lo : lo + args.batch]]
            except StoreUnavailable:
                worker_log.append((time.monotonic(), "StoreUnavailable"))
                time.sleep(0.01)
                continue
            except Exception as exc:  # counted: must not happen
                worker_log.append((time.monotonic(), f"{type(exc).__name__}"))
                time.sleep(0.01)
                continue
            ok = np.array_equal(got, vectors[lo : lo + args.batch])
            worker_log.append((time.monotonic(), "ok" if ok else "WRONG"))
        kv.close()

    threads = [threading.Thread(target=client), threading.Thread(target=worker)]
    for t in threads:
        t.start()
    time.sleep(args.before)
    t_kill = time.monotonic()
    server.kill()
    time.sleep(args.down)
    server = ValkeyProcess(tmp / "redis", port=port, config=config).start()
    t_up = time.monotonic()
    time.sleep(args.after)
    stop.set()
    for t in threads:
        t.join(30)
    serve.terminate()
    serve.wait(30)
    server.stop()

    def summary(name: str, log: list[tuple[float, str]]) -> list[str]:
        phases = {"before": [], "down": [], "after": []}
        for t, what in log:
            phase = "before" if t < t_kill else "down" if t < t_up else "after"
            phases[phase].append(what)
        first_ok = next((t - t_up for t, what in log if t >= t_up and what == "ok"), None)
        last_bad = max((t - t_up for t, what in log if t >= t_up and what != "ok"), default=0)
        out = []
        for phase, items in phases.items():
            kinds: dict[str, int] = {}
            for what in items:
                kinds[what] = kinds.get(what, 0) + 1
            shown = ", ".join(f"{k} {v:,}" for k, v in sorted(kinds.items()))
            out.append(f"| {name} | {phase} | {len(items):,} | {shown} |")
        rec = "never" if first_ok is None else f"{first_ok:.2f} s"
        out.append(
            f"| {name} | recovery | | first right answer {rec} after the restart; "
            f"last failure {last_bad:.2f} s after it |"
        )
        return out

    print(f"Redis down {t_up - t_kill:.1f} s (SIGKILL, then restarted from its AOF)\n")
    print("| who | phase | answers | outcomes |")
    print("|---|---|---:|---|")
    for line in summary("API POST /vectors", api_log) + summary("worker kv[...]", worker_log):
        print(line)
    wrong = sum(what == "WRONG" for _, what in api_log + worker_log)
    print(f"\nwrong vectors served: {wrong}")


if __name__ == "__main__":
    main()
