"""Benchmark data-parallel training on MPI: N ranks x T threads against 1 process.

Each configuration ``NxT`` trains skip-gram (HogBatch; vector_size 100, window 5,
negative 5, sample 1e-4, min_count 5) on the same corpus: ``1xT`` is one process with T
threads, ``NxT`` with N > 1 is ``mpiexec -n N`` ranks of T threads each (oversubscribed
when the machine has fewer cores). Rank 0 evaluates analogies (gensim's
``questions-words.txt``, ``restrict_vocab=30000``) and WordSim-353, and reports the
training words/s over all ranks, the share of training time spent waiting on syncs
(in brackets: the part in each epoch's whole-model sync, with training stopped),
and the bytes each rank sent per epoch (a ring allreduce's 2(N-1)/N of each buffer)
against the synchronised model's size (both float32 matrices).

The table compares every configuration with the first one (the reference, e.g. ``1x2``):
words/s ratio, analogy and WS-353 differences. Scaling efficiency = words/s ratio /
(N*T / reference threads).

Usage::

    flock /tmp/vecserve-bench.lock python bench/bench_distributed.py \\
        ../shared/data/wiki100m.zip --configs 1x2,2x1,4x1
    # on a 16-core machine:
    python bench/bench_distributed.py wiki100m.zip --configs 1x2,2x2,4x2,8x2

Peer: the configuration ``spark`` trains Spark MLlib's Word2Vec (``pyspark``, in the
benchmark's environment only, never a dependency of vecserve; it needs a JVM) with its
own settings: skip-gram + hierarchical softmax, no subsampling, ``local[2]``,
numPartitions 2, vectorSize 100, windowSize 5, minCount 5, maxIter = ``--epochs``, on
the corpus cut into 1,000-word rows (its maxSentenceLength). Under ``local[2]`` both
partitions train one shared model in one JVM (the broadcast value, which every task of
an executor shares); ``spark-cluster`` runs ``local-cluster[2,1,3072]``, two executor
JVMs of one core each, so each partition trains its own copy and the copies are averaged
once an iteration, as on two machines: the data-parallel peer of ``2x1``. Spark's time
is ``fit()``, which counts the vocabulary too, so a second table compares it with
vecserve's vocabulary + training time (``wall s``). Its vectors are ordered by corpus frequency and
scored like ours. Compare it with vecserve on the same settings::

    flock /tmp/vecserve-bench.lock python bench/bench_distributed.py \
        ../shared/data/wiki100m.zip --head-mb 20 --epochs 2 \
        --configs spark-cluster,2x1,1x2,spark \
        --params '{"hs": 1, "negative": 0, "sample": 0}'

Results: a Markdown table on stdout, JSON lines in ``bench/out/distributed.jsonl``.
Where gensim is missing (a bare 16-core machine), ``VECSERVE_EVAL_DATA=DIR`` (a folder
holding gensim's ``questions-words.txt`` and ``wordsim353.tsv``) scores the runs there
with ``evaluate_np.py``, gensim's two scores in NumPy (``python bench/evaluate_np.py
--check`` compares them with gensim's); or ``--save-vectors DIR`` keeps each run's 30,000
most frequent vectors and the JSON lines in DIR, and ``--evaluate DIR`` scores them on a
machine with gensim and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_train import evaluate, peak_rss_mb, prepare

EVAL_VOCAB = 30_000
COMMON = {"vector_size": 100, "window": 5, "negative": 5, "sample": 1e-4, "min_count": 5}
MPIEXEC = shlex.split(os.environ.get("MPIEXEC", "")) or [
    str(Path(sys.executable).parent / "mpiexec")
]
ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def child(spec: dict) -> dict | None:
    """One configuration, in this rank (every rank runs this; rank 0 reports)."""
    from vecserve.train import FastText, Word2Vec
    from vecserve.train.distributed import Group

    group = Group.from_environment()
    params = {**COMMON, "sg": 1, "alpha": 0.025, **spec.get("params", {})}
    # --params '{"subwords": 1}': fastText's subword model (its own defaults otherwise)
    trainer = FastText if params.pop("subwords", False) else Word2Vec
    t0 = time.perf_counter()
    model = trainer(
        spec["text"], epochs=spec["epochs"], workers=spec["threads"], comm=group, **params
    )
    wall = time.perf_counter() - t0
    if group.rank != 0:
        return None
    st = model.train_stats
    try:
        analogy, wordsim = evaluate(model.wv)
    except ImportError:  # no gensim where it ran (the 16-core machine)
        if os.environ.get("VECSERVE_EVAL_DATA"):  # gensim's scores in NumPy: evaluate_np
            from evaluate_np import evaluate_arrays

            analogy, wordsim = evaluate_arrays(model.vocab.words, model.syn0)
        else:  # --save-vectors, then --evaluate on a machine with gensim
            analogy = wordsim = None
    if spec.get("save_dir"):  # the vectors analogies look at (restrict_vocab=30000)
        import numpy as np

        top = min(EVAL_VOCAB, len(model.vocab))
        np.savez(
            Path(spec["save_dir"]) / f"{spec['saved']}.npz",
            words=np.array(model.vocab.words[:top]),
            counts=model.vocab.counts[:top],
            vectors=model.syn0[:top],
        )
    epochs = spec["epochs"]
    return {
        "config": spec["config"],
        "saved": spec["saved"],
        "ranks": group.size,
        "threads": spec["threads"],
        "params": spec.get("params", {}),
        "epochs": epochs,
        "corpus_words": st["corpus_words"],
        "vocab": len(model.vocab),
        "wall_s": wall,
        "train_s": st["train_seconds"],
        "words_per_s": st["words_per_second"],
        "sync_share": st.get("sync_share", 0.0),
        # the part of it in each epoch's whole-model sync (training stopped)
        "sync_full_share": st.get("sync_full_seconds", 0.0) / max(st["train_seconds"], 1e-9),
        "syncs": st.get("syncs", 0),
        "bytes_per_epoch": st.get("bytes_sent", 0) / epochs,
        "model_bytes": st.get("model_bytes", 0),
        "peak_rss_mb_rank0": peak_rss_mb(),
        "analogy": analogy,
        "wordsim": wordsim,
        "host": platform.node(),
        "cpus": os.cpu_count(),
    }


#: Spark's masters: ``local[2]`` runs both partitions' tasks in the driver's JVM, where
#: they train one shared copy of the model (the broadcast value, mutated in place:
#: Hogwild on two threads); ``local-cluster[2,1,MB]`` starts two executor JVMs of one
#: core, each training its own copy, averaged once per iteration: Spark's distributed
#: algorithm, as on a cluster of two machines.
SPARK_MASTERS = {"spark": "local[2]", "spark-cluster": "local-cluster[2,1,3072]"}


def spark_child(spec: dict) -> dict:
    """Spark MLlib's Word2Vec, two partitions, on the corpus in 1,000-word rows."""
    from collections import Counter

    from gensim.models import KeyedVectors
    from pyspark.ml.feature import Word2Vec as SparkW2V
    from pyspark.sql import SparkSession

    t0 = time.perf_counter()
    spark = (
        SparkSession.builder.master(SPARK_MASTERS[spec["config"]])
        .config("spark.driver.memory", "4g")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    words = Path(spec["text"]).read_text().split()
    rows = [(words[i : i + 1000],) for i in range(0, len(words), 1000)]
    df = spark.createDataFrame(rows, ["text"]).repartition(2).cache()
    df.count()  # loaded and cached before the clock starts
    w2v = SparkW2V(
        vectorSize=COMMON["vector_size"],
        windowSize=COMMON["window"],
        minCount=COMMON["min_count"],
        maxIter=spec["epochs"],
        numPartitions=2,
        inputCol="text",
        outputCol="vector",
        seed=1,
    )
    t1 = time.perf_counter()
    model = w2v.fit(df)
    fit_s = time.perf_counter() - t1
    vectors = {r.word: r.vector.toArray() for r in model.getVectors().collect()}
    version = spark.version
    spark.stop()
    counts = Counter(words)
    order = sorted(vectors, key=lambda w: (-counts[w], w))  # frequency order, like ours
    kv = KeyedVectors(COMMON["vector_size"])
    kv.add_vectors(order, [vectors[w] for w in order])
    analogy, wordsim = evaluate(kv)
    return {
        "config": spec["config"],
        "ranks": 1,
        "threads": 2,
        "params": {
            "tool": f"Spark MLlib {version}",
            "master": SPARK_MASTERS[spec["config"]],
            "sg": 1,
            "hs": 1,
            "sample": 0,
        },
        "epochs": spec["epochs"],
        "corpus_words": len(words),
        "vocab": len(kv),
        "wall_s": fit_s,
        "train_s": fit_s,
        "words_per_s": len(words) * spec["epochs"] / fit_s,
        "sync_share": 0.0,
        "syncs": 0,
        "bytes_per_epoch": 0,
        "model_bytes": 0,
        "startup_s": t1 - t0,
        "peak_rss_mb_rank0": peak_rss_mb(),  # the Python driver; the JVM is another process
        "analogy": analogy,
        "wordsim": wordsim,
        "host": platform.node(),
        "cpus": os.cpu_count(),
    }


def evaluate_saved(path: Path) -> tuple[float, float]:
    """Analogy and WS-353 of vectors saved by ``--save-vectors`` (the top 30,000 words)."""
    import numpy as np
    from gensim.models import KeyedVectors

    z = np.load(path)
    kv = KeyedVectors(z["vectors"].shape[1])
    kv.add_vectors([str(w) for w in z["words"]], z["vectors"])
    return evaluate(kv)


def run(
    config: str,
    text: Path,
    epochs: int,
    params: dict,
    extra_mpi: list[str],
    save_dir: str | None = None,
    saved: str = "",
) -> dict:
    if config in SPARK_MASTERS:
        spec = {"config": config, "text": str(text), "epochs": epochs}
        cmd = [sys.executable, __file__, "--spark-child", json.dumps(spec)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode:
            sys.exit(f"spark failed:\n{proc.stderr[-4000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])
    ranks, threads = (int(x) for x in config.split("x"))
    spec = {"config": config, "text": str(text), "epochs": epochs, "threads": threads}
    spec["params"] = params
    spec["save_dir"] = save_dir
    spec["saved"] = saved or config  # the saved vectors' file name
    cmd = [sys.executable, __file__, "--child", json.dumps(spec)]
    if ranks > 1:  # a rank of T > 1 threads needs T cores: Open MPI binds ranks to one
        bind = ["--bind-to", "none"] if threads > 1 and "--bind-to" not in extra_mpi else []
        cmd = [*MPIEXEC, "-n", str(ranks), "--oversubscribe", *bind, *extra_mpi, *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, check=False)
    if proc.returncode:  # e.g. a scheme that diverges: reported in the table, not fatal
        errors = [x for x in proc.stderr.splitlines() if "Error" in x] or [proc.stderr[-500:]]
        print(f"{config} {params} failed:\n{proc.stderr[-4000:]}", file=sys.stderr)
        return {"config": config, "params": params, "failed": errors[-1].strip()[:200]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(results: list[dict]) -> str:
    ref = results[0]
    ref_threads = ref["ranks"] * ref["threads"]
    out = [
        "| config | train s | words/s | vs ref | scaling eff. | sync wait (whole-model) | syncs "
        "| sent/rank/epoch | / model | analogy % | diff | WS-353 | diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "failed" in r:
            out.append(f"| {r['config']} {r['params']} | failed: {r['failed']} |" + " |" * 11)
            continue
        ratio = r["words_per_s"] / ref["words_per_s"]
        eff = ratio / (r["ranks"] * r["threads"] / ref_threads)
        model = r["model_bytes"]
        per_model = f"{r['bytes_per_epoch'] / model:.2f}x" if model else "-"
        sent = f"{r['bytes_per_epoch'] / 1e6:.0f} MB" if model else "-"
        name = r["config"] + (f" {r['params']}" if r["params"] else "")
        full = r.get("sync_full_share", 0.0)
        out.append(
            f"| {name} | {r['train_s']:.1f} | {r['words_per_s']:,.0f} | {ratio:.2f}x "
            f"| {eff:.2f} | {100 * r['sync_share']:.1f}% ({100 * full:.1f}%) "
            f"| {r['syncs']} | {sent} | {per_model} "
            f"| {100 * r['analogy']:.2f} | {100 * (r['analogy'] - ref['analogy']):+.2f} "
            f"| {r['wordsim']:.3f} | {r['wordsim'] - ref['wordsim']:+.3f} |"
        )
    return "\n".join(out)


def spark_table(results: list[dict]) -> str:
    """Every run against Spark's, on the time to a model (vocabulary + training)."""
    ref = next(r for r in results if r["config"] in SPARK_MASTERS)
    out = [
        "| run | wall s (vocab + train) | words/s | vs Spark | train s | analogy % | WS-353 |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        wps = r["corpus_words"] * r["epochs"] / r["wall_s"]
        ref_wps = ref["corpus_words"] * ref["epochs"] / ref["wall_s"]
        spark = r["config"] in SPARK_MASTERS
        name = f"Spark MLlib {SPARK_MASTERS[r['config']]}" if spark else f"vecserve {r['config']}"
        if not spark and r["params"]:
            name += f" {r['params']}"
        out.append(
            f"| {name} | {r['wall_s']:.1f} | {wps:,.0f} | {wps / ref_wps:.2f}x "
            f"| {r['train_s']:.1f} | {100 * r['analogy']:.2f} | {r['wordsim']:.3f} |"
        )
    return "\n".join(out)


def seeds_table(results: list[dict]) -> str:
    """Each configuration and scheme over its seeds (runs that differ only in ``seed``):
    the analogy of every seed, the means, and the words/s against the first run's."""
    ref = results[0]
    groups: dict[str, list[dict]] = {}
    for r in results:
        if "failed" in r:
            continue
        params = {k: v for k, v in r["params"].items() if k not in ("seed", "tool")}
        groups.setdefault(f"{r['config']} {params}" if params else r["config"], []).append(r)
    out = [
        "| run | seeds | analogy % per seed | mean analogy % | mean WS-353 | words/s vs first |",
        "|---|---|---|---|---|---|",
    ]
    for name, rs in groups.items():
        per = ", ".join(f"{100 * r['analogy']:.2f}" for r in rs)
        seeds = ", ".join(str(r["params"].get("seed", "-")) for r in rs)
        mean_a = 100 * sum(r["analogy"] for r in rs) / len(rs)
        mean_w = sum(r["wordsim"] for r in rs) / len(rs)
        speed = sum(r["words_per_s"] for r in rs) / len(rs) / ref["words_per_s"]
        out.append(f"| {name} | {seeds} | {per} | {mean_a:.2f} | {mean_w:.3f} | {speed:.2f}x |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", nargs="?", help="text8-style corpus (.zip or text file)")
    ap.add_argument(
        "--configs",
        default="1x2,2x1,4x1",
        help="NxT,... (first = reference); spark, spark-cluster: Spark MLlib's "
        "Word2Vec in one JVM / two executor JVMs",
    )
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--head-mb", type=float, default=None, help="only the first N MB")
    ap.add_argument("--params", default="{}", help="extra Word2Vec parameters, JSON")
    ap.add_argument(
        "--schemes",
        default=None,
        help="JSON list of sync parameter sets: every configuration after the "
        "first (the reference) runs once with each",
    )
    ap.add_argument("--mpi-args", default="", help="extra mpiexec arguments")
    ap.add_argument(
        "--save-vectors",
        metavar="DIR",
        help="save each run's top 30,000 vectors there (for --evaluate)",
    )
    ap.add_argument(
        "--evaluate",
        metavar="DIR",
        help="evaluate the runs of DIR/distributed.jsonl from their saved "
        "vectors (runs from a machine without gensim) and print the table",
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--spark-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.spark_child:
        print(json.dumps(spark_child(json.loads(args.spark_child))), flush=True)
        return
    if args.child:
        res = child(json.loads(args.child))
        if res is not None:
            print(json.dumps(res), flush=True)
        return
    if args.evaluate:
        d = Path(args.evaluate)
        results = [json.loads(x) for x in (d / "distributed.jsonl").read_text().splitlines()]
        results = [r for r in results if "failed" not in r]
        for r in results:
            r["analogy"], r["wordsim"] = evaluate_saved(d / f"{r.get('saved', r['config'])}.npz")
            r["evaluated"] = "top 30,000 words, saved"
        print(table(results))
        return
    if not args.corpus:
        ap.error("corpus is required")
    text, _ = prepare(args.corpus, args.head_mb)
    out_dir = Path(args.save_vectors or Path(__file__).parent / "out")
    out_dir.mkdir(exist_ok=True, parents=True)
    results = []
    params = json.loads(args.params)
    schemes = json.loads(args.schemes) if args.schemes else [{}]
    configs = args.configs.split(",")
    runs = [(configs[0], params)]
    for scheme in schemes:  # "_configs": the configurations a scheme runs on
        only = scheme.get("_configs", configs[1:])
        scheme = {k: v for k, v in scheme.items() if k != "_configs"}
        runs += [(c, {**params, **scheme}) for c in only]
    for i, (config, p) in enumerate(runs):
        res = run(
            config,
            text,
            args.epochs,
            p,
            args.mpi_args.split(),
            args.save_vectors,
            saved=f"{config}-{i}" if len(runs) > len(configs) else config,
        )
        res["corpus"] = text.name
        results.append(res)
        print(json.dumps(res), file=sys.stderr, flush=True)
        with open(out_dir / "distributed.jsonl", "a") as f:
            f.write(json.dumps(res) + "\n")
    if all(r.get("analogy", 0) is not None for r in results):
        print(table(results))
        if len(runs) > len(configs):  # schemes or seeds: their means
            print()
            print(seeds_table(results))
        if any(r["config"] in SPARK_MASTERS for r in results):
            print()
            print(spark_table(results))


if __name__ == "__main__":
    main()
