"""Bulk-load benchmark: vecserve's loader vs the old approach vs the raw-MSET ceiling.

Generates a GoogleNews-shaped word2vec ``.bin`` (300 dims; ``--vectors`` of them, 1M by
default), starts a throw-away valkey-server, and reports in one run, beside each other:

- ``vecserve load`` end to end (parse + encode + write), run as the real CLI in a child
  process so its wall time and peak RSS are the user's, for each codec asked for;
- gensim ``KeyedVectors.load_word2vec_format`` of the same file (what each worker pays
  today), wall time and peak RSS, also in a child process;
- the old approach, one ``SET`` of ``bz2(pickle(vector))`` per token, on a sample;
- the ceiling: pipelined ``MSET`` batches of pre-encoded bytes, nothing else.

Run::

    python bench/bench_load.py --vectors 1000000 --out /tmp/vecserve-bench

Quote ratios, not absolute times: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import bz2
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import redis

from vecserve.embedded import ValkeyProcess, free_port


def make_tokens(n: int, seed: int = 1) -> list[str]:
    """GoogleNews-like tokens: words and Phrases_Like_This, unique, mixed lengths."""
    rng = np.random.default_rng(seed)
    syll = ["ka", "lo", "mer", "tin", "sa", "ve", "ron", "di", "que", "ba", "st", "el"]
    out = []
    for i in range(n):
        k = int(rng.integers(1, 5))
        word = "".join(syll[j] for j in rng.integers(0, len(syll), size=k))
        if i % 4 == 0:
            word = word.capitalize() + "_" + "".join(syll[j] for j in rng.integers(0, 12, 2))
        out.append(f"{word}{i}")
    return out


def write_bin(path: Path, n: int, dim: int) -> Path:
    """Write an ``n x dim`` word2vec binary file in chunks (constant memory)."""
    if path.exists():
        return path
    tokens = make_tokens(n)
    rng = np.random.default_rng(0)
    tmp = path.with_suffix(".part")
    with open(tmp, "wb") as f:
        f.write(f"{n} {dim}\n".encode())
        for lo in range(0, n, 50_000):
            hi = min(lo + 50_000, n)
            vecs = (rng.standard_normal((hi - lo, dim)) * 0.1).astype("<f4")
            pairs = zip(tokens[lo:hi], vecs, strict=True)
            f.write(b"".join(t.encode() + b" " + v.tobytes() for t, v in pairs))
    tmp.rename(path)
    return path


def argv(line: str, *values) -> list[str]:
    """A command line: ``line`` split at whitespace, each ``{}`` in it replaced by the
    next of ``values`` as one argument (a path may hold spaces)."""
    words = line.split()
    if any("{}" in w and w != "{}" for w in words):
        raise ValueError(f"{line!r}: a {{}} stands for a whole argument, not part of one")
    if words.count("{}") != len(values):
        raise ValueError(f"{line!r} has {words.count('{}')} {{}} for {len(values)} values")
    given = iter(values)
    return [str(next(given)) if w == "{}" else w for w in words]


def flush(client: redis.Redis) -> None:
    """FLUSHALL SYNC: an async flush would free memory after we read the baseline."""
    client.execute_command("FLUSHALL", "SYNC")


PROGRAMS = Path(__file__).parent / "programs"


def run_child(argv: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """Run a command; return (wall seconds, peak RSS MB, its output).

    The command is started by ``programs/measure.py``: a child forked straight from
    this (large) benchmark process would inherit its resident-set high-water mark.
    """
    proc = subprocess.run(
        [sys.executable, str(PROGRAMS / "measure.py"), *argv],
        capture_output=True,
        text=True,
        env=env,
    )
    wall, rss_kb, code = proc.stderr.strip().splitlines()[-1].split()
    if int(code) != 0:
        raise SystemExit(f"{argv} failed ({code}):\n{proc.stdout}\n{proc.stderr}")
    return float(wall), int(rss_kb) / 1024, proc.stdout


def bench_old(client: redis.Redis, path: Path, sample: int) -> float:
    """The old approach: one SET of bz2(pickle(vector)) per token, no pipeline."""
    from vecserve.readers import open_vectors

    with open_vectors(path, batch_size=sample) as reader:
        batch = next(iter(reader))
    t0 = time.perf_counter()
    for tok, vec in zip(batch.tokens, batch.vectors, strict=False):
        client.set(f"OLD:{tok}", bz2.compress(pickle.dumps(vec)))
    return len(batch.tokens) / (time.perf_counter() - t0)


def bench_raw_mset(client: redis.Redis, path: Path, batch: int) -> float:
    """Ceiling: pipelined MSETs of keys and values prepared before the clock starts."""
    from vecserve.readers import open_vectors

    commands = []
    with open_vectors(path, batch_size=batch) as reader:
        for b in reader:
            args: list[bytes] = []
            for tok, vec in zip(b.tokens, b.vectors, strict=False):
                args += [b"RAW:" + tok.encode(), vec.astype("<f4").tobytes()]
            commands.append(args)
    n = sum(len(a) // 2 for a in commands)
    t0 = time.perf_counter()
    for args in commands:
        client.execute_command("MSET", *args)
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--vectors", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=300)
    ap.add_argument("--old-sample", type=int, default=20_000)
    ap.add_argument("--codecs", default="f32,f16,i8")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "vecserve-bench"))
    ap.add_argument("--transport", choices=["tcp", "unix", "both"], default="both")
    args = ap.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    path = write_bin(out / f"gnews-shaped-{args.vectors}x{args.dim}.bin", args.vectors, args.dim)
    size_mb = path.stat().st_size / 1e6
    print(f"file: {path} ({size_mb:,.0f} MB, made in {time.perf_counter() - t0:.0f}s)")

    transports = ["tcp", "unix"] if args.transport == "both" else [args.transport]
    for transport in transports:
        rows = run_transport(path, args, transport)
        print_table(rows, args, transport)


def run_transport(path: Path, args, transport: str) -> list[tuple]:
    """Every method against one fresh server reached over ``transport``."""
    server_dir = Path(tempfile.mkdtemp(prefix="vecserve-bench-server-"))
    if transport == "unix":
        server = ValkeyProcess(server_dir, unixsocket=server_dir / "s.sock").start()
    else:
        server = ValkeyProcess(server_dir, port=free_port()).start()
    client = redis.Redis.from_url(server.url)
    env = dict(os.environ, VECSERVE_REDIS_URL=server.url)
    vecserve = [sys.executable, "-m", "vecserve.cli"]
    rows = []
    try:
        for codec in args.codecs.split(","):
            flush(client)
            base = client.info("memory")["used_memory"]
            wall, rss, _ = run_child(
                [*vecserve, *argv("-q load {} --key BENCH --codec {} --no-progress", path, codec)],
                env,
            )
            per_vec = (client.info("memory")["used_memory"] - base) / args.vectors
            rows.append((f"vecserve load ({codec})", args.vectors / wall, rss, per_vec))
        flush(client)

        wall, rss, _ = run_child([sys.executable, str(PROGRAMS / "gensim_load.py"), str(path)])
        rows.append(("gensim load_word2vec_format (in RAM)", args.vectors / wall, rss, None))

        base = client.info("memory")["used_memory"]
        rate = bench_old(client, path, args.old_sample)
        per_vec = (client.info("memory")["used_memory"] - base) / args.old_sample
        rows.append(
            (f"old: SET bz2(pickle) per key ({args.old_sample:,} sample)", rate, None, per_vec)
        )
        flush(client)

        base = client.info("memory")["used_memory"]
        rate = bench_raw_mset(client, path, batch=1700)
        per_vec = (client.info("memory")["used_memory"] - base) / args.vectors
        rows.append(("ceiling: raw MSET of pre-encoded f32", rate, None, per_vec))
    finally:
        client.close()
        server.stop()
    return rows


def print_table(rows: list[tuple], args, transport: str) -> None:
    ours = rows[0][1]
    where = "unix socket (the embedded default)" if transport == "unix" else "TCP loopback"
    print()
    print(f"{args.vectors:,} x {args.dim} float32, {where}, load average {os.getloadavg()[0]:.1f}")
    print(
        f"| {'method':<48} | {'vectors/s':>11} | {'vs ours f32':>11} | {'peak RSS MB':>11} "
        f"| {'Redis B/vector':>14} |"
    )
    print(f"|{'-' * 50}|{'-' * 13}|{'-' * 13}|{'-' * 13}|{'-' * 16}|")
    for name, rate, rss, per in rows:
        rss_s = "" if rss is None else f"{rss:,.0f}"
        per_s = "" if per is None else f"{per:,.0f}"
        print(
            f"| {name:<48} | {rate:>11,.0f} | {rate / ours:>10.3f}x | {rss_s:>11} | {per_s:>14} |"
        )


if __name__ == "__main__":
    main()
