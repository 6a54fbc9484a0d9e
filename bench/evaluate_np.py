"""gensim's two word-vector scores in NumPy alone, for machines without gensim.

The 16-core machine the scaling runs use has no gensim (and no network to install it);
these functions score vectors there exactly as ``bench_train.evaluate`` does through
gensim, so a run reports its quality where it ran:

- analogy: ``KeyedVectors.evaluate_word_analogies(questions-words.txt,
  restrict_vocab=30000)`` (3CosAdd over the 30,000 most frequent words, case-insensitive,
  a question counted when its four words are among them, the answer the first of the
  top 5 that is not one of the question's words);
- WordSim-353: ``evaluate_word_pairs(wordsim353.tsv)`` (Spearman's rho of cosine
  similarities, pairs with both words in the first 300,000 words).

The data files are gensim's test data (``gensim/test/test_data``): copy the two files to
a folder and name it with ``VECSERVE_EVAL_DATA`` (``bench_distributed.py`` falls back to
this module when gensim cannot be imported). ``python bench/evaluate_np.py --check``
compares both scores with gensim's on random and trained vectors.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np


def _unit(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    n = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(n > 0, n, 1)


def _ok_vocab(words, limit: int) -> dict[str, int]:
    """Upper-cased word -> row among the first *limit*; the most frequent wins a clash."""
    return {w.upper(): i for i, w in reversed(list(enumerate(words[:limit])))}


def analogy_score(words, vectors, questions: str | Path, restrict_vocab: int = 30000) -> float:
    ok = _ok_vocab(words, restrict_vocab)
    unit = _unit(vectors[:restrict_vocab])
    asked = []  # the questions whose four words are among the first restrict_vocab
    for line in Path(questions).read_text(encoding="utf8").splitlines():
        if line.startswith(": "):
            continue
        q = [w.upper() for w in line.split()]
        if len(q) == 4 and all(w in ok for w in q):
            asked.append(q)
    correct = 0
    for s in range(0, len(asked), 1024):  # 1024 questions' scores in one GEMM
        chunk = asked[s : s + 1024]
        idx = np.array([[ok[w] for w in q[:3]] for q in chunk])
        mean = (unit[idx[:, 1]] + unit[idx[:, 2]] - unit[idx[:, 0]]) / np.float32(3)
        mean /= np.linalg.norm(mean, axis=1, keepdims=True)
        dists = mean @ unit.T
        top = np.argpartition(-dists, 8, axis=1)[:, :8]
        for q, row, cand, d in zip(chunk, idx, top, dists, strict=True):
            cand = cand[np.lexsort((cand, -d[cand]))]  # best first; ties by row
            sims = [int(i) for i in cand if i not in row][:5]
            predicted = None
            for i in sims:
                predicted = words[i].upper()
                if predicted not in q[:3]:
                    break
            correct += predicted == q[3]
    return correct / len(asked) if asked else 0.0


def wordsim_score(words, vectors, pairs: str | Path, restrict_vocab: int = 300000) -> float:
    from scipy import stats

    ok = _ok_vocab(words, restrict_vocab)
    gold, model = [], []
    for line in Path(pairs).read_text(encoding="utf8").splitlines():
        if line.startswith("#"):
            continue
        try:
            a, b, sim = line.split("\t")
            a, b, sim = a.upper(), b.upper(), float(sim)
        except ValueError:
            continue
        if a not in ok or b not in ok:
            continue
        va, vb = _unit(vectors[[ok[a], ok[b]]])
        model.append(float(va @ vb))
        gold.append(sim)
    return float(stats.spearmanr(gold, model)[0])


def evaluate_arrays(words, vectors, data_dir: str | Path | None = None) -> tuple[float, float]:
    """(analogy, WS-353) of *vectors* whose rows are *words* in frequency order."""
    d = Path(data_dir or os.environ["VECSERVE_EVAL_DATA"])
    words = [str(w) for w in words]
    return (
        analogy_score(words, vectors, d / "questions-words.txt"),
        wordsim_score(words, vectors, d / "wordsim353.tsv"),
    )


def _check(paths: list[str]) -> None:
    """Both scores against gensim's on random vectors and on any saved runs given."""
    from gensim.models import KeyedVectors
    from gensim.test.utils import datapath

    data = Path(datapath("questions-words.txt")).parent
    sets = []
    for path in paths:
        z = np.load(path)
        sets.append((path, [str(w) for w in z["words"]], z["vectors"]))
    rng = np.random.default_rng(0)
    qwords = sorted(
        {
            w.lower()
            for ln in (data / "questions-words.txt").read_text().split("\n")
            if not ln.startswith(":")
            for w in ln.split()
        }
    )
    sets.append(("random", qwords, rng.standard_normal((len(qwords), 50), dtype=np.float32)))
    for name, words, vectors in sets:
        kv = KeyedVectors(vectors.shape[1])
        kv.add_vectors(words, vectors)
        ref = (
            kv.evaluate_word_analogies(datapath("questions-words.txt"), restrict_vocab=30000)[0],
            kv.evaluate_word_pairs(datapath("wordsim353.tsv"))[1][0],
        )
        ours = evaluate_arrays(words, vectors, data)
        print(f"{name}: gensim {ref[0]:.6f} {ref[1]:.6f}  numpy {ours[0]:.6f} {ours[1]:.6f}")
        assert abs(ref[0] - ours[0]) < 1e-9 and abs(ref[1] - ours[1]) < 1e-9, name


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with gensim's scores")
    ap.add_argument("runs", nargs="*", help="saved runs (.npz of words and vectors) to check")
    args = ap.parse_args()
    if not args.check:
        ap.error("nothing to do: give --check")
    _check(args.runs)
