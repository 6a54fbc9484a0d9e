"""The GoogleNews-scale story on the embedded default, end to end, as a user lives it.

    flock /tmp/vecserve-bench.lock python bench/bench_scale.py --vectors 3000000 [--ann]

One command, one table, in this order:

1. **The embedded server's life.** Generates a GoogleNews-shaped word2vec binary (N x 300,
   float32), loads it with the real ``vecserve load`` into a fresh embedded server, then
   times every later command a user types (each a new process: Python start-up included)
   and the background save that makes the commit durable.
2. **Serving.** ``vecserve serve --preload`` against the loaded model: time until
   ``/readyz`` answers 200 (exact search ready: the snapshot streamed out of Redis), exact
   ``most_similar`` p50/p99 over HTTP and in-process, and gensim ``KeyedVectors`` in RAM on
   the same matrix with the same queries (the answers are checked to be the same words).
   With ``--ann``: the time until the approximate index is ready (polling
   ``GET /models/{name}`` for its progress), recall@10 against the exact answers, and
   approximate p50/p99 over HTTP; or, when the index falls short of its recall target
   (``exact-fallback``: approximate queries are answered exactly), that and its reason.
3. **Memory.** The RSS of each API worker with 1, 2 and 4 workers serving the model after
   the snapshot is mapped and queries have touched it (``/proc/PID/smaps_rollup``: private
   = Private_Clean + Private_Dirty, shared = Shared_*, Pss, and the anonymous part: what
   the worker holds that no other process can share); the Redis memory per vector of each
   codec (``used_memory`` delta of a load of the same file, once the first copy is gone).
4. **Restarts.** ``vecserve server stop`` and the first command after it; a SIGKILL of the
   server and the first command after it.
5. **Durability.** The same file loaded into a fresh server per setting: BGSAVE after the
   commit (vecserve's choice) against AOF (``appendfsync everysec``, with and without
   ``aof-use-rdb-preamble``): load time, time until the committed model is durable (BGSAVE
   done / ``WAITAOF 1 0`` answered), until the server is idle again, files on disk, and the
   restart time after a SIGKILL (until the server answers PING with the data loaded).

At 3M keep the machine otherwise quiet (bench lock): one Redis copy of each codec at most
is alive at a time, and every generated file but the vector file is deleted at the end.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np
import redis

sys.path.insert(0, str(Path(__file__).parent))
from bench_load import argv, make_tokens, write_bin

from vecserve.embedded import DEFAULT_SAVE, ValkeyProcess, free_port, read_pid, wait_pid_gone
from vecserve.search.snapshot import SimilarityIndex

REPEAT = 5
MODEL = "GNEWS"


class Table:
    """Rows of (step, value, note), printed once at the end."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str]] = []

    def add(self, label: str, value: float | str, note: str = "", unit: str = "s") -> None:
        text = value if isinstance(value, str) else f"{value:.2f} {unit}".strip()
        self.rows.append((label, text, note))
        print(f"  {label}: {text} {note}", flush=True)

    def section(self, title: str) -> None:
        self.rows.append((f"-- {title}", "", ""))
        print(f"-- {title}", flush=True)

    def print(self, title: str) -> None:
        print(f"\n{title}")
        print(f"{'step':64s} {'value':>14s}  note")
        for label, value, note in self.rows:
            print(f"{label:64s} {value:>14s}  {note}")


def vecserve(env: dict, *args: str) -> tuple[float, str]:
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "vecserve.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    elapsed = time.perf_counter() - t
    if proc.returncode not in (0, 3):
        raise SystemExit(f"vecserve {' '.join(args)} failed: {proc.stderr}")
    return elapsed, proc.stdout


def status(env: dict) -> dict:
    return json.loads(vecserve(env, "server", "status", "--json")[1])


def wait_saved(env: dict) -> float:
    t = time.perf_counter()
    while not status(env)["saved"]:
        time.sleep(0.2)
    return time.perf_counter() - t


