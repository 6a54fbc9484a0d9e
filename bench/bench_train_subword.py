"""Benchmark vecserve's subword (fastText) trainer against fastText and gensim's FastText.

Each run is a separate process (so peak RSS is its own): train, then evaluate analogies
(gensim's ``questions-words.txt``, ``restrict_vocab=30000``), WordSim-353 (Spearman, on
the pairs whose words the model saw) and *unseen words*: the Spearman correlation on the
WordSim-353 and SimLex-999 pairs that hold a word the corpus never showed the model, its
vector composed from n-grams. For that every run trains on a *trimmed* corpus: a third of
the distinct words of WordSim-353 and SimLex-999 (sorted, every third one, none of them a
word of the analogy questions) are deleted from it. Training words/s = corpus words x
epochs / training wall time; peak RSS is taken when training ends (before the
evaluation loads anything); words/CPU-s divides by the process CPU time of training
instead, steadier on a machine shared with other work.

Settings are fastText's defaults (dim 100, window 5, negative 5, min_count 5, minn 3,
maxn 6, bucket 2,000,000, lr 0.05, t 1e-4) for all three tools, ``--epochs`` and
``--workers`` threads. fastText (the ``fasttext`` module: 0.9.x's C++ trainer) reads the
trimmed corpus as one line (it cuts lines at 1,024 words), gensim (``corpus_file``, its
fastest mode) a copy in lines of 100 words (see ``bench_train.py`` for why), vecserve the
one line (cut into sentences of 10,000 words). fastText's time includes reading the
corpus for its vocabulary (a few seconds), the others' do not.

Usage::

    flock /tmp/vecserve-bench.lock python bench/bench_train_subword.py ../shared/data/wiki100m.zip

``--runs`` picks runs (default: all; ``ours-sg:ns_exponent=0.5`` overrides a parameter, as
in ``bench_train.py``), ``--head-mb`` trains on the first N MB (dev).
Results: a Markdown table on stdout, JSON lines in ``bench/out/train_subword.jsonl``.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from bench_train import LINE_WORDS, WORK, evaluate, overrides, peak_rss_mb, prepare
from train_report import parser, ratio, run_children

RUNS = {
    # name: (tool, sg)
    "fasttext-sg": ("fasttext", 1),
    "gensim-sg": ("gensim", 1),
    "ours-sg": ("ours", 1),
    "fasttext-cbow": ("fasttext", 0),
    "gensim-cbow": ("gensim", 0),
    "ours-cbow": ("ours", 0),
}
# fastText's defaults, in gensim's names
COMMON = {
    "vector_size": 100,
    "window": 5,
    "negative": 5,
    "min_count": 5,
    "sample": 1e-4,
    "alpha": 0.05,
    "min_n": 3,
    "max_n": 6,
    "bucket": 2_000_000,
}


def pair_files() -> list[Path]:
    from gensim.test.utils import datapath

    return [Path(datapath("wordsim353.tsv")), Path(datapath("simlex999.txt"))]


def read_pairs(path: Path) -> list[tuple[str, str, float]]:
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        a, b, score = line.split("\t")[:3]
        out.append((a.lower(), b.lower(), float(score)))
    return out


def unseen_words() -> set[str]:
    """A third of the pair sets' words (none of the analogy questions'), deleted from the
    corpus."""
    from gensim.test.utils import datapath

    analogy = set(Path(datapath("questions-words.txt")).read_text().lower().split())
    words = sorted({w for p in pair_files() for a, b, _ in read_pairs(p) for w in (a, b)})
    return set([w for w in words if w not in analogy][::3])


def trim(text: Path) -> tuple[Path, Path]:
    """The corpus without the unseen words: one line, and in lines of LINE_WORDS."""
    gone = {w.encode() for w in unseen_words()}
    out = WORK / f"{text.name}.trimmed"
    lines = WORK / f"{text.name}.trimmed.lines{LINE_WORDS}"
    if not lines.exists() or lines.stat().st_mtime < text.stat().st_mtime:
        words = [w for w in text.read_bytes().split() if w not in gone]
        out.write_bytes(b" ".join(words) + b"\n")
        with open(lines, "wb") as f:
            for i in range(0, len(words), LINE_WORDS):
                f.write(b" ".join(words[i : i + LINE_WORDS]) + b"\n")
    return out, lines


def unseen_spearman(kv) -> tuple[float, int]:
    """Spearman on the pairs holding a word the model never saw (composed from n-grams)."""
    import numpy as np
    from scipy.stats import spearmanr

    human, model = [], []
    for path in pair_files():
        for a, b, score in read_pairs(path):
            if a in kv.key_to_index and b in kv.key_to_index:
                continue
            va, vb = kv[a], kv[b]
            na, nb = np.linalg.norm(va), np.linalg.norm(vb)
            human.append(score)
            model.append(float(va @ vb / (na * nb)) if na and nb else 0.0)
    return float(spearmanr(human, model)[0]), len(human)


def _train_fasttext(p: dict, spec: dict) -> tuple:
    """fastText's own trainer; its model read back by gensim (the vectors of any word)."""
    import fasttext
    from gensim.models.fasttext import load_facebook_vectors

    t1, c1 = time.perf_counter(), time.process_time()
    ft = fasttext.train_unsupervised(
        spec["text"],
        model="skipgram" if p["sg"] else "cbow",
        dim=p["vector_size"],
        ws=p["window"],
        neg=p["negative"],
        minCount=p["min_count"],
        t=p["sample"],
        lr=p["alpha"],
        minn=p["min_n"],
        maxn=p["max_n"],
        bucket=p["bucket"],
        epoch=p["epochs"],
        thread=p["workers"],
        verbose=0,
    )
    train_s, cpu_s = time.perf_counter() - t1, time.process_time() - c1
    peak = peak_rss_mb()
    with tempfile.TemporaryDirectory(dir=WORK) as tmp:
        ft.save_model(f"{tmp}/m.bin")
        del ft
        kv = load_facebook_vectors(f"{tmp}/m.bin")
    version = fasttext.__name__ + " " + _version("fasttext", "fasttext-wheel")
    return kv, train_s, cpu_s, peak, spec["corpus_words"], version


