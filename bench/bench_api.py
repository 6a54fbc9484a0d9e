"""HTTP service benchmark: /vectors throughput, most_similar latency exact/approximate vs gensim.

One run, beside each other:

- ``/vectors`` with 1, 10 and 100 words, JSON and binary (raw float32): requests/s and
  p50/p99 latency under ``wrk`` (``--connections`` concurrent, ``--seconds`` per case)
  against one uvicorn worker on 127.0.0.1;
- ``most_similar`` (topn=10, one word) on an ``--vectors`` x 300 model: the service
  exact (POST /most_similar) and approximate (``approx=true``, the index ``AnnIndex``
  picks: IVF or HNSW) one request at a time, against gensim's
  ``KeyedVectors.most_similar`` on the same matrix in memory in this process; recall@10
  of approximate vs exact over the same queries.

The model is synthetic and clustered (``--clusters`` centres plus noise: neighbours exist,
as in real embeddings; uniform random vectors would have none), loaded into a throw-away
valkey-server. Similarity snapshot and ANN index are built by this script into the cache
dir first (timed), then the server maps them from disk, as a second worker would.

Run (the machine is shared: take the lock)::

    flock /tmp/vecserve-bench.lock python bench/bench_api.py --vectors 1000000

Today's figures are in BENCHMARKS.md ("HTTP API"); ``--out FILE`` also writes the tables.

``--only-vectors`` runs just the ``/vectors`` part (no snapshot, no ANN build, no
most_similar; the server starts without preloading) and prints its markdown section.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_load import argv

from vecserve.embedded import ValkeyProcess, free_port
from vecserve.loader import load_arrays
from vecserve.search.ann import AnnManager, AnnParams, recall_at_k
from vecserve.search.snapshot import IndexManager
from vecserve.store import Store

DIM = 300


def make_model(n: int, dim: int, clusters: int, seed: int = 0) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    out = np.empty((n, dim), dtype=np.float32)
    step = 100_000
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        k = rng.integers(0, clusters, hi - lo)
        out[lo:hi] = centres[k] + 0.8 * rng.standard_normal((hi - lo, dim), dtype=np.float32)
    return [f"w{i}" for i in range(n)], out


def percentile_ms(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples) * 1000, q))


def parse_wrk(text: str) -> dict:
    def ms(v: str) -> float:
        num, unit = re.match(r"([\d.]+)(\w+)", v).groups()
        return float(num) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    p50 = ms(re.search(r"\s50%\s+(\S+)", text).group(1))
    p99 = ms(re.search(r"\s99%\s+(\S+)", text).group(1))
    transfer = re.search(r"Transfer/sec:\s+(\S+)", text).group(1)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    return {
        "rps": rps,
        "p50": p50,
        "p99": p99,
        "transfer": transfer,
        "errors": int(errors.group(1)) if errors else 0,
    }


def wrk(
    url: str,
    *,
    accept: str,
    connections: int,
    seconds: int,
    threads: int = 1,
    paths: Path | None = None,
) -> dict:
    """One wrk run; with ``paths`` (a file of request paths) each request takes the next."""
    cmd = argv(
        f"wrk -t{threads} -c{connections} -d{seconds}s --latency -H {{}}", f"Accept: {accept}"
    )
    if paths is not None:
        script = paths.with_suffix(".lua")
        script.write_text(WRK_PATHS_LUA)
        cmd += ["-s", str(script), url, "--", str(paths)]
    else:
        cmd.append(url)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return parse_wrk(out)


def start_server(env: dict, port: int) -> subprocess.Popen:
    cmd = argv(
        "{} -m uvicorn vecserve.api:create_app --factory --host 127.0.0.1 --port {}"
        " --log-level warning --no-access-log",
        sys.executable,
        port,
    )
    proc = subprocess.Popen(cmd, env={**os.environ, **env})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError("uvicorn exited")
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("uvicorn did not become ready")


WRK_PATHS_LUA = """
local paths, i = {}, 0
function init(args)
  for line in io.lines(args[1]) do paths[#paths + 1] = line end
end
function request()
  i = i % #paths + 1
  return wrk.format("GET", paths[i])
end
"""

FORMATS = (("JSON", "application/json"), ("binary", "application/octet-stream"))
SIZES = (1, 10, 100)


def zipf_sampler(rng, n_vocab: int, s: float = 1.0):
    """``draw(size)``: vocabulary ranks with P(rank r) ~ 1/(r+1)^s, words as they occur in
    text (the synthetic vocabulary, like GoogleNews', is ordered by frequency)."""
    cdf = np.cumsum(1.0 / np.arange(1, n_vocab + 1, dtype=np.float64) ** s)
    cdf /= cdf[-1]
    return lambda size: np.minimum(np.searchsorted(cdf, rng.random(size)), n_vocab - 1)


def cache_counts(base: str) -> tuple[float, float]:
    text = httpx.get(f"{base}/metrics").text

    def value(name: str) -> float:
        m = re.search(rf'^{name}{{cache="vectors"}} (\S+)$', text, re.M)
        return float(m.group(1)) if m else 0.0

    return value("vecserve_cache_hits_total"), value("vecserve_cache_misses_total")


def bench_vectors(base: str, scenario: str, paths: dict[int, list[str]], args, work: Path):
    """wrk against ``base`` for every size and format; ``paths[n]`` is cycled per request."""
    rows = []
    for n in SIZES:
        pool = work / f"paths-{scenario}-{n}.txt"
        pool.write_text("\n".join(paths[n]) + "\n")
        for fmt, accept in FORMATS:
            r = httpx.get(base + paths[n][0], headers={"accept": accept})
            r.raise_for_status()
            if len(paths[n]) > 1:  # warm the cache on this pool first (not measured)
                wrk(base, accept=accept, connections=args.connections, seconds=2, paths=pool)
            h0, m0 = cache_counts(base)
            res = wrk(
                base + paths[n][0],
                accept=accept,
                connections=args.connections,
                seconds=args.seconds,
                paths=pool,
            )
            h1, m1 = cache_counts(base)
            hit = (h1 - h0) / max(h1 - h0 + m1 - m0, 1)
            res.update(scenario=scenario, words=n, format=fmt, bytes=len(r.content), hit=hit)
            rows.append(res)
            print(
                f"{scenario:<22} /vectors {n:>3} words {fmt:<6} {res['rps']:>8.0f} req/s  "
                f"p50 {res['p50']:.2f} ms  p99 {res['p99']:.2f} ms  "
                f"cache hits {hit:.0%}",
                flush=True,
            )
    return rows


def vectors_suite(redis_url: str, tokens: list[str], args, work: Path) -> list[dict]:
    """Four scenarios, each against a fresh uvicorn worker:

    - ``cache off, fixed words``: VECSERVE_VECTOR_CACHE=0, the same words every request:
      every vector comes from Redis (one MGET);
    - ``cache off, Zipf stream``: a pool of ``--pool`` different requests, words drawn
      Zipf(1) over the vocabulary ranks, all from Redis;
    - ``cache on, Zipf stream``: the same requests with the default cache (20,000
      vectors, a word admitted on its second miss);
    - ``cache on, fixed words``: the default cache, the same words every request (all hits
      once warm): the hot path.
    """
    rng = np.random.default_rng(1)
    fixed = {
        n: [_path(tokens[i] for i in rng.choice(len(tokens), n, replace=False))] for n in SIZES
    }
    draw = zipf_sampler(rng, len(tokens))
    zipf = {n: [_path(tokens[i] for i in draw(n)) for _ in range(args.pool)] for n in SIZES}
    rows = []
    for scenario, cache, paths in (
        ("cache off, fixed words", "0", fixed),
        ("cache off, Zipf stream", "0", zipf),
        ("cache on, Zipf stream", None, zipf),
        ("cache on, fixed words", None, fixed),
    ):
        env = {"VECSERVE_REDIS_URL": redis_url, "VECSERVE_DEFAULT_MODEL": "BENCH"}
        if cache is not None:
            env["VECSERVE_VECTOR_CACHE"] = cache
        port = free_port()
        proc = start_server(env, port)
        try:
            rows += bench_vectors(f"http://127.0.0.1:{port}", scenario, paths, args, work)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return rows


def _path(words) -> str:
    return "/vectors?words=" + ",".join(words)


def bench_handler(url: str, tokens: list[str], *, reps: int = 300) -> dict:
    """Server-side cost of one /vectors answer of 100 words, in process (no HTTP, no
    framework): the lookup (Redis MGET, or the vector cache) + encoding the body."""
    from vecserve import api
    from vecserve.service.deps import AppContext, ModelCache, StoreHandle
    from vecserve.service.metrics import Metrics
    from vecserve.service.routes_vectors import answer_vectors
    from vecserve.service.settings import Settings

    words = [tokens[i] for i in np.random.default_rng(3).choice(len(tokens), 100, replace=False)]
    out = {}
    for label, size in (("Redis", 0), ("cache", 20_000)):
        metrics = Metrics()
        ctx = AppContext(
            settings=Settings(redis_url=url, vector_cache=size),
            stores=StoreHandle(url),
            metrics=metrics,
            models=ModelCache(ttl=60, metrics=metrics, vector_cache=size),
        )
        if size:
            ctx.model("BENCH")  # the reader knows the model: its cache can start
            assert ctx.reader("BENCH").cache().wait_ready(10)
        for fmt, media in (("JSON", api.JSON), ("binary", api.OCTET)):
            for _ in range(20):
                answer_vectors(ctx, "BENCH", words, "omit", media)
            lat = []
            for _ in range(reps):
                t = time.perf_counter()
                answer_vectors(ctx, "BENCH", words, "omit", media)
                lat.append(time.perf_counter() - t)
            out[label, fmt] = percentile_ms(lat, 50)
        ctx.close()
    return out


def timed_http(client: httpx.Client, base: str, words: list[str], *, approx: bool):
    lat, results = [], []
    for w in words:
        t = time.perf_counter()
        r = client.post(
            f"{base}/most_similar", json={"positive": [w], "topn": 10, "approx": approx}
        )
        lat.append(time.perf_counter() - t)
        body = r.json()
        assert body["approximate"] is approx, body
        results.append([x[0] for x in body["results"]])
    return lat, results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vectors", type=int, default=1_000_000)
    ap.add_argument("--clusters", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--batch", type=int, default=50, help="Queries per batch request.")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--pool", type=int, default=2000, help="Distinct requests, Zipf stream.")
    ap.add_argument("--expansion-search", type=int, default=AnnParams.expansion_search)
    ap.add_argument("--work", default=None, help="Work dir (default: a temp dir, removed).")
    ap.add_argument("--out", default=None, help="Write the markdown results here.")
    ap.add_argument("--only-vectors", action="store_true", help="Only the /vectors part.")
    args = ap.parse_args()

    work = Path(args.work or tempfile.mkdtemp(prefix="vecserve-bench-api-"))
    server = ValkeyProcess(work / "valkey", port=free_port()).start()
    uvicorn_proc = None
    try:
        store = Store.from_url(server.url)
        t = time.perf_counter()
        tokens, vectors = make_model(args.vectors, DIM, args.clusters)
        print(f"generated {args.vectors:,} x {DIM} in {time.perf_counter() - t:.1f}s", flush=True)
        t = time.perf_counter()
        info = load_arrays(tokens, vectors, name="BENCH", store=store, progress=False)
        load_s = time.perf_counter() - t
        print(f"loaded into Redis in {load_s:.1f}s", flush=True)
        vec_rows = vectors_suite(server.url, tokens, args, work)
        handler = bench_handler(server.url, tokens)
        print(f"in-process /vectors 100 words: {handler}", flush=True)
        if args.only_vectors:
            md = "\n".join(render_vectors(args, vec_rows, handler))
            print(md)
            if args.out:
                Path(args.out).write_text(md)
            return

        cache = work / "cache"
        t = time.perf_counter()
        index = IndexManager(store, cache_dir=cache).get("BENCH", info=info)
        snap_s = time.perf_counter() - t
        print(f"exact snapshot built from Redis in {snap_s:.1f}s", flush=True)
        params = AnnParams(expansion_search=args.expansion_search)
        t = time.perf_counter()
        ann = AnnManager(enabled=True, params=params).get(index, wait=True)
        kind = ann.params.library  # the index the build picked: IVF or HNSW
        ann_s = time.perf_counter() - t
        print(f"ANN built in {ann_s:.1f}s, recall@10 at build {ann.recall_at_10}", flush=True)

        port = free_port()
        env = {
            "VECSERVE_REDIS_URL": server.url,
            "VECSERVE_DEFAULT_MODEL": "BENCH",
            "VECSERVE_CACHE_DIR": str(cache),
            "VECSERVE_PRELOAD": "true",
        }
        t = time.perf_counter()
        uvicorn_proc = start_server(env, port)
        ready_s = time.perf_counter() - t
        base = f"http://127.0.0.1:{port}"
        print(f"server ready (index mapped from disk) in {ready_s:.1f}s", flush=True)

        rng = np.random.default_rng(2)
        qwords = [tokens[i] for i in rng.choice(len(tokens), args.queries, replace=False)]
        from gensim.models import KeyedVectors

        kv = KeyedVectors(DIM, count=0)
        kv.index_to_key = tokens
        kv.key_to_index = {w: i for i, w in enumerate(tokens)}
        kv.vectors = vectors
        kv.fill_norms()
        with httpx.Client(timeout=60) as client:
            for w in qwords[:5]:  # warm the page cache and the ANN view
                client.post(f"{base}/most_similar", json={"positive": [w]})
                client.post(f"{base}/most_similar", json={"positive": [w], "approx": True})
            exact_lat, exact_res = timed_http(client, base, qwords, approx=False)
            approx_lat, approx_res = timed_http(client, base, qwords, approx=True)
            batch_lat, batch_res = [], []
            for lo in range(0, len(qwords), args.batch):
                chunk = qwords[lo : lo + args.batch]
                body = {"queries": [{"positive": [w], "topn": 10} for w in chunk]}
                t = time.perf_counter()
                r = client.post(f"{base}/most_similar/batch", json=body)
                batch_lat.extend([(time.perf_counter() - t) / len(chunk)] * len(chunk))
                batch_res.extend([[x[0] for x in res] for res in r.json()["results"]])
            model_info = client.get(f"{base}/models/BENCH").json()
        gensim_lat, gensim_res = [], []
        for w in qwords:
            t = time.perf_counter()
            res = kv.most_similar(w, topn=10)
            gensim_lat.append(time.perf_counter() - t)
            gensim_res.append([x[0] for x in res])
        same = sum(a == b for a, b in zip(exact_res, gensim_res, strict=True))
        batch_same = sum(a == b for a, b in zip(batch_res, gensim_res, strict=True))
        recall = recall_at_k(exact_res, approx_res, 10)
        print(f"exact == gensim for {same}/{len(qwords)} queries; approx recall@10 {recall:.4f}")
        sim_rows = [
            ("gensim `most_similar` (in memory, no HTTP)", gensim_lat, "1 (reference)"),
            ("vecserve exact, HTTP POST /most_similar", exact_lat, f"{same}/{len(qwords)} same"),
            (
                f"vecserve exact, POST /most_similar/batch of {args.batch} (per query)",
                batch_lat,
                f"{batch_same}/{len(qwords)} same",
            ),
            (f"vecserve approximate ({kind}), HTTP", approx_lat, f"recall@10 {recall:.3f}"),
        ]
        for name, lat, note in sim_rows:
            print(
                f"{name}: p50 {percentile_ms(lat, 50):.2f} ms p99 {percentile_ms(lat, 99):.2f}"
                f" ms  {note}"
            )

        md = render(args, vec_rows, handler, sim_rows, load_s, snap_s, ann_s, ready_s, model_info)
        print(md)
        if args.out:
            Path(args.out).write_text(md)
    finally:
        if uvicorn_proc is not None:
            uvicorn_proc.terminate()
            uvicorn_proc.wait(timeout=30)
        server.stop()
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


def render(args, vec_rows, handler, sim_rows, load_s, snap_s, ann_s, ready_s, model_info) -> str:
    lines = [
        "# HTTP service benchmark",
        "",
        f"Command: `flock /tmp/vecserve-bench.lock python bench/bench_api.py "
        f"--vectors {args.vectors} --queries {args.queries} --batch {args.batch} "
        f"--connections {args.connections} --seconds {args.seconds}`",
        "",
        *render_vectors(args, vec_rows, handler),
    ]
    g50 = percentile_ms(sim_rows[0][1], 50)
    lines += [
        "",
        f"## most_similar, {args.vectors:,} x 300, topn=10, {len(sim_rows[0][1])} one-word "
        "queries, one at a time",
        "",
        "| engine | p50 ms | p99 ms | speed vs gensim (p50) | agreement |",
        "|---|---:|---:|---:|---|",
    ]
    for name, lat, note in sim_rows:
        p50 = percentile_ms(lat, 50)
        lines.append(
            f"| {name} | {p50:.2f} | {percentile_ms(lat, 99):.2f} | {g50 / p50:.2f}x | {note} |"
        )
    ann = model_info.get("ann") or {}
    kind = sim_rows[-1][0].removeprefix("vecserve approximate (").removesuffix("), HTTP")
    lines += [
        "",
        f"Setup times: load into Redis {load_s:.1f} s; exact snapshot built from Redis "
        f"{snap_s:.1f} s; {kind} build {ann.get('build_seconds', ann_s)} s (params "
        f"{ann.get('params')}); recall@10 measured at build over "
        f"{ann.get('recall_queries')} words: {ann.get('recall_at_10')}; server start with "
        f"both indexes mapped from the disk cache: {ready_s:.1f} s.",
        "",
    ]
    return "\n".join(lines)


def render_vectors(args, vec_rows, handler) -> list[str]:
    """The /vectors section: machine note, one table per scenario, in-process costs."""
    lines = [
        f"Machine: {os.cpu_count()} cores shared with other jobs; valkey-server, one uvicorn "
        f"worker and the load generator (`wrk`, 1 thread, {args.connections} connections, "
        f"{args.seconds} s per case) all on 127.0.0.1. Quote the ratios.",
        "",
        "## /vectors (model of 300-d float32)",
        "",
        "Scenarios, each against a fresh worker: **cache off, fixed words** "
        "(`VECSERVE_VECTOR_CACHE=0`, the same words every request, every vector from "
        f"Redis); **Zipf stream**, cache off and on ({args.pool:,} different requests "
        "cycled, words drawn Zipf(1) over the frequency-ordered vocabulary, as words occur "
        "in text; the default cache of 20,000 vectors admits a word on its second miss; "
        "warmed 2 s before each case); **cache on, fixed words** (all hits: the hot path).",
        "",
        "| scenario | words | format | req/s | p50 ms | p99 ms | body bytes | cache hits "
        "| binary/JSON req/s |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    by = {(r["scenario"], r["words"], r["format"]): r for r in vec_rows}
    for r in vec_rows:
        ratio = ""
        if r["format"] == "binary":
            ratio = f"**{r['rps'] / by[(r['scenario'], r['words'], 'JSON')]['rps']:.2f}x**"
        hit = "" if r["scenario"].startswith("cache off") else f"{r['hit']:.0%}"
        lines.append(
            f"| {r['scenario']} | {r['words']} | {r['format']} | {r['rps']:,.0f} | "
            f"{r['p50']:.2f} | {r['p99']:.2f} | {r['bytes']:,} | {hit} | {ratio} |"
        )
    lines += [
        "",
        "Server-side work of one 100-word answer, in process (lookup + body, no HTTP): "
        + "; ".join(
            f"from {src}: JSON {handler[src, 'JSON']:.3f} ms, binary "
            f"{handler[src, 'binary']:.3f} ms "
            f"(**{handler[src, 'JSON'] / handler[src, 'binary']:.1f}x**)"
            for src in ("Redis", "cache")
        )
        + ".",
    ]
    return lines


if __name__ == "__main__":
    main()
