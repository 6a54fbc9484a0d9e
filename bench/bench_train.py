"""Benchmark vecserve's word2vec trainer against gensim 4.4 on the same corpus and threads.

Each run is a separate process (so peak RSS is its own): build the vocabulary, train,
then evaluate analogies (gensim's ``questions-words.txt``, ``restrict_vocab=30000``) and
WordSim-353 (Spearman). Training words/s = corpus words x epochs / training wall time;
words/CPU-s divides by the process CPU time of training instead, which is steadier on a
machine shared with other work (2 threads fully busy = 2 CPU-s per wall second).

gensim runs in its fastest mode, ``corpus_file``, on a copy of the corpus cut into lines
of 100 words; vecserve reads the corpus as given (a text8-style single line, cut into
sentences of 10,000 words), so it trains ~2% more context pairs than gensim (no line
breaks every 100 words). Why 100: gensim 4.4's corpus_file reader fills a batch with
lines until it holds *more* than 10,000 words, and its trainer then silently drops every
in-vocabulary word after the 10,000th of the batch (``word2vec_corpusfile.pyx``,
``prepare_c_structures_for_batch``: ``break  # TODO``). With 10,000-word lines a batch is
two lines and gensim trains ~53% of the corpus (measured: 421,312 of 791,767 words on 5
MB); with 100-word lines a batch is ~10,100 words and it trains all of them. Every run
reports the words it trained (``trained_words``: after subsampling, summed over epochs)
so such a gap shows in the table.

Settings after a run's name override its parameters (``ours-cbowhs:min_alpha=0.0001:seed=2``,
:func:`overrides`); three change the corpus's layout instead, to tell its effect from the
trainers': ``lines=1`` gives vecserve gensim's copy in 100-word lines, ``iter=1`` runs gensim
in its iterable mode (``LineSentence``, the learning rate falling over all workers' words)
on that copy, and ``text=1`` on the corpus as given (sentences of 10,000 words, as vecserve
reads it).

Usage::

    flock /tmp/vecserve-bench.lock python bench/bench_train.py ../shared/data/wiki100m.zip

``--runs`` picks runs (default: all), ``--head-mb`` trains on the first N MB (dev).
Results: a Markdown table on stdout, JSON lines in ``bench/out/train.jsonl``.
"""

from __future__ import annotations

import json
import os
import resource
import time
import zipfile
from pathlib import Path

from train_report import parser, ratio, run_children

RUNS = {
    # name: (tool, params)
    "gensim-sg": ("gensim", {"sg": 1, "alpha": 0.025}),
    "ours-sg-pairs": ("ours", {"sg": 1, "alpha": 0.025, "batch": False}),
    # batch=True (the default): a window's contexts share the negatives, pair after pair
    "ours-sg-batch": ("ours", {"sg": 1, "alpha": 0.025, "batch": True}),
    "gensim-cbow": ("gensim", {"sg": 0, "alpha": 0.05}),
    "ours-cbow": ("ours", {"sg": 0, "alpha": 0.05, "batch": False}),
    "ours-cbow-hogbatch": ("ours", {"sg": 0, "alpha": 0.05, "batch": True}),
    # the learning rate gensim's run actually has at its end (see gensim_min_alpha)
    "ours-cbow-sched": ("ours", {"sg": 0, "alpha": 0.05, "batch": False, "min_alpha": "gensim"}),
    # hierarchical softmax (Spark MLlib's only mode), no subsampling
    "gensim-sghs": ("gensim", {"sg": 1, "hs": 1, "negative": 0, "sample": 0}),
    "ours-sghs": ("ours", {"sg": 1, "hs": 1, "negative": 0, "sample": 0}),
    "gensim-cbowhs": ("gensim", {"sg": 0, "hs": 1, "negative": 0, "sample": 0, "alpha": 0.05}),
    "ours-cbowhs": ("ours", {"sg": 0, "hs": 1, "negative": 0, "sample": 0, "alpha": 0.05}),
    "ours-cbowhs-sched": (
        "ours",
        {"sg": 0, "hs": 1, "negative": 0, "sample": 0, "alpha": 0.05, "min_alpha": "gensim"},
    ),
}
COMMON = {"vector_size": 100, "window": 5, "negative": 5, "sample": 1e-4, "min_count": 5}
WORK = Path(os.environ.get("VECSERVE_BENCH_TMP", "/tmp/vecserve-bench-train"))
LINE_WORDS = 100  # words per line of gensim's copy (see the module docstring)


