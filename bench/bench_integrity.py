"""What a whole model costs: the completeness check against the load, and Redis memory a row.

Generates (or reuses) a GoogleNews-shaped word2vec ``.bin`` (``bench_load.write_bin``),
starts a throw-away valkey-server on TCP loopback, and reports in one run:

- ``vecserve load`` end to end, as the real CLI in a child process: its wall time includes
  the verified writes (one MULTI/EXEC a batch) and the completeness check before the flip;
- that check as the commit ran it (its own log line: a fresh load is proven whole by the
  server's INFO counters and a sample of its keys, ``vecserve.store.facts``), and its
  share of the load;
- every key asked, as a commit does when the counters moved, the load was resumed or INFO
  is refused (``Store.check_rows`` with the vocabulary hashed on the way), in this
  process right after the load, and its share; and ``vecserve models check`` (the CLI);
- per codec, ``INFO memory`` bytes a vector, the per-key overhead beyond the value's bytes,
  and the pre-flight's estimate (``vecserve.loader.estimate_bytes``) against it.

Run (under the bench lock; a 3M x 300 f32 model takes ~3.9 GB in the server)::

    flock /tmp/vecserve-bench.lock python bench/bench_integrity.py --vectors 1000000
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_load import argv, flush, run_child, write_bin

from vecserve.codec import get_codec
from vecserve.embedded import ValkeyProcess, free_port
from vecserve.loader import estimate_bytes
from vecserve.store import Store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--vectors", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=300)
    ap.add_argument("--codecs", default="f32,f16,i8")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "vecserve-bench"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = write_bin(out / f"gnews-shaped-{args.vectors}x{args.dim}.bin", args.vectors, args.dim)
    server_dir = Path(tempfile.mkdtemp(prefix="vecserve-bench-server-"))
    server = ValkeyProcess(server_dir, port=free_port()).start()
    client = redis.Redis.from_url(server.url, socket_timeout=600)  # a busy box: no 5 s limit
    env = dict(os.environ, VECSERVE_REDIS_URL=server.url)
    cli = [sys.executable, "-m", "vecserve.cli"]
    rows = []
    try:
        for codec in args.codecs.split(","):
            flush(client)
            base = client.info("memory")["used_memory"]
            load, _, _ = run_child(  # its log (stderr) to a file, for the check's line
                [
                    *["sh", "-c", 'exec "$@" 2>"$0"', str(out / "load.log"), *cli],
                    *argv("load {} --key BENCH --codec {} --no-progress", path, codec),
                ],
                env,
            )
            said = re.search(r"rows present, (.*); ([0-9.]+) s", (out / "load.log").read_text())
            assert said, "no completeness line in the load's log"
            in_commit, how = float(said.group(2)), said.group(1)
            used = client.info("memory")["used_memory"] - base
            store = Store.from_url(server.url, socket_timeout=600)
            info = store.get_model("BENCH")
            t0 = time.perf_counter()
            check = store.check_rows(info, hashes=True)
            every_key = time.perf_counter() - t0
            assert check.missing == 0, check
            tokens = store.vocab(info, 0, 10_000)
            store.close()
            fresh = Store.from_url(
                server.url, socket_timeout=600
            )  # a reader's first miss: the hashes, once
            t0 = time.perf_counter()
            known = fresh.vocab_hashes(info)
            first_miss = (time.perf_counter() - t0, known.nbytes)
            fresh.close()
            cli_check, _, _ = run_child([*cli, "models", "check", "BENCH"], env)
            per = used / args.vectors
            value = get_codec(codec).nbytes(args.dim)
            mean_token = float(np.mean([len(t.encode()) for t in tokens]))
            est = estimate_bytes(args.vectors, args.dim, codec) / args.vectors
            rows.append(
                (codec, load, in_commit, how, every_key, cli_check, per, value, mean_token, est)
            )
    finally:
        client.close()
        server.stop()
    print(f"\n{args.vectors:,} x {args.dim}, TCP loopback, load average {os.getloadavg()[0]:.1f}")
    print(
        "| codec | load (CLI) | check in the commit | share of the load | every key asked "
        "| its share | `models check` | Redis B/vector | overhead beyond the value "
        "| pre-flight estimate |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for codec, load, chk, _, every, cli_chk, per, value, tok, est in rows:
        print(
            f"| {codec} | {load:.1f} s | {chk:.2f} s | {100 * chk / load:.1f}% | {every:.2f} s "
            f"| {100 * every / load:.1f}% | {cli_chk:.1f} s | {per:,.0f} "
            f"| {per - value:,.0f} B ({per - value - tok:,.0f} + {tok:.1f} B of key) "
            f"| {est:,.0f} ({100 * (est / per - 1):+.1f}%) |"
        )
    for codec, *_, how in ((r[0], r[3]) for r in rows):
        print(f"\n{codec}: the commit's check: {how}")
    took, nbytes = first_miss
    print(
        f"\nA reader's first miss of a generation reads its word hashes: {nbytes / 1e6:.0f} MB "
        f"in {took:.2f} s (once per process and generation)."
    )


if __name__ == "__main__":
    main()