def ms(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 of ``samples`` (seconds) in milliseconds."""
    a = np.asarray(samples) * 1e3
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


# -- processes and their memory ---------------------------------------------------------------


def children(pid: int) -> list[int]:
    """Every live descendant of ``pid``."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def maps(pid: int, needle: str) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def smaps_rollup(pid: int) -> dict[str, int]:
    """``/proc/PID/smaps_rollup`` in MB."""
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        out[key] = int(value.split()[0]) / 1024
    return out


class Serve:
    """``vecserve serve`` in its own process group, on a free port."""

    def __init__(self, env: dict, cache: Path, workers: int, ann: bool):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = argv(
            "{} -m vecserve.cli serve --port {} --workers {} --preload {}"
            " --default-model {} --cache-dir {} --log-level warning",
            sys.executable,
            self.port,
            workers,
            "--ann" if ann else "--no-ann",
            MODEL,
            cache,
        )
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self.http = httpx.Client(base_url=self.base, timeout=120)
        self._raw: http.client.HTTPConnection | None = None  # made by raw_get
        self.workers = workers

    def wait_ready(self, timeout: float = 1800) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"vecserve serve exited: {self.proc.stderr.read().decode()}")
            with contextlib.suppress(httpx.HTTPError):
                if self.http.get("/readyz").status_code == 200:
                    return time.perf_counter() - self.started
            time.sleep(0.1)
        raise SystemExit("vecserve serve was never ready")

    def worker_pids(self, needle: str = "vectors.npy", timeout: float = 600) -> list[int]:
        """The workers' pids, once each of them has mapped a file named ``needle``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = [p for p in [self.proc.pid, *children(self.proc.pid)] if maps(p, needle)]
            if len(pids) == self.workers:
                return pids
            time.sleep(0.2)
        raise SystemExit(f"not every worker mapped {needle}")

    def raw_get(self, path: str) -> float:
        """Seconds of one GET through a plain ``http.client`` keep-alive connection (the
        least a Python client can add), the body read; raises on a status other than 200."""
        if self._raw is None:
            self._raw = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        t = time.perf_counter()
        self._raw.request("GET", path)
        resp = self._raw.getresponse()
        resp.read()
        elapsed = time.perf_counter() - t
        if resp.status != 200:
            raise SystemExit(f"GET {path}: {resp.status}")
        return elapsed

    def most_similar(self, word: str, approx: bool = False) -> tuple[float, dict]:
        t = time.perf_counter()
        r = self.http.get(
            "/most_similar", params={"positive": word, "topn": 10, "approx": str(approx).lower()}
        )
        elapsed = time.perf_counter() - t
        r.raise_for_status()
        return elapsed, r.json()

    def ann_status(self) -> dict:
        return self.http.get(f"/models/{MODEL}").json().get("ann") or {}

    def stop(self) -> None:
        self.http.close()
        if self._raw is not None:
            self._raw.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def words_of(result: dict) -> list[str]:
    return [w for w, _ in result["results"]]


# -- the phases --------------------------------------------------------------------------------


def life(table: Table, env: dict, path: Path, n: int) -> dict:
    table.section("the embedded server's life")
    secs, _ = vecserve(env, "load", str(path), "--key", MODEL)
    table.add("vecserve load (starts the server)", secs)
    facts = {"load_s": secs}
    facts["save_s"] = wait_saved(env)
    table.add("background save after the commit, done after", facts["save_s"])
    st = status(env)
    table.add(
        "server memory (f32 model)",
        st["used_memory_human"],
        f"{st['used_memory'] / n:,.0f} B/vector, whole server",
    )
    word = make_tokens(10)[3]
    for label, args in [
        ("vecserve models", ["models"]),
        (f"vecserve models info {MODEL}", ["models", "info", MODEL]),
        (f"vecserve get {word} --key {MODEL}", ["get", word, "--key", MODEL]),
        ("vecserve server status", ["server", "status"]),
    ]:
        times = sorted(vecserve(env, *args)[0] for _ in range(REPEAT))
        table.add(label, times[len(times) // 2], f"median, max {times[-1]:.2f}s of {REPEAT}")
    assert status(env)["pid"] == st["pid"], "a command restarted the server"
    return facts


#: The states of ``GET /models/{name}``'s ``ann`` after which it no longer changes.
ANN_SETTLED = ("ready", "exact-fallback", "failed")


def wait_for_ann(srv: Serve, *, timeout: float) -> tuple[dict, set[str]]:
    """Poll the approximate index until it settles (`ANN_SETTLED`): its status and the
    progress fields seen. A failed build, or none settled in ``timeout`` s, ends the run."""
    seen: set[str] = set()
    last, deadline = 0.0, time.perf_counter() + timeout
    while (st := srv.ann_status()).get("state") not in ANN_SETTLED:
        prog = st.get("progress") or {}
        seen |= set(prog)
        if time.perf_counter() > deadline:
            raise SystemExit(f"the approximate index did not settle in {timeout:.0f}s: {st}")
        if time.perf_counter() - last > 30:
            last = time.perf_counter()
            print(f"    ann {st.get('state')}: {json.dumps(prog)}", flush=True)
        time.sleep(1)
    if st["state"] == "failed":
        raise SystemExit(f"the approximate index failed: {st.get('error')}")
    print(f"    ann {st['state']}", flush=True)
    return st, seen


def serving(
    table: Table,
    env: dict,
    cache: Path,
    queries: list[str],
    ann: bool,
    ann_timeout: float = 4 * 3600,
) -> dict:
    """Exact (and approximate) most_similar over HTTP; returns the exact answers."""
    table.section("serving: vecserve serve --preload, 1 worker")
    srv = Serve(env, cache, 1, ann=False)
    try:
        table.add("time to /readyz 200, snapshot built from Redis", srv.wait_ready())
        srv.most_similar(queries[0])  # the first query pays the page faults of the map
        times, exact = [], {}
        for w in queries:
            secs, out = srv.most_similar(w)
            times.append(secs)
            exact[w] = words_of(out)
        p50, p99 = ms(times)
        table.add("exact most_similar over HTTP, p50", p50, f"p99 {p99:.1f} ms", "ms")
    finally:
        srv.stop()
    facts = {"http_exact": times, "exact": exact}
    if not ann:
        return facts
    table.section("serving: vecserve serve --preload --ann, 1 worker")
    srv = Serve(env, cache, 1, ann=True)
    try:
        table.add("time to /readyz 200, snapshot on disk", srv.wait_ready())
        st, seen = wait_for_ann(srv, timeout=ann_timeout)
        if st["state"] == "exact-fallback":  # built, but short of its recall target
            table.add(
                "time to approximate index built (from serve start)",
                time.perf_counter() - srv.started,
                f"progress fields seen: {','.join(sorted(seen)) or 'none'}",
            )
            target = st.get("target") or {}
            table.add(
                "approximate index",
                "exact-fallback",
                f"{target.get('reason', 'no reason given')}; approximate queries are "
                "answered exactly, so no recall or approximate latency to measure",
            )
            print(f"    index: {json.dumps(st)[:400]}")
            return facts
        table.add(
            "time to approximate index ready (from serve start)",
            time.perf_counter() - srv.started,
            f"progress fields seen: {','.join(sorted(seen)) or 'none'}",
        )
        params = {k: v for k, v in st.items() if k not in ("state", "enabled", "recall_at_10")}
        times, hits, flagged = [], 0, 0
        srv.most_similar(queries[0], approx=True)
        for w in queries:
            secs, out = srv.most_similar(w, approx=True)
            times.append(secs)
            flagged += bool(out.get("approximate"))
            hits += len(set(words_of(out)) & set(exact[w]))
        recall = hits / (10 * len(queries))
        table.add(
            "recall@10 of approximate answers vs exact",
            f"{recall:.3f}",
            f"index's own estimate {st.get('recall_at_10')}; {flagged}/{len(queries)} "
            "answers flagged approximate",
        )
        p50, p99 = ms(times)
        table.add("approximate most_similar over HTTP, p50", p50, f"p99 {p99:.1f} ms (httpx)", "ms")
        # the same queries through the leanest client, and what a trivial route costs
        raw = [
            srv.raw_get(f"/most_similar?positive={quote(w)}&topn=10&approx=true") for w in queries
        ]
        r50, r99 = ms(raw)
        table.add(
            "approximate most_similar over HTTP (http.client), p50",
            r50,
            f"p99 {r99:.1f} ms; same queries, plain keep-alive client",
            "ms",
        )
        floor = {"httpx": [], "http.client": []}
        for _ in range(200):
            t = time.perf_counter()
            srv.http.get("/healthz").raise_for_status()
            floor["httpx"].append(time.perf_counter() - t)
            floor["http.client"].append(srv.raw_get("/healthz"))
        # exact queries, now through the index's float16 rows (re-scored exactly)
        times, same = [], 0
        for w in queries:
            secs, out = srv.most_similar(w)
            times.append(secs)
            same += words_of(out) == exact[w]
        p50, p99 = ms(times)
        table.add(
            "exact most_similar over HTTP, IVF index ready, p50",
            p50,
            f"p99 {p99:.1f} ms; same words: {same}/{len(queries)}",
            "ms",
        )
        facts["http_exact_ivf"] = times
        table.add(
            "GET /healthz over HTTP (the clients' and server's floor), p50",
            f"{ms(floor['httpx'])[0]:.2f} / {ms(floor['http.client'])[0]:.2f} ms",
            "httpx / http.client",
        )
        print(f"    index: {json.dumps(params)[:400]}")
    finally:
        srv.stop()
    return facts


def in_process(table: Table, snapshot: Path, queries: list[str], facts: dict) -> None:
    table.section("in-process exact most_similar vs gensim in RAM, same matrix and queries")
    sim = SimilarityIndex.open(snapshot)
    sim.most_similar(queries[0])
    ours, same = [], 0
    for w in queries:
        t = time.perf_counter()
        got = sim.most_similar(w, topn=10)
        ours.append(time.perf_counter() - t)
        same += [x for x, _ in got] == facts["exact"][w]
    from gensim.models import KeyedVectors

    t = time.perf_counter()
    kv = KeyedVectors(sim.dim)
    kv.index_to_key = list(sim.index_to_key)
    kv.key_to_index = {w: i for i, w in enumerate(kv.index_to_key)}
    kv.vectors = np.array(sim.vectors)  # in RAM, as gensim holds a loaded model
    kv.most_similar(queries[0])  # fills gensim's norms once
    ready = time.perf_counter() - t
    lookups = vocab_lookups(sim, kv, queries)
    del sim
    theirs = []
    for w in queries:
        t = time.perf_counter()
        got = kv.most_similar(w, topn=10)
        theirs.append(time.perf_counter() - t)
        same += [x for x, _ in got] == facts["exact"][w]
    del kv
    g50, g99 = ms(theirs)
    o50, o99 = ms(ours)
    h50, h99 = ms(facts["http_exact"])
    table.add(
        "gensim KeyedVectors (in RAM) most_similar, p50",
        g50,
        f"p99 {g99:.1f} ms; copied in and norms filled in {ready:.1f}s",
        "ms",
    )
    table.add(
        "vecserve in-process (memory map), p50",
        o50,
        f"p99 {o99:.1f} ms; {o50 / g50:.2f}x gensim's time",
        "ms",
    )
    table.add(
        "vecserve over HTTP (from above), p50",
        h50,
        f"p99 {h99:.1f} ms; {h50 / g50:.2f}x gensim's time",
        "ms",
    )
    if facts.get("http_exact_ivf"):
        i50, i99 = ms(facts["http_exact_ivf"])
        table.add(
            "vecserve over HTTP, IVF index ready (from above), p50",
            i50,
            f"p99 {i99:.1f} ms; {i50 / g50:.2f}x gensim's time",
            "ms",
        )
    table.add("same top-10 words as the HTTP answers", f"{same}/{2 * len(queries)}")
    table.section("vocabulary lookups: the snapshot's shared vocab.idx vs a dict/list in RAM")
    for label, (shared, private) in lookups.items():
        note = f"dict/list in RAM {private * 1e3:.3f} ms; {shared / private:.1f}x"
        table.add(f"{label}, shared vocab.idx (median)", shared * 1e3, note, "ms")


def vocab_lookups(sim, kv, queries: list[str], repeat: int = 21) -> dict:
    """Median seconds of word -> row (a batch of 1000 words) and row -> word (the top-10
    answer rows of each query), through the snapshot's vocabulary and through gensim's
    ``key_to_index`` dict / ``index_to_key`` list; the answers are checked to be equal."""
    rng = np.random.default_rng(5)
    batch = [kv.index_to_key[i] for i in rng.choice(len(kv.index_to_key), 1000)]
    answers = [[kv.key_to_index[w] for w, _ in kv.most_similar(q, topn=10)] for q in queries]

    def median(fn) -> tuple[float, list]:
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            got = fn()
            times.append(time.perf_counter() - t)
        return float(np.median(times)), got

    out = {}
    for label, ours, theirs in [
        (
            "word -> row, 1000 words",
            lambda: [sim.key_to_index.get(w) for w in batch],
            lambda: [kv.key_to_index.get(w) for w in batch],
        ),
        (
            f"row -> word, top-10 rows of {len(answers)} answers",
            lambda: [[sim.index_to_key[r] for r in a] for a in answers],
            lambda: [[kv.index_to_key[r] for r in a] for a in answers],
        ),
    ]:
        (shared, got), (private, want) = median(ours), median(theirs)
        assert got == want, label
        out[label] = (shared, private)
    return out


def worker_memory(table: Table, env: dict, cache: Path, queries: list[str], ann: bool) -> None:
    for workers in (1, 2, 4):
        table.section(f"memory: vecserve serve --preload{' --ann' * ann} --workers {workers}")
        srv = Serve(env, cache, workers, ann=ann)
        try:
            ready = srv.wait_ready()
            pids = srv.worker_pids()
            mapped = time.perf_counter() - srv.started
            table.add(
                "time to /readyz 200 / every worker mapped the snapshot",
                ready,
                f"all mapped at {mapped:.1f}s",
            )
            # queries until every worker has answered one (its Rss then holds the map)
            snap = next(cache.glob(f"{MODEL}.g*/vectors.npy")).stat().st_size / 2**20
            got: list[dict] = []
            with concurrent.futures.ThreadPoolExecutor(2 * workers) as pool:
                for _ in range(50):
                    asked = queries[len(got) : len(got) + 2 * workers] or queries[:2]
                    got += [r for _, r in pool.map(srv.most_similar, asked)]
                    if all(
                        (m := smaps_rollup(p))["Rss"] - m["Anonymous"] > 0.9 * snap for p in pids
                    ):
                        break
                if ann:  # and the approximate index, in whichever worker answers
                    asked = queries[: 4 * workers]
                    got = [r for _, r in pool.map(partial(srv.most_similar, approx=True), asked)]
            if ann:  # the index is mapped by whichever worker answered approximately
                table.add(
                    "queries answered approximately",
                    f"{sum(g['approximate'] for g in got)}/{len(got)}",
                )
            total_pss = 0.0
            for i, pid in enumerate(sorted(pids)):
                m = smaps_rollup(pid)
                private = m["Private_Clean"] + m["Private_Dirty"]
                shared = m["Shared_Clean"] + m["Shared_Dirty"]
                total_pss += m["Pss"]
                table.add(
                    f"worker {i + 1} RSS",
                    m["Rss"],
                    f"private {private:,.0f} MB (anonymous {m['Anonymous']:,.0f} MB), "
                    f"shared {shared:,.0f} MB, Pss {m['Pss']:,.0f} MB",
                    "MB",
                )
            table.add("sum of the workers' Pss", total_pss, "", "MB")
        finally:
            srv.stop()


def restarts(table: Table, env: dict) -> None:
    table.section("restarts")
    pid = status(env)["pid"]
    secs, _ = vecserve(env, "server", "stop")
    table.add("vecserve server stop (nothing unsaved)", secs)
    secs, _ = vecserve(env, "models")
    table.add("first command after a stop (reloads the RDB)", secs)
    pid = status(env)["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_pid_gone(pid)
    secs, out = vecserve(env, "models")
    assert MODEL in out, "the model did not survive a SIGKILL after its save"
    table.add("first command after a SIGKILL (restarts, reloads the RDB)", secs)


def codecs(table: Table, env: dict, path: Path, n: int) -> None:
    table.section("Redis memory per vector, by codec (one copy alive at a time)")
    client = redis.Redis.from_url(f"unix://{status(env)['socket']}")
    try:
        before = client.info("memory")["used_memory"]
        vecserve(env, "models", "delete", MODEL, "--yes")
        freed = before - client.info("memory")["used_memory"]
        for codec in ("f32", "f16", "i8"):
            before = client.info("memory")["used_memory"]
            secs, _ = vecserve(
                env, "load", str(path), "--key", f"{MODEL}_{codec}", "--codec", codec
            )
            grown = client.info("memory")["used_memory"] - before
            note = f"{grown / 1e9:.2f} GB; load {secs:.1f}s"
            if codec == "f32":
                note += f"; deleting the first copy freed {freed / n:,.0f} B/vector"
            table.add(
                f"{codec}: bytes per vector (used_memory delta of a load)",
                f"{grown / n:,.0f} B",
                note,
            )
            wait_saved(env)  # its background save, before the next load forks another
            vecserve(env, "models", "delete", f"{MODEL}_{codec}", "--yes")
    finally:
        client.close()


DURABILITY = [
    ("BGSAVE after the commit (kept)", {"save": DEFAULT_SAVE, "appendonly": "no"}),
    (
        "AOF everysec, RDB preamble",
        {
            "save": '""',
            "appendonly": "yes",
            "appendfsync": "everysec",
            "aof-use-rdb-preamble": "yes",
        },
    ),
    (
        "AOF everysec, no preamble",
        {
            "save": '""',
            "appendonly": "yes",
            "appendfsync": "everysec",
            "aof-use-rdb-preamble": "no",
        },
    ),
]


def durability(table: Table, out: Path, path: Path, life_facts: dict) -> None:
    table.section("durability: a fresh server per setting, the same load")
    for label, conf in DURABILITY:
        data = Path(tempfile.mkdtemp(prefix="vs-dur-", dir=out))
        server = ValkeyProcess(data, unixsocket=data / "valkey.sock", config=conf)
        try:
            server.start()
            env = {**os.environ, "VECSERVE_REDIS_URL": server.url}
            client = redis.Redis.from_url(server.url)
            t0 = time.perf_counter()
            vecserve(env, "load", str(path), "--key", MODEL)
            load = time.perf_counter() - t0
            if conf["appendonly"] == "yes":
                client.set("vecserve-bench:marker", "1")  # fsynced in order: after the commit
                client.execute_command("WAITAOF", 1, 0, 0)
            else:  # what vecserve does after a commit on its embedded server
                client.execute_command("BGSAVE", "SCHEDULE")
                while (
                    client.info("persistence")["rdb_bgsave_in_progress"]
                    or (client.info("persistence")["rdb_changes_since_last_save"])
                ):
                    time.sleep(0.1)
            durable = time.perf_counter() - t0
            while any(
                client.info("persistence")[k]
                for k in (
                    "rdb_bgsave_in_progress",
                    "aof_rewrite_in_progress",
                    "aof_rewrite_scheduled",
                )
            ):
                time.sleep(0.1)
            idle = time.perf_counter() - t0
            disk = sum(f.stat().st_size for f in data.rglob("*") if f.is_file()) / 1e9
            client.close()
            server.kill()
            t = time.perf_counter()
            server.start(timeout=1800)
            restart = time.perf_counter() - t
            _, models = vecserve(env, "models")
            assert MODEL in models, f"{label}: the model did not survive a SIGKILL"
            table.add(
                f"{label}: load",
                load,
                f"durable after {durable:.1f}s, idle after {idle:.1f}s, "
                f"{disk:.2f} GB on disk, restart after SIGKILL {restart:.1f}s",
            )
        finally:
            server.stop()
            shutil.rmtree(data, ignore_errors=True)
    table.add(
        "(embedded server above: load / durable after)",
        life_facts["load_s"],
        f"durable after {life_facts['load_s'] + life_facts['save_s']:.1f}s",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--vectors", type=int, default=3_000_000)
    ap.add_argument("--dim", type=int, default=300)
    ap.add_argument("--queries", type=int, default=100, help="most_similar queries per engine")
    ap.add_argument("--ann", action="store_true", help="also the approximate index (long)")
    ap.add_argument(
        "--ann-timeout",
        type=float,
        default=4 * 3600,
        help="seconds to wait for the approximate index to be ready or fall back to exact",
    )
    ap.add_argument(
        "--skip",
        default="",
        help="comma-separated parts to leave out: serving,memory,codecs,durability",
    )
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "vecserve-bench"))
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"GoogleNews-shaped-{args.vectors // 1000}k-{args.dim}.bin"
    t = time.perf_counter()
    write_bin(path, args.vectors, args.dim)
    print(
        f"file {path} ({path.stat().st_size / 1e9:.2f} GB) ready in {time.perf_counter() - t:.0f}s"
    )
    data = Path(tempfile.mkdtemp(prefix="vs-scale-", dir=out))
    cache = data / "cache"
    env = {k: v for k, v in os.environ.items() if k != "VECSERVE_REDIS_URL"}
    env["VECSERVE_DATA_DIR"] = str(data)
    table = Table()
    # the queries: a seeded sample of the vocabulary; every engine is asked the same ones
    vocab = make_tokens(args.vectors)
    picks = np.random.default_rng(11).choice(args.vectors, args.queries, replace=False)
    queries = [vocab[i] for i in picks]
    del vocab
    try:
        facts = life(table, env, path, args.vectors)
        if "serving" not in skip:
            served = serving(table, env, cache, queries, args.ann, args.ann_timeout)
            snapshot = next(cache.glob(f"{MODEL}.g*/vectors.npy")).parent
            in_process(table, snapshot, queries, served)
        if "memory" not in skip:
            worker_memory(table, env, cache, queries, args.ann)
        shutil.rmtree(cache, ignore_errors=True)
        restarts(table, env)
        if "codecs" not in skip:
            codecs(table, env, path, args.vectors)
    finally:
        vecserve(env, "server", "stop")
        pid = read_pid(data)
        if pid is not None:
            wait_pid_gone(pid)
        shutil.rmtree(data, ignore_errors=True)
    if "durability" not in skip:
        durability(table, out, path, facts)
    table.print(f"{args.vectors:,} x {args.dim} on the embedded server, {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