def prepare(corpus: str, head_mb: float | None) -> tuple[Path, Path]:
    """The corpus as one text file (unzipped to /tmp), and a copy in lines of LINE_WORDS."""
    WORK.mkdir(parents=True, exist_ok=True)
    src = Path(corpus)
    if src.suffix == ".zip":
        with zipfile.ZipFile(src) as zf:
            member = zf.namelist()[0]
            text = WORK / Path(member).name
            if not text.exists() or text.stat().st_size != zf.getinfo(member).file_size:
                zf.extract(member, WORK)
    else:
        text = src
    if head_mb:
        head = WORK / f"{text.name}.head{head_mb:g}M"
        if not head.exists():
            with open(text, "rb") as f:
                data = f.read(int(head_mb * 1e6))
            head.write_bytes(data[: data.rfind(b" ")])
        text = head
    lines = WORK / f"{text.name}.lines{LINE_WORDS}"
    if not lines.exists() or lines.stat().st_mtime < text.stat().st_mtime:
        words = text.read_bytes().split()
        with open(lines, "wb") as f:
            for i in range(0, len(words), LINE_WORDS):
                f.write(b" ".join(words[i : i + LINE_WORDS]) + b"\n")
    return text, lines


def peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM; ru_maxrss would include the parent's, kept at exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def evaluate(kv) -> tuple[float, float]:
    from gensim.test.utils import datapath

    analogy = kv.evaluate_word_analogies(datapath("questions-words.txt"), restrict_vocab=30000)[0]
    wordsim = kv.evaluate_word_pairs(datapath("wordsim353.tsv"))[1][0]
    return float(analogy), float(wordsim)


def gensim_min_alpha(alpha: float, epochs: int, workers: int) -> float:
    """The learning rate a gensim 4.4 ``corpus_file`` run ends at (``min_alpha`` 0.0001).

    Each of its W workers measures progress as its own words over the whole epoch's
    (``word2vec_corpusfile.pyx``, ``get_next_alpha``), so within epoch e alpha falls
    from its value at progress e/E only to (e + 1/W)/E, then jumps back: the last
    value is ``alpha * (1 - 1/W) / E`` (W=2, E=5, alpha 0.05: 0.005). A linear fall
    from ``alpha`` to that value also has gensim's mean over E=5 epochs (0.0275).

    >>> round(gensim_min_alpha(0.05, 5, 2), 6), round(gensim_min_alpha(0.05, 2, 2), 6)
    (0.005, 0.0125)
    >>> gensim_min_alpha(0.05, 5, 1)
    0.0001
    """
    return max(alpha * (1.0 - 1.0 / workers) / epochs, 0.0001)


def overrides(run: str) -> dict:
    """Settings after a run's name: ``ours-cbow:min_alpha=0.005:seed=2``.

    >>> overrides("ours-cbow:min_alpha=0.005:seed=2:ns_skip=1")
    {'min_alpha': 0.005, 'seed': 2, 'ns_skip': 1}
    >>> overrides("ours-sg-batch:min_alpha=gensim:batch=0")
    {'min_alpha': 'gensim', 'batch': 0}
    """
    out: dict = {}
    for item in run.split(":")[1:]:
        key, _, value = item.partition("=")
        if value == "gensim":
            out[key] = value
        else:
            out[key] = float(value) if any(c in value for c in ".e") else int(value)
    return out


def child(spec: dict) -> dict:
    """One run, in this process."""
    tool, params = RUNS[spec["run"].split(":")[0]]
    params = {**COMMON, **params, "epochs": spec["epochs"], "workers": spec["workers"]}
    params.update(overrides(spec["run"]))
    if params.get("min_alpha") == "gensim":
        params["min_alpha"] = gensim_min_alpha(params["alpha"], params["epochs"], params["workers"])
    t0 = time.perf_counter()
    # the corpus's layout: lines=1, iter=1, text=1 (the module's docstring)
    corpus = spec["lines"] if params.pop("lines", 0) else spec["text"]
    if tool == "gensim":
        from gensim.models import Word2Vec as GensimW2V
        from gensim.models.word2vec import LineSentence

        params.pop("batch", None)
        text = params.pop("text", 0)
        iterable = params.pop("iter", 0) or text
        source = LineSentence(spec["text"] if text else spec["lines"]) if iterable else None
        model = GensimW2V(**params)
        if iterable:
            model.build_vocab(corpus_iterable=source)
            t1, c1 = time.perf_counter(), time.process_time()
            trained, _ = model.train(
                corpus_iterable=source, total_examples=model.corpus_count, epochs=model.epochs
            )
        else:
            model.build_vocab(corpus_file=spec["lines"])
            t1, c1 = time.perf_counter(), time.process_time()
            trained, _ = model.train(
                corpus_file=spec["lines"],
                total_words=model.corpus_total_words,
                epochs=model.epochs,
            )
        train_s = time.perf_counter() - t1
        cpu_s = time.process_time() - c1
        corpus_words = model.corpus_total_words
        kv = model.wv
    else:
        from vecserve.train import Word2Vec

        model = Word2Vec(**params)
        model.build_vocab(corpus)
        c1 = time.process_time()
        model.train()
        cpu_s = time.process_time() - c1
        train_s = model.train_stats["train_seconds"]
        corpus_words = model.train_stats["corpus_words"]
        trained = model.train_stats["effective_words"]
        kv = model.wv
    wall = time.perf_counter() - t0
    analogy, wordsim = evaluate(kv)
    return {
        "run": spec["run"],
        "epochs": spec["epochs"],
        "workers": spec["workers"],
        "corpus_words": int(corpus_words),
        "trained_words": int(trained),
        "vocab": len(kv),
        "wall_s": wall,
        "train_s": train_s,
        "words_per_s": corpus_words * spec["epochs"] / train_s,
        "cpu_s": cpu_s,
        "words_per_cpu_s": corpus_words * spec["epochs"] / cpu_s,
        "peak_rss_mb": peak_rss_mb(),
        "analogy": analogy,
        "wordsim": wordsim,
    }


