"""Recall, measured or made a target: :func:`meet_target` sets an index's search effort
(``nprobe`` for IVF, ``expansion_search`` for HNSW) to the least that meets its recall@10
target on the model's own queries, chosen on one sampled set and confirmed on another held
aside (:mod:`vecserve.search.recall`), and says whether it is within the latency budget;
:func:`measure` only measures recall@10 at fixed settings.

Both work on an index through what :class:`~vecserve.search.ann.index.AnnIndex` offers
(``most_similar``, ``setting``, ``set_setting``, ``set_oversample``, ``params``, ``index``)
and return a :class:`~vecserve.search.ann.meta.Measured` the build keeps in its metadata.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from .. import recall
from ..snapshot import SimilarityIndex
from .meta import Measured, Target

__all__ = ["EF_LADDER", "MAX_OVERSAMPLE", "measure", "meet_target", "recall_at_k"]

log = logging.getLogger(__name__)

#: An approximate query within this many seconds is within any latency budget.
LATENCY_FLOOR_S = 0.002
#: ``expansion_search`` values an HNSW build tries, least first.
EF_LADDER = (16, 32, 64, 128, 256, 512, 1024, 2048)
#: Exact queries timed at build (single queries, for the latency budget).
EXACT_TIMED = 20
#: The most candidates a query re-scores, as a multiple of the answers it wants. An IVF
#: build doubles ``oversample`` up to this when its lists hold the held-aside queries'
#: neighbours but their stored scores rank them below the candidates (int8 rows of tight
#: clusters in few dimensions: 32-d clusters 0.3 wide need 8).
MAX_OVERSAMPLE = 16


def recall_at_k(exact: list[list[str]], approx: list[list[str]], k: int = 10) -> float:
    """Mean share of each exact top-``k`` that the approximate top-``k`` contains.

    >>> recall_at_k([["a", "b"]], [["b", "c"]], k=2)
    0.5
    """
    hits = [
        len(set(e[:k]) & set(a[:k])) / max(len(e[:k]), 1)
        for e, a in zip(exact, approx, strict=True)
    ]
    return float(np.mean(hits)) if hits else 0.0


def meet_target(ann, sim: SimilarityIndex, *, seed: int = 0) -> Measured:
    """Set ``ann``'s search effort to the least that meets ``ann.params.recall`` on the
    model's own queries and say whether it is met within the latency budget."""
    p = ann.params
    tune, check = recall.query_sets(sim.count, p.recall_queries, seed)
    if len(check) == 0:
        return Measured(0.0, 0, target=Target(p.recall, False, "no rows", p.latency_budget))
    ladder, i = _first_guess(ann, sim, tune, recall.exact_neighbours(sim, tune))
    truth = recall.exact_neighbours(sim, check)
    held, approx_s, reason = _confirm(ann, sim, ladder, i, check, truth)
    name, value = ann.setting()
    exact_s = None
    if reason is None:
        exact_s = _exact_p50(sim, check[:EXACT_TIMED])
        reason = _over_budget(p, name, value, approx_s, exact_s)
    if reason is not None:
        log.warning(
            "approximate index of %s: %s; approximate queries are answered exactly",
            sim.name or "model",
            reason,
        )
    setting = {name: value} | ({"oversample": ann.params.oversample} if p.kind == "ivf" else {})
    return Measured(
        recall_at_10=round(held.recall, 4) if held is not None else 0.0,
        recall_queries=len(check),
        recall_interval=(round(held.low, 4), round(held.high, 4)) if held else None,
        query_ms=round(approx_s * 1e3, 3) if held is not None else None,
        exact_query_ms=round(exact_s * 1e3, 3) if exact_s is not None else None,
        target=Target(
            recall=p.recall,
            met=reason is None,
            reason=reason,
            latency_budget=p.latency_budget,
            setting=setting,
            tuning_queries=len(tune),
        ),
    )


def _first_guess(ann, sim: SimilarityIndex, tune, truth) -> tuple[list[int], int]:
    """The settings to try, least first, and the index of the least that meets the target
    on the tuning queries (the last if none does). IVF: every ``nprobe`` from one scan of
    the lists' recall curve; HNSW: ``EF_LADDER`` up to the first that meets it."""
    p = ann.params
    if p.kind == "ivf":
        curve = recall.ivf_recall_curve(sim, ann.index, tune, truth)
        ladder = list(range(1, ann.index.nlist + 1))
        lows = [recall.strata_low(curve[:, i], tune, sim.count) for i in range(len(ladder))]
    else:
        ladder, lows = list(EF_LADDER), []
        for ef in ladder:
            ann.set_setting(ef)
            got, _ = _ask(ann, sim, tune)
            per_query = recall.per_query_recall(truth, got)
            lows.append(recall.strata_low(per_query, tune, sim.count))
            if lows[-1] >= p.recall:
                break
    i = next((i for i, low in enumerate(lows) if low >= p.recall), len(lows) - 1)
    return ladder, i