def _train_gensim(p: dict, spec: dict) -> tuple:
    import gensim
    from gensim.models import FastText as GensimFT

    model = GensimFT(**p)
    model.build_vocab(corpus_file=spec["lines"])
    t1, c1 = time.perf_counter(), time.process_time()
    model.train(
        corpus_file=spec["lines"], total_words=model.corpus_total_words, epochs=model.epochs
    )
    train_s, cpu_s = time.perf_counter() - t1, time.process_time() - c1
    peak = peak_rss_mb()
    return model.wv, train_s, cpu_s, peak, model.corpus_total_words, "gensim " + gensim.__version__


def _train_ours(p: dict, spec: dict) -> tuple:
    from vecserve.train import FastText

    model = FastText(**p)
    model.build_vocab(spec["text"])
    c1 = time.process_time()
    model.train()
    cpu_s = time.process_time() - c1
    peak = peak_rss_mb()
    stats = model.train_stats
    return model.wv, stats["train_seconds"], cpu_s, peak, stats["corpus_words"], "vecserve"


TRAIN = {"fasttext": _train_fasttext, "gensim": _train_gensim, "ours": _train_ours}


def child(spec: dict) -> dict:
    """One run, in this process: train (timed, peak RSS when training ends), evaluate."""
    tool, sg = RUNS[spec["run"].split(":")[0]]
    p = dict(COMMON, sg=sg, epochs=spec["epochs"], workers=spec["workers"])
    p.update(overrides(spec["run"]))
    t0 = time.perf_counter()
    kv, train_s, cpu_s, peak, corpus_words, version = TRAIN[tool](p, spec)
    wall = time.perf_counter() - t0
    analogy, wordsim = evaluate(kv)
    unseen, n_unseen = unseen_spearman(kv)
    return {
        "run": spec["run"],
        "tool": version,
        "epochs": spec["epochs"],
        "workers": spec["workers"],
        "corpus_words": int(corpus_words),
        "vocab": len(kv.key_to_index),
        "wall_s": wall,
        "train_s": train_s,
        "words_per_s": corpus_words * spec["epochs"] / train_s,
        "cpu_s": cpu_s,
        "words_per_cpu_s": corpus_words * spec["epochs"] / cpu_s,
        "peak_rss_mb": peak,
        "analogy": analogy,
        "wordsim": wordsim,
        "unseen_spearman": unseen,
        "unseen_pairs": n_unseen,
    }


def _version(*names: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    for name in names:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return "?"


def table(results: list[dict]) -> str:
    ref = {tuple(r["run"].split("-")): r for r in results if ":" not in r["run"]}
    out = [
        "| run | train s | words/s | vs fastText | vs gensim | train CPU s | words/CPU-s "
        "| vs fastText | vs gensim | peak RSS MB | analogy % | WS-353 | unseen-word rho |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        mode = r["run"].split(":")[0].split("-")[1]
        ratios = {
            (key, tool): ratio(r, ref.get((tool, mode)), key)
            for key in ("words_per_s", "words_per_cpu_s")
            for tool in ("fasttext", "gensim")
        }
        out.append(
            f"| {r['run']} | {r['train_s']:.1f} | {r['words_per_s']:,.0f} "
            f"| {ratios['words_per_s', 'fasttext']} | {ratios['words_per_s', 'gensim']} "
            f"| {r['cpu_s']:.1f} | {r['words_per_cpu_s']:,.0f} "
            f"| {ratios['words_per_cpu_s', 'fasttext']} | {ratios['words_per_cpu_s', 'gensim']} "
            f"| {r['peak_rss_mb']:,.0f} | {100 * r['analogy']:.2f} | {r['wordsim']:.3f} "
            f"| {r['unseen_spearman']:.3f} |"
        )
    pairs = {r["unseen_pairs"] for r in results}
    out.append(f"\nunseen-word rho: on {', '.join(map(str, sorted(pairs)))} pairs")
    return "\n".join(out)


def main() -> None:
    ap = parser(__doc__, RUNS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    if not args.corpus:
        ap.error("corpus is required")
    runs = args.runs.split(",")
    for run in runs:
        if run.split(":")[0] not in RUNS:
            ap.error(f"unknown run {run!r}")
    text, _ = prepare(args.corpus, args.head_mb)
    text, lines = trim(text)
    spec = {"text": str(text), "lines": str(lines), "epochs": args.epochs}
    spec.update(workers=args.workers, corpus_words=len(text.read_bytes().split()))
    print(table(run_children(__file__, runs, spec, "train_subword", text.name)))


if __name__ == "__main__":
    main()
