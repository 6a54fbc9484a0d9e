"""The GoogleNews-scale story on the embedded default, end to end, as a user lives it.

    flock /tmp/vecserve-bench.lock python bench/bench_scale.py --vectors 3000000

Generates a GoogleNews-shaped word2vec binary (N x 300, float32), loads it with the real
``vecserve load`` into a fresh embedded server, then times every later command a user
types (each a new process: Python start-up included), the background save that makes the
commit durable, and a ``server stop`` / restart from the data dir. Prints one table.

Measured so far: the embedded server's life and the CLI. Not yet here (issue 11): the
time-to-ready and latencies of exact and approximate most_similar at this scale, and
per-worker memory; see BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_load import make_tokens, write_bin

REPEAT = 5


def vecserve(env: dict, *args: str) -> tuple[float, str]:
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "vecserve.cli", *args],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    elapsed = time.perf_counter() - t
    if proc.returncode not in (0, 3):
        raise SystemExit(f"vecserve {' '.join(args)} failed: {proc.stderr}")
    return elapsed, proc.stdout


def status(env: dict) -> dict:
    return json.loads(vecserve(env, "server", "status", "--json")[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--vectors", type=int, default=3_000_000)
    ap.add_argument("--dim", type=int, default=300)
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "vecserve-bench"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"GoogleNews-shaped-{args.vectors // 1000}k-{args.dim}.bin"
    t = time.perf_counter()
    write_bin(path, args.vectors, args.dim)
    print(
        f"file {path} ({path.stat().st_size / 1e9:.2f} GB) ready in {time.perf_counter() - t:.0f}s"
    )
    data = Path(tempfile.mkdtemp(prefix="vs-scale-", dir=out))
    env = {k: v for k, v in os.environ.items() if k != "VECSERVE_REDIS_URL"}
    env["VECSERVE_DATA_DIR"] = str(data)
    rows = []
    try:
        secs, _ = vecserve(env, "load", str(path), "--key", "GNEWS")
        rows.append(("vecserve load (starts the server)", secs, ""))
        t = time.perf_counter()
        while not status(env)["saved"]:
            time.sleep(0.2)
        rows.append(("background save after the commit, done after", time.perf_counter() - t, ""))
        st = status(env)
        rows.append(("server memory", 0.0, f"{st['used_memory_human']}, "
                     f"{st['used_memory'] / args.vectors:,.0f} B/vector"))  # fmt: skip
        word = make_tokens(10)[3]
        for label, argv in [
            ("vecserve models", ["models"]),
            ("vecserve models info GNEWS", ["models", "info", "GNEWS"]),
            (f"vecserve get {word} --key GNEWS", ["get", word, "--key", "GNEWS"]),
            ("vecserve server status", ["server", "status"]),
        ]:
            times = sorted(vecserve(env, *argv)[0] for _ in range(REPEAT))
            rows.append((label, times[len(times) // 2], f"max {times[-1]:.2f}s of {REPEAT}"))
        pid = st["pid"]
        assert status(env)["pid"] == pid, "a command restarted the server"
        secs, _ = vecserve(env, "server", "stop")
        rows.append(("vecserve server stop (nothing unsaved)", secs, ""))
        secs, _ = vecserve(env, "models")
        rows.append(("first command after a stop (reloads the RDB)", secs, ""))
    finally:
        vecserve(env, "server", "stop")
        shutil.rmtree(data, ignore_errors=True)
    print(f"\n{args.vectors:,} x {args.dim} on the embedded server, {os.cpu_count()} cores")
    print(f"{'step':52s} {'seconds':>8s}  note")
    for label, secs, note in rows:
        print(f"{label:52s} {secs:8.2f}  {note}")


if __name__ == "__main__":
    main()