def table(results: list[dict]) -> str:
    gensim = {
        r["run"].split(":")[0].split("-")[1]: r for r in results if r["run"].startswith("gensim")
    }
    out = [
        "| run | wall s | train s | words/s | vs gensim | train CPU s | words/CPU-s | vs gensim "
        "| words trained | peak RSS MB | analogy % | WS-353 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ref = gensim.get(r["run"].split(":")[0].split("-")[1])
        out.append(
            f"| {r['run']} | {r['wall_s']:.1f} | {r['train_s']:.1f} | {r['words_per_s']:,.0f} "
            f"| {ratio(r, ref)} | {r['cpu_s']:.1f} | {r['words_per_cpu_s']:,.0f} "
            f"| {ratio(r, ref, 'words_per_cpu_s')} "
            f"| {r.get('trained_words', 0):,} | {r['peak_rss_mb']:.0f} | {100 * r['analogy']:.2f} "
            f"| {r['wordsim']:.3f} |"
        )
    return "\n".join(out)


def summary(results: list[dict]) -> str:
    """One line per run (its seeds together): words/s against the gensim run of the same
    mode (each seed against gensim's of the same seed where there is one), analogy and
    WS-353 as mean, and min..max over seeds where there are several.

    >>> rs = [
    ...     {"run": "gensim-sg:seed=1", "words_per_s": 1.0, "analogy": 0.10, "wordsim": 0.50},
    ...     {"run": "ours-sg-batch:seed=1", "words_per_s": 3.0, "analogy": 0.11, "wordsim": 0.52},
    ...     {"run": "ours-sg-batch:seed=2", "words_per_s": 2.0, "analogy": 0.09, "wordsim": 0.50},
    ... ]
    >>> print(summary(rs).splitlines()[-1])
    | ours-sg-batch | 2 | 2.50x (2.00-3.00) | 10.00 (9.00-11.00) | 0.510 (0.500-0.520) |
    """

    def base(run: str) -> str:
        return ":".join(p for p in run.split(":") if not p.startswith("seed="))

    def seed(run: str) -> str:
        return next((p for p in run.split(":") if p.startswith("seed=")), "")

    def spread(xs: list[float], fmt: str) -> str:
        mean = sum(xs) / len(xs)
        if len(xs) == 1:
            return format(mean, fmt)
        return f"{mean:{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"

    gensim: dict[str, dict[str, dict]] = {}
    for r in results:
        if r["run"].startswith("gensim"):
            gensim.setdefault(base(r["run"]).split(":")[0].split("-")[1], {})[seed(r["run"])] = r
    groups: dict[str, list[dict]] = {}
    for r in results:
        groups.setdefault(base(r["run"]), []).append(r)
    out = [
        "| run | seeds | words/s vs gensim | analogy % | WS-353 |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, rs in groups.items():
        refs = gensim.get(name.split(":")[0].split("-")[1], {})
        ratios = []
        for r in rs:
            ref = refs.get(seed(r["run"])) or next(iter(refs.values()), None)
            if ref and not r["run"].startswith("gensim"):
                ratios.append(r["words_per_s"] / ref["words_per_s"])
        ratio = spread(ratios, ".2f").replace(" (", "x (", 1) if ratios else "-"
        if ratios and len(ratios) == 1:
            ratio += "x"
        out.append(
            f"| {name} | {len(rs)} | {ratio} | {spread([100 * r['analogy'] for r in rs], '.2f')} "
            f"| {spread([r['wordsim'] for r in rs], '.3f')} |"
        )
    return "\n".join(out)


def main() -> None:
    ap = parser(__doc__, RUNS)
    ap.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="run each of --runs with seeds 1..N, alternating tools (mean and spread)",
    )
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    if not args.corpus:
        ap.error("corpus is required")
    runs = args.runs.split(",")
    if args.seeds > 1:
        runs = [f"{run}:seed={k}" for k in range(1, args.seeds + 1) for run in runs]
    for run in runs:
        if run.split(":")[0] not in RUNS:
            ap.error(f"unknown run {run!r}")
    text, lines = prepare(args.corpus, args.head_mb)
    spec = {"text": str(text), "lines": str(lines), "epochs": args.epochs}
    spec["workers"] = args.workers
    results = run_children(__file__, runs, spec, "train", text.name)
    print(table(results))
    print()
    print(summary(results))


if __name__ == "__main__":
    main()
