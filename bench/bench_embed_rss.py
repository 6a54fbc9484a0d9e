"""Per-worker memory: N worker processes embedding text, WordLlama served from Redis against
WordLlama loaded in each process.

WordLlama's shipped 32,000 x 256 table and tokenizer, loaded once into an embedded
valkey-server. For each way of serving it, ``--workers`` processes run at the same time,
each embedding the same wiki100m texts (``--short`` sentences and ``--docs`` 1,000-word
documents, batches of ``--batch``):

- ``vecserve, cache``: ``RedisKeyedVectors(..., cache=--cache)`` and ``kv.embed`` (the
  batches twice: admitted, then served from the bounded vector cache);
- ``vecserve, no cache``: the same without a vector cache (every batch one MGET);
- ``WordLlama in-process``: ``WordLlama.load`` and ``embed`` in each worker.

Each worker reports its resident memory after its imports (before any model) and after
the texts; the parent reads every worker's PSS (``/proc/PID/smaps_rollup``: shared pages
split between the processes sharing them) while all of them are alive, and the server's
RSS (the one copy the Redis workers share). Every worker's answers are
summed and compared with the in-process ones.

Run (the machine is shared: take the lock)::

    flock /tmp/vecserve-bench.lock python bench/bench_embed_rss.py --workers 4
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODES = ("vecserve, cache", "vecserve, no cache", "WordLlama in-process")


def _status_mb(pid: str = "self") -> dict[str, float]:
    """VmRSS and VmHWM (peak) of a process, in MB, and its Pss where the kernel tells."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                out["Pss"] = int(line.split()[1]) / 1024
    except OSError:
        pass
    return out


def worker(args) -> None:
    """One worker: imports, the model, every text embedded; its numbers on stdout, then
    alive until the parent closes stdin (so every worker's PSS is read together)."""
    import numpy as np

    texts = json.loads(Path(args.texts).read_text())
    batches = [texts[i : i + args.batch] for i in range(0, len(texts), args.batch)]
    if args.worker == "WordLlama in-process":
        from wordllama import WordLlama

        base = _status_mb()
        wl = WordLlama.load(cache_dir=args.wl_cache, disable_download=True)

        def embed(batch):
            return wl.embed(batch, batch_size=len(batch))

        rounds = 1
    else:
        import scipy.sparse  # noqa: F401 - the pooling's, imported before the baseline
        import tokenizers  # noqa: F401

        import vecserve.text.embed  # noqa: F401
        from vecserve.keyedvectors import RedisKeyedVectors

        base = _status_mb()
        cached = args.worker == "vecserve, cache"
        kv = RedisKeyedVectors(
            "WordLlama", redis_url=args.url, cache=args.cache if cached else False
        )
        if cached:
            kv._get_cache().wait_ready(10)

        def embed(batch):
            return kv.embed(batch).vectors

        rounds = 2 if cached else 1  # the cache admits a token on its second miss
    embed(texts[:1])
    loaded = _status_mb()  # the model's tokenizer (and, in-process, its table) in
    total = 0.0
    for _ in range(rounds):
        total = 0.0
        for batch in batches:
            with np.errstate(invalid="ignore"):
                total += float(np.nansum(embed(batch), dtype=np.float64))
    print(
        json.dumps({"base": base, "loaded": loaded, "end": _status_mb(), "sum": total}), flush=True
    )
    sys.stdin.readline()


def run_mode(mode: str, args, url: str, texts_path: Path, wl_cache: Path) -> list[dict]:
    cmd = [sys.executable, __file__, "--worker", mode, "--url", url, "--texts", str(texts_path)]
    cmd += ["--batch", str(args.batch), "--cache", str(args.cache), "--wl-cache", str(wl_cache)]
    procs = [
        subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(args.workers)
    ]
    try:
        got = []
        for p in procs:
            line = p.stdout.readline()
            if not line:
                raise SystemExit(f"a {mode!r} worker died (exit {p.wait()})")
            got.append(json.loads(line))
        for p, g in zip(procs, got, strict=True):  # all alive: shared pages split N ways
            g["pss"] = _status_mb(str(p.pid)).get("Pss", float("nan"))
        return got
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(60)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--short", type=int, default=20_000, help="Short sentences.")
    p.add_argument("--docs", type=int, default=100, help="1,000-word documents.")
    p.add_argument("--batch", type=int, default=1000, help="Texts per embed call.")
    p.add_argument("--cache", type=int, default=10_000, help="Vector cache rows a worker.")
    p.add_argument("--corpus", default=None)
    p.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--texts", help=argparse.SUPPRESS)
    p.add_argument("--wl-cache", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return

    import wordllama
    from bench_embed import CORPUS, corpus_texts

    from vecserve.embedded import ValkeyProcess
    from vecserve.loader import load_file
    from vecserve.store import Store

    short, docs = corpus_texts(Path(args.corpus or CORPUS), args.short, args.docs)
    work = Path(tempfile.mkdtemp(prefix="vecserve-bench-rss-"))
    wl_dir = Path(wordllama.__file__).parent
    wl_cache = work / "wl"
    (wl_cache / "tokenizers").mkdir(parents=True)
    shutil.copy(
        wl_dir / "tokenizers" / "l2_supercat_tokenizer_config.json", wl_cache / "tokenizers"
    )
    texts_path = work / "texts.json"
    texts_path.write_text(json.dumps(short + docs))
    server = ValkeyProcess(work / "valkey", unixsocket=work / "valkey.sock").start()
    rows = {}
    try:
        store = Store.from_url(server.url)
        load_file(wl_dir, name="WordLlama", store=store, progress=False)
        server_pid = store.client.info("server")["process_id"]
        server_mb = _status_mb(str(server_pid))["VmRSS"]  # the server's, after the load
        for mode in MODES:
            t = time.perf_counter()
            rows[mode] = run_mode(mode, args, server.url, texts_path, wl_cache)
            print(mode, f"{time.perf_counter() - t:.1f} s", rows[mode], flush=True)
        store.close()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    ref = rows["WordLlama in-process"][0]["sum"]
    n = args.workers
    print(
        f"\n{n} workers at once, each embedding {len(short):,} sentences + {len(docs):,} "
        f"documents; valkey-server RSS {server_mb:.0f} MB (the one shared copy)\n"
    )
    print(
        "| each worker (median) | RSS after imports | with the model | after the texts "
        "| PSS | peak RSS | all workers' PSS | answers vs in-process |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")

    def mid(values):
        return sorted(values)[len(values) // 2]

    for mode in MODES:
        ws = rows[mode]
        base = mid([w["base"]["VmRSS"] for w in ws])
        loaded = mid([w["loaded"]["VmRSS"] for w in ws])
        end = mid([w["end"]["VmRSS"] for w in ws])
        pss = mid([w["pss"] for w in ws])
        peak = mid([w["end"]["VmHWM"] for w in ws])
        diff = max(abs(w["sum"] - ref) / max(abs(ref), 1.0) for w in ws)
        print(
            f"| {mode} | {base:.0f} MB | {loaded:.0f} MB | {end:.0f} MB | {pss:.0f} MB "
            f"| {peak:.0f} MB | {sum(w['pss'] for w in ws):.0f} MB | {diff:.1e} |"
        )


if __name__ == "__main__":
    main()