def _confirm(ann, sim: SimilarityIndex, ladder: list[int], i: int, check, truth):
    """Climb ``ladder`` from ``i`` until the held-aside queries meet the target too (IVF:
    doubling ``oversample`` first where the lists hold their neighbours), or no setting
    can: ``(estimate or None, p50 seconds of a query, reason it is not met or None)``."""
    p = ann.params
    held, approx_s = None, 0.0
    # what the lists alone allow the held-aside queries
    reach = recall.ivf_recall_curve(sim, ann.index, check, truth) if p.kind == "ivf" else None
    while True:
        ann.set_setting(ladder[i])
        if p.kind == "ivf" and ladder[i] / ann.index.nlist / 2 > p.latency_budget:
            # a scan of stored rows reads at best a half to a quarter of an exact one's bytes
            share = ladder[i] / ann.index.nlist
            return (
                held,
                approx_s,
                (
                    f"recall@10 {p.recall} needs nprobe >= {ladder[i]} of {ann.index.nlist} "
                    f"lists ({share:.0%} of the rows): no faster than {p.latency_budget:g} x an "
                    "exact query"
                ),
            )
        got, approx_s = _ask(ann, sim, check)
        per_query = recall.per_query_recall(truth, got)
        held = recall.estimate(per_query)
        low = recall.strata_low(per_query, check, sim.count)
        # met with 95% confidence on frequent and on other words, not merely on average
        if low >= p.recall:
            return held, approx_s, None
        if (
            reach is not None
            and ann.params.oversample < MAX_OVERSAMPLE
            and recall.strata_low(reach[:, ladder[i] - 1], check, sim.count) >= p.recall
        ):  # the lists hold the neighbours: the stored scores rank them too low
            ann.set_oversample(2 * ann.params.oversample)
            continue
        if i == len(ladder) - 1:
            name, value = ann.setting()
            return (
                held,
                approx_s,
                (
                    f"recall@10 {p.recall} not reached ({held.recall:.3f}, 95% CI from "
                    f"{low:.3f} on the weaker of frequent and other words, at {name} {value})"
                ),
            )
        i = min(len(ladder) - 1, max(i + 1, round(i * 1.25)))


def _over_budget(p, name: str, value: int, approx_s: float, exact_s: float) -> str | None:
    """Why a setting that meets the target is too slow to use, or None."""
    budget = max(p.latency_budget * exact_s, LATENCY_FLOOR_S)
    if approx_s <= budget:
        return None
    return (
        f"recall@10 {p.recall} needs {name} {value}: p50 {approx_s * 1e3:.2f} ms, over the "
        f"budget of {budget * 1e3:.2f} ms ({p.latency_budget:g} x exact {exact_s * 1e3:.2f} ms)"
    )


def measure(ann, sim: SimilarityIndex, *, queries: int = 200, seed: int = 0) -> Measured:
    """recall@10 of ``ann.most_similar`` against exact, over sampled vocabulary words."""
    n = min(queries, sim.count)
    if n == 0:
        return Measured(0.0, 0)
    rows = np.random.default_rng(seed).choice(sim.count, size=n, replace=False)
    qs = [{"positive": [int(r)], "topn": 10} for r in rows]
    exact = [[w for w, _ in res] for res in sim.most_similar_batch(qs)]
    start = time.perf_counter()
    approx = [[w for w, _ in ann.most_similar(sim, [int(r)], [], 10)] for r in rows]
    per_query = (time.perf_counter() - start) / n
    return Measured(
        recall_at_10=round(recall_at_k(exact, approx, 10), 4),
        recall_queries=n,
        query_ms=round(per_query * 1000, 3),
    )


def _ask(ann, sim: SimilarityIndex, rows: np.ndarray) -> tuple[list, float]:
    """Each row's approximate top 10 (row numbers) and the p50 seconds of a query."""
    out, times = [], []
    for r in rows:
        start = time.perf_counter()
        got = ann.most_similar(sim, [int(r)], [], recall.K)
        times.append(time.perf_counter() - start)
        out.append([sim.get_index(w) for w, _ in got])
    return out, float(np.median(times)) if times else 0.0


def _exact_p50(sim: SimilarityIndex, rows: np.ndarray) -> float:
    """The median seconds of one exact ``most_similar(row)`` over ``rows``."""
    times = []
    for r in rows:
        start = time.perf_counter()
        sim.most_similar(int(r), topn=recall.K)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) if times else 0.0
