"""The recall target of an approximate index: which search setting answers a model's own
queries at recall@10 >= the target, measured, with its confidence interval.

An approximate index is built to a target (``AnnParams.recall``, default 0.95), not to a
fixed knob: how many IVF lists a query must scan for a given recall depends on the data
(clustered vectors: a few; real embeddings: more; uniform noise: nearly all).

The queries are the model's own rows, each asked as ``most_similar(row)``, in two
disjoint seeded sets: the *tuning* set chooses the setting, the *held-aside* set, never
looked at while choosing, measures the recall reported (:class:`Estimate`: the mean of
the per-query recall@10 and a 95% interval). Each set is two strata (:func:`query_sets`):
half from the model's first rows, half from the others. Word2vec, GloVe and fastText
files (and vecserve's trainer) store the most frequent words first; those are the words
users ask most, and their neighbourhoods are the densest (wiki100m x 300: recall@10 0.900
on its first 1,000 words where a uniform sample got 0.955), so a sample where every row is
equally likely would meet the target on rare words and miss it where it matters. A setting
is chosen when the tuning set's lower bound meets the target in both strata, and kept
only when the held-aside set's does too (else more is scanned): the target is met with
95% confidence on frequent and on rare words, not merely on average.

For an IVF index the tuning needs no search at all (:func:`ivf_recall_curve`): a query
finds a neighbour exactly when it scans the neighbour's list, so from the rank of each
exact neighbour's list among the query's nearest centroids follows the recall at every
``nprobe`` at once. Nothing here knows of files or HTTP; ``sim`` is a
:class:`~vecserve.search.snapshot.SimilarityIndex`.

>>> estimate(np.array([1.0, 1.0, 0.9, 0.8])).recall
0.925
>>> e = estimate(np.ones(100)); (e.recall, e.low, e.high)
(1.0, 0.997, 1.0)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

__all__ = [
    "Estimate",
    "K",
    "estimate",
    "exact_neighbours",
    "head_rows",
    "ivf_recall_curve",
    "query_sets",
    "strata_low",
]

#: recall@K: the share of the exact top K the approximate top K finds.
K = 10
#: The normal quantile of a two-sided 95% interval.
Z95 = 1.959964


@dataclass(frozen=True)
class Estimate:
    """recall@10 measured on ``queries`` queries: the mean and a 95% interval."""

    recall: float
    low: float
    high: float
    queries: int

    def as_dict(self) -> dict:
        return {
            k: round(float(v), 4) if isinstance(v, float) else v for k, v in asdict(self).items()
        }


def estimate(per_query: np.ndarray) -> Estimate:
    """The mean of per-query recalls, with a 95% interval: the normal one of a mean, or,
    when no query missed anything, the rule of three over the ``K x n`` neighbours sought
    (no miss in ``N`` trials bounds the miss rate below ``3 / N`` at 95%)."""
    per_query = np.asarray(per_query, dtype=np.float64)
    n = len(per_query)
    if n == 0:
        return Estimate(0.0, 0.0, 1.0, 0)
    mean = float(per_query.mean())
    if mean >= 1.0:
        return Estimate(1.0, round(max(0.0, 1 - 3 / (K * n)), 6), 1.0, n)
    half = Z95 * float(per_query.std(ddof=1)) / np.sqrt(n) if n > 1 else 1.0
    return Estimate(mean, float(max(0.0, mean - half)), float(min(1.0, mean + half)), n)


def head_rows(count: int, n: int) -> int:
    """The first rows (the most frequent words) the frequent stratum of sets of ``n``
    queries is drawn from: 1% of the model, at least ``2 n``; all of a small model.

    >>> head_rows(3_000_000, 500), head_rows(20_000, 500), head_rows(1_500, 500)
    (30000, 1000, 1500)
    """
    head = max(2 * n, count // 100)
    return count if count - head < 2 * n else head


def query_sets(count: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two disjoint seeded samples of rows (tuning, held-aside), ``n`` each (fewer when
    the model has fewer than ``2 n`` rows), sorted: each half from the first
    :func:`head_rows` rows and half from the others (a small model: uniform over all).

    >>> tune, check = query_sets(100_000, 200)
    >>> len(tune), len(check), int((tune < 1_000).sum()), int((check < 1_000).sum())
    (200, 200, 100, 100)
    >>> [len(s) for s in query_sets(50, 200)]
    [25, 25]
    """
    n = max(0, min(n, count // 2))
    rng = np.random.default_rng(seed)
    head = head_rows(count, n)
    if head == count:
        rows = rng.choice(count, size=2 * n, replace=False)
        return np.sort(rows[:n]), np.sort(rows[n:])
    first, rest = n // 2, n - n // 2
    top = rng.choice(head, size=2 * first, replace=False)
    other = head + rng.choice(count - head, size=2 * rest, replace=False)
    return (
        np.sort(np.concatenate([top[:first], other[:rest]])),
        np.sort(np.concatenate([top[first:], other[rest:]])),
    )


def strata_low(per_query: np.ndarray, rows: np.ndarray, count: int) -> float:
    """The lower 95% bound that both strata of :func:`query_sets` meet: the lesser of the
    frequent rows' and the others' (one stratum where the sets are uniform)."""
    per_query, rows = np.asarray(per_query), np.asarray(rows)
    first = rows < head_rows(count, len(rows))
    parts = [per_query[first], per_query[~first]]
    return min(estimate(p).low for p in parts if len(p))


def exact_neighbours(sim, rows: np.ndarray, k: int = K) -> list[np.ndarray]:
    """The exact ``most_similar(row, topn=k)`` of each row, as row numbers (one batched
    pass over the matrix)."""
    answers = sim.most_similar_batch([{"positive": [int(r)], "topn": k} for r in rows])
    return [np.array([sim.get_index(w) for w, _ in a], dtype=np.int64) for a in answers]


def per_query_recall(exact: list[np.ndarray], approx: list, k: int = K) -> np.ndarray:
    """Each query's share of its exact top ``k`` (row numbers or words) that the
    approximate top ``k`` holds."""
    out = np.empty(len(exact))
    for i, (e, a) in enumerate(zip(exact, approx, strict=True)):
        e = list(e)[:k]
        out[i] = len(set(e) & set(list(a)[:k])) / max(len(e), 1)
    return out


def ivf_recall_curve(sim, ivf, rows: np.ndarray, exact: list[np.ndarray]) -> np.ndarray:
    """``recall[q, p - 1]``: query ``q``'s recall@10 when it scans its ``p`` nearest lists,
    for every ``p`` from 1 to ``ivf.nlist``, without a search.

    A query finds an exact neighbour exactly when one of the lists it scans holds it (the
    candidates are re-scored exactly, and a top-10 row outranks all but the top 10 of
    any scanned set), so its recall at ``p`` is the share of neighbours whose list is
    among its ``p`` nearest centroids.
    """
    list_of = np.empty(ivf.count, dtype=np.int32)
    sizes = np.diff(ivf.offsets)
    list_of[ivf.ids] = np.repeat(np.arange(ivf.nlist, dtype=np.int32), sizes)
    out = np.zeros((len(rows), ivf.nlist), dtype=np.float64)
    for q, (row, nb) in enumerate(zip(rows, exact, strict=True)):
        if len(nb) == 0:
            out[q] = 1.0
            continue
        mean, _ = sim.query_vector([int(row)], [])
        near = np.asarray(ivf.centroids @ mean.astype(np.float32))
        rank = np.empty(ivf.nlist, dtype=np.int64)
        rank[np.argsort(-near, kind="stable")] = np.arange(ivf.nlist)
        need = rank[list_of[nb]]  # scanning need + 1 lists finds the neighbour
        found = np.bincount(need, minlength=ivf.nlist).cumsum()
        out[q] = found / len(nb)
    return out
