"""Redis memory and disk per vector, by codec, at the users' scale: the figures for sizing
a deployment's Redis (docs/deploy.md).

    flock /tmp/vecserve-bench.lock python bench/bench_redis_sizing.py --vectors 3000000

Generates a GoogleNews-shaped N x 300 word2vec binary (bench_load.write_bin; kept under
--out for the next run), then, per codec, starts a fresh embedded valkey-server (jemalloc,
as in the valkey and redis images), loads the file with the real ``vecserve load --codec``
and reports: ``used_memory`` after the load minus before (what ``maxmemory`` must hold),
``used_memory_rss``, and the RDB file after ``SAVE`` (what the volume must hold, twice
during a rewrite). One server is alive at a time and its data directory is deleted after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import argv, write_bin

from vecserve.embedded import ValkeyProcess

DIM = 300


def wait_saved(client: redis.Redis) -> None:
    while client.info("persistence")["rdb_bgsave_in_progress"]:
        time.sleep(0.5)


def measure(path: Path, n: int, codec: str, workdir: Path) -> dict:
    data = workdir / f"valkey-{codec}"
    server = ValkeyProcess(data, unixsocket=data / "s.sock").start()
    try:
        client = redis.Redis.from_url(server.url, socket_timeout=None)
        before = client.info("memory")["used_memory"]
        t0 = time.perf_counter()
        subprocess.run(
            argv(
                "vecserve load {} --key {} --codec {} --redis-url {} --no-progress",
                path,
                f"SIZE_{codec}",
                codec,
                server.url,
            ),
            check=True,
            env=os.environ | {"VECSERVE_REDIS_URL": server.url},
            stdout=subprocess.DEVNULL,
        )
        secs = time.perf_counter() - t0
        wait_saved(client)  # vecserve's own save after the commit, if any
        mem = client.info("memory")
        client.bgsave()
        wait_saved(client)
        rdb = (data / "dump.rdb").stat().st_size
        client.close()
        return {
            "codec": codec,
            "used": mem["used_memory"] - before,
            "rss": mem["used_memory_rss"],
            "rdb": rdb,
            "load_s": secs,
        }
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--vectors", type=int, default=3_000_000)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    ap.add_argument("--codecs", default="f32,f16,i8")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    n = args.vectors
    path = write_bin(args.out / f"GoogleNews-shaped-{n}.bin", n, DIM)
    print(f"{n:,} x {DIM} GoogleNews-shaped vectors ({path.stat().st_size / 1e9:.2f} GB file)")
    print(
        f"{'codec':6} {'Redis B/vector':>15} {'model in Redis':>15} {'server RSS':>11} "
        f"{'RDB B/vector':>13} {'RDB file':>9} {'load':>7}"
    )
    with tempfile.TemporaryDirectory(prefix="vecserve-sizing-") as tmp:
        for codec in args.codecs.split(","):
            r = measure(path, n, codec, Path(tmp))
            print(
                f"{codec:6} {r['used'] / n:>13,.0f} B {r['used'] / 1e9:>12.2f} GB "
                f"{r['rss'] / 1e9:>8.2f} GB {r['rdb'] / n:>11,.0f} B "
                f"{r['rdb'] / 1e9:>6.2f} GB {r['load_s']:>6.1f}s",
                flush=True,
            )


if __name__ == "__main__":
    main()
