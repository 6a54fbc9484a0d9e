"""Opt-in approximate nearest neighbours over a similarity snapshot: an inverted file
(IVF, :mod:`vecserve.search.ivf`) for large models, an HNSW graph (usearch) for small ones.

Which index: ``AnnParams(kind="auto")`` (the default) builds an IVF index for models of
at least :data:`IVF_FROM_ROWS` (100,000) rows and an HNSW graph below; ``kind="ivf"`` or
``"hnsw"`` forces one. On large clustered models IVF builds several times faster than an
HNSW graph and, scanning a few lists, finds the exact top 10 where HNSW's recall stays
below it. On small models HNSW builds in under a minute, answers a little faster and
keeps a small file: HNSW is the choice there. On uniform random data
(no structure to find) no index of either kind is both fast and exact: IVF's recall
grows with ``nprobe`` roughly as the share of rows scanned. BENCHMARKS.md ("Similarity
search: the IVF index") holds the figures.

Why our own IVF, not faiss-cpu's: faiss's IndexIVFFlat finds the same candidates but
scans no faster, its 8-bit scalar-quantised lists scan slower, IVF-PQ loses more recall
than re-ranking wins back, and faiss-cpu is a large dependency bringing its own OpenBLAS
and OpenMP runtime. The NumPy IVF runs on the BLAS every install has, and its one file
is memory-mapped and shared by every worker like the snapshot.

Why usearch for HNSW: of the well-kept HNSW libraries that install here (usearch,
faiss-cpu, hnswlib), usearch ships manylinux wheels for every CPython we support, is
small, and serves an index straight from a memory-mapped file
(``Index.restore(path, view=True)``).

Both kinds are built once per model generation, cached on local disk next to the exact
snapshot (``ann-<tag>.ivf`` / ``ann-<tag>.usearch`` and a ``.json`` of metadata), built
by one process among all sharing the cache dir (an ``flock``), shared through the page
cache by every uvicorn worker and reused after a restart. A damaged file is refused with
a one-line reason and rebuilt by the next process that builds indexes.

How a query runs: the query's unit mean vector is built exactly as gensim does
(:meth:`SimilarityIndex.query_vector`), the index returns ``oversample x (topn +
excluded)`` candidates, and those are re-scored exactly against the float32 snapshot --
so the scores returned are gensim's cosines, only the candidate set is approximate.

Quality is a target, not a knob: each build sets the index's search effort (``nprobe``
for IVF, ``expansion_search`` for HNSW) to the least that answers the model's own
queries at recall@10 >= ``AnnParams.recall`` (default 0.95; recall@10 is the share of
the exact top 10 that the approximate top 10 finds), chosen on one set of sampled rows
and measured on another held aside (:mod:`vecserve.search.recall`). The estimate, its 95%
interval and the setting chosen are stored with the index and shown in ``GET
/models/{name}`` and ``vecserve models info``. Where that least setting is no faster
than ``latency_budget`` x an exact query (uniform noise: nearly every list), the index
says so and approximate queries are answered exactly (:attr:`AnnIndex.usable`); an IVF
index still speeds up exact queries (:meth:`AnnIndex.exact_most_similar`).

>>> import numpy as np
>>> from vecserve.search.snapshot import SimilarityIndex
>>> rng = np.random.default_rng(0)
>>> sim = SimilarityIndex.from_arrays([f"w{i}" for i in range(500)],
...                                   rng.standard_normal((500, 16)).astype(np.float32))
>>> ann = AnnIndex.build(sim, recall_queries=50)
>>> ann.recall_at_10 >= 0.95, ann.most_similar(sim, ["w0"], [], topn=1) == sim.most_similar(
...     "w0", topn=1)
(True, True)
>>> fixed = AnnParams(kind="ivf", nlist=8, nprobe=8, recall=None)  # every list: exact
>>> ivf = AnnIndex.build(sim, params=fixed)
>>> ivf.recall_at_10, ivf.most_similar(sim, ["w0"], [], 3) == sim.most_similar("w0", topn=3)
(1.0, True)

Uniform noise has no structure an index could use: no setting meets the target cheaply.

>>> noise = AnnIndex.build(sim, params=AnnParams(kind="ivf", nlist=8))
>>> noise.usable, noise.fallback_reason
(False, 'recall@10 0.95 needs nprobe >= 6 of 8 lists (75% of the rows): no faster than...')
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from ..fileio import atomic_path, atomic_write
from ..procs import pid_alive
from . import recall
from ._exact import best_candidates
from .ivf import IvfIndex, default_nlist
from .snapshot import SimilarityIndex

__all__ = ["AnnIndex", "AnnManager", "AnnParams", "disk_status", "recall_at_k"]

log = logging.getLogger(__name__)

BUILD_CHUNK = 50_000
#: Seconds between looks at an index another process is building.
WAIT_POLL = 1.0


#: Rows from which ``kind="auto"`` picks IVF over HNSW (see the module docstring).
IVF_FROM_ROWS = 100_000
#: The stored vectors' type of each kind unless told otherwise.
DEFAULT_DTYPE = {"ivf": "i8", "hnsw": "f16"}
#: Candidates an exact query through an IVF index re-scores beyond the ``w`` it answers:
#: enough that the rows within the stored scores' bound of the ``w``-th (1e-3 for float
#: rows, ~0.014 for int8 ones) are among them. Real 219k x 300 vectors' neighbourhoods
#: are dense: int8 rows prove 52 of 200 answers with 64, 190 with 1,024 (float16: 200).
PROOF_EXTRA = {"float": 64, "i8": 1024}

#: The recall@10 an index is built to meet unless told otherwise.
DEFAULT_RECALL = 0.95
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


@dataclass(frozen=True)
class AnnParams:
    """Index parameters. ``kind``: ``"ivf"``, ``"hnsw"`` or ``"auto"`` (IVF for models of
    at least :data:`IVF_FROM_ROWS` rows, HNSW below).

    HNSW (usearch names): ``connectivity``, ``expansion_add``, ``expansion_search``,
    ``dtype`` (default f16: half the graph's vector copy). IVF: ``nlist`` lists (0: one
    per ~512 rows, at most 4096), ``nprobe`` lists scanned a query, ``dtype`` the stored
    rows' type (default ``i8``: a quarter of float32's bytes scanned; or ``f16``,
    ``f32``). Both: ``oversample`` x (topn + excluded) candidates re-scored exactly.

    The recall target: ``recall`` (default 0.95), recall@10 the build makes the index
    meet on the model's own queries (``recall_queries`` to choose the setting and as
    many held aside to measure it, :mod:`vecserve.search.recall`): it sets ``nprobe``
    (IVF) or ``expansion_search`` (HNSW) to the least that meets it. When the least
    that meets it answers slower than ``latency_budget`` x an exact query (or 2 ms,
    whichever is more), or nothing meets it, the index says so and approximate queries
    are answered exactly. ``recall=None``: the fixed ``nprobe`` / ``expansion_search``.

    >>> AnnParams().resolved(3_000_000).filename, AnnParams().resolved(5_000).filename
    ('ann-ivf-i8.ivf', 'ann-usearch-f16-M16-ef128.usearch')
    """

    kind: str = "auto"
    connectivity: int = 16
    expansion_add: int = 128
    expansion_search: int = 128
    dtype: str = ""  # the kind's default: DEFAULT_DTYPE
    nlist: int = 0
    nprobe: int = 16
    oversample: int = 2
    recall_queries: int = 500
    recall: float | None = DEFAULT_RECALL
    latency_budget: float = 0.2

    def __post_init__(self) -> None:
        if self.kind not in ("auto", "ivf", "hnsw"):
            raise ValueError(f"unknown ANN index kind {self.kind!r} (auto, ivf or hnsw)")
        if self.recall is not None and not 0 < self.recall <= 1:
            raise ValueError(f"recall target {self.recall} is not in (0, 1]")

    def resolved(self, rows: int) -> AnnParams:
        """These parameters for a model of ``rows`` rows: a concrete ``kind`` and ``dtype``."""
        kind = self.kind if self.kind != "auto" else "ivf" if rows >= IVF_FROM_ROWS else "hnsw"
        return replace(self, kind=kind, dtype=self.dtype or DEFAULT_DTYPE[kind])

    @property
    def tag(self) -> str:
        # a recall target other than the default is its own file: the settings differ
        target = "" if self.recall == DEFAULT_RECALL else f"-r{self.recall or 'fixed'}"
        if self.kind == "ivf":
            return (f"ivf-nlist{self.nlist}" if self.nlist else "ivf") + f"-{self.dtype}{target}"
        return f"usearch-{self.dtype}-M{self.connectivity}-ef{self.expansion_add}{target}"

    @property
    def filename(self) -> str:
        """The index file's name in the snapshot directory (``resolved`` parameters)."""
        return f"ann-{self.tag}.{'ivf' if self.kind == 'ivf' else 'usearch'}"

    @property
    def library(self) -> str:
        return "vecserve IVF (NumPy/BLAS)" if self.kind == "ivf" else "usearch (HNSW)"


def _library_version(kind: str) -> str:
    if kind == "ivf":
        return f"vecserve IVF, numpy {np.__version__}"
    import usearch

    return f"usearch {usearch.__version__}"


def _unit_rows(sim: SimilarityIndex, lo: int, hi: int) -> np.ndarray:
    rows = np.asarray(sim.vectors[lo:hi], dtype=np.float32)
    norms = np.asarray(sim.norms[lo:hi], dtype=np.float32)[:, None]
    return np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)


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


class AnnIndex:
    """An approximate index over the unit rows of one :class:`SimilarityIndex` (keys = row
    numbers): an HNSW graph (usearch) or an :class:`~vecserve.search.ivf.IvfIndex`.

    Parameters
    ----------
    index : usearch.index.Index or IvfIndex
        Built, or mapped from a file.
    meta : dict
        Build parameters, build time, index bytes, recall@10 measured at build.
    """

    def __init__(self, index, meta: dict):
        self.index = index
        self.meta = meta
        self.params = AnnParams(**{"kind": "hnsw", **meta["params"]})  # no kind named: HNSW
        if self.params.kind == "ivf":
            self.index.nprobe = self.params.nprobe
        else:
            self.index.expansion_search = self.params.expansion_search

    @property
    def recall_at_10(self) -> float:
        return float(self.meta.get("recall_at_10", 0.0))

    @property
    def usable(self) -> bool:
        """Whether approximate queries may use this index: it met its recall target
        within its latency budget (or was built to fixed settings). An IVF index that
        did not still answers exact queries (:meth:`exact_most_similar`)."""
        return bool(self.meta.get("target", {}).get("met", True))

    @property
    def fallback_reason(self) -> str | None:
        return None if self.usable else self.meta["target"].get("reason")

    @classmethod
    def build(
        cls,
        sim: SimilarityIndex,
        *,
        path: str | os.PathLike | None = None,
        params: AnnParams | None = None,
        recall_queries: int | None = None,
        threads: int = 0,
        progress: Callable[[int, int], None] | None = None,
    ) -> AnnIndex:
        """Build over ``sim``, measure recall@10, save to ``path`` (atomically) if given.

        ``progress(done, total)`` is called after every chunk of rows added. An IVF index
        is built into its file: without ``path``, an unnamed temporary one.
        """
        p = (params or AnnParams()).resolved(sim.count)
        if recall_queries is not None:
            p = replace(p, recall_queries=recall_queries)
        if path is None:
            return cls._build(sim, p, None, threads, progress)
        path = Path(path)
        with atomic_path(path, fsync=False) as tmp:  # a cache: rebuilt if damaged
            ann = cls._build(sim, p, tmp, threads, progress)
            if p.kind == "hnsw":
                ann.index.save(str(tmp))
            ann.meta["index_bytes"] = ann.index.nbytes if p.kind == "ivf" else tmp.stat().st_size
            # the metadata first: whoever finds the index finds its metadata
            with atomic_write(path.with_suffix(".json"), "w", fsync=False) as f:
                f.write(json.dumps(ann.meta, indent=1))
        return cls.open(path) or ann

    @classmethod
    def _build(cls, sim, p: AnnParams, target: Path | None, threads: int, progress) -> AnnIndex:
        """The index (an IVF one built into ``target``), its recall measured or tuned."""
        start = time.perf_counter()
        if p.kind == "ivf":
            index = _build_ivf(sim, p, target, threads, progress)
        else:
            index = _build_hnsw(sim, p, threads, progress)
        meta = {
            "library": _library_version(p.kind),
            "params": asdict(p),
            "name": sim.name,
            "generation": sim.generation,
            "rows": sim.count,
            **({"nlist": index.nlist} if p.kind == "ivf" else {}),
            "build_seconds": round(time.perf_counter() - start, 3),
        }
        ann = cls(index, meta)
        if p.recall is None:
            meta.update(ann.measure_recall(sim, queries=p.recall_queries))
        else:
            meta.update(ann.meet_target(sim))
        return ann

    @classmethod
    def open(cls, path: str | os.PathLike) -> AnnIndex | None:
        """Memory-map a saved index (shared by every process that opens it); None if absent.

        Raises ``ValueError`` (one line: which file, what is wrong) if the file is damaged.
        """
        path = Path(path)
        try:
            meta = json.loads(path.with_suffix(".json").read_text())
        except (OSError, ValueError):
            return None
        if not path.exists():
            return None
        if path.suffix == ".ivf":
            try:
                return cls(IvfIndex.open(path), meta)
            except FileNotFoundError:
                return None
        from usearch.index import Index

        try:
            index = Index.restore(str(path), view=True)
        except Exception as exc:  # usearch raises RuntimeError/ValueError on bad bytes
            raise ValueError(f"{path}: damaged HNSW index ({exc})") from None
        if index is None or len(index) != meta.get("rows", len(index)):
            raise ValueError(
                f"{path}: damaged HNSW index (not the {meta.get('rows')} rows its metadata names)"
            )
        return cls(index, meta)

    def _candidates(self, means: np.ndarray, k: int) -> np.ndarray:
        """Each query row's approximately nearest row numbers: ``len(means) x k`` int64,
        best first, padded with -1."""
        if self.params.kind == "ivf":
            return self.index.candidates(means, k)
        found = self.index.search(means, k, threads=1)
        keys = np.asarray(found.keys, dtype=np.int64).reshape(len(means), -1)
        # a one-row batch is answered with plain Matches (no counts)
        counts = np.asarray(getattr(found, "counts", [keys.shape[1]])).reshape(len(means))
        out = np.full((len(means), k), -1, dtype=np.int64)
        width = min(k, keys.shape[1])
        fill = np.arange(width) < counts[:, None]
        out[:, :width] = np.where(fill, keys[:, :width], -1)
        return out

    def most_similar(self, sim: SimilarityIndex, positive, negative, topn: int = 10) -> list:
        """Approximate ``sim.most_similar(positive, negative, topn)``: exact cosines of the
        approximately nearest rows, best first, the query's own words excluded."""
        return self.most_similar_batch(sim, [(positive, negative, topn)])[0]

    def most_similar_batch(self, sim: SimilarityIndex, queries) -> list[list]:
        """:meth:`most_similar` of each ``(positive, negative, topn)``: one search of the
        index for all of them (an IVF batch: one C call a thread, each list read once for
        every query that probes it), then every query's candidates re-scored at once
        (:meth:`_best`): a query's answer is the same alone or in a batch."""
        if len(queries) == 1:  # the common call, without a batch's bookkeeping
            positive, negative, topn = queries[0]
            if topn < 1:
                return [[]]
            means, excludes = sim.query_vectors([(positive, negative)])
            k = min(self.params.oversample * (topn + len(excludes[0])), sim.count)
            rows, values, _ = self._best(sim, means, self._candidates(means, k), excludes, [topn])
            return [list(zip(sim.index_to_key.words(rows), values, strict=True))]
        out: list[list] = [[] for _ in queries]
        todo = [i for i, q in enumerate(queries) if q[2] >= 1]
        if not todo:
            return out
        means, excludes = sim.query_vectors([queries[i][:2] for i in todo])
        tops = [queries[i][2] for i in todo]
        wide = max(top + len(ex) for top, ex in zip(tops, excludes, strict=True))
        cand = self._candidates(means, min(self.params.oversample * wide, sim.count))
        rows, values, counts = self._best(sim, means, cand, excludes, tops)
        words = sim.index_to_key.words(rows)  # a SharedVocab: one call for them all
        start = 0
        for i, count in zip(todo, counts, strict=True):
            end = start + count
            out[i] = list(zip(words[start:end], values[start:end], strict=True))
            start = end
        return out

    @staticmethod
    def _best(sim: SimilarityIndex, means, cand, excludes, tops) -> tuple[list, list, list]:
        """Each query's answer from its candidates (``cand``, -1: none): their exact
        scores (``dot(vectors[candidates], mean) / norms``, the snapshot's arithmetic, the
        same floats whatever the batch), then the best ``tops[i]`` that are not the
        query's own words, picked in one C pass
        (:func:`~vecserve.search._exact.best_candidates`; ties to the index's order):
        ``(rows, scores, counts)``, one query after another."""
        # the candidates' vectors in one gather (-1, no candidate: a row scored, not taken)
        gathered = np.take(sim.vectors, cand, axis=0)  # (a quarter faster than vectors[cand])
        scores = np.matmul(gathered, means[:, :, None])[:, :, 0] / sim.norms[cand]
        return best_candidates(scores, cand, excludes, tops)

    def exact_most_similar(self, sim: SimilarityIndex, positive, negative, topn: int):
        """``sim.most_similar(positive, negative, topn)`` (exact) through an IVF index's
        stored rows, or None where this cannot prove its answer (then ask ``sim``).

        Every stored row is scanned (two threads; int8 rows: a quarter of the snapshot's
        bytes) for ``k = max(2 w, w + extra)`` candidates, ``w = topn + len(excluded)``,
        ``extra`` :data:`PROOF_EXTRA` for the index's rows; they are re-scored exactly
        from the snapshot. A stored row's score is within the index's
        ``query_bound`` of its cosine, so a row outside the candidates scores at
        most the ``k``-th stored score + the bound: when that is below the ``w``-th
        exact score, the exact top ``w`` are all candidates and the answer is the
        snapshot's (its words and order; a score may differ from the full scan's in the
        last bit, as BLAS sums rows in blocks). Returns None when it is not below, or when
        two of the first ``w + 1`` exact scores are within float rounding of each other
        (the full scan breaks such ties as gensim does), and for HNSW indexes.
        """
        if self.params.kind != "ivf" or topn < 1:
            return None
        mean, exclude = sim.query_vector(positive, negative)
        want = topn + len(exclude)
        extra = PROOF_EXTRA["i8" if self.index.scales is not None else "float"]
        k = min(sim.count, max(2 * want, want + extra))
        rows, stored = self.index.scan_all(mean, k)
        if len(rows) < k:  # rows without a finite score: let the full scan decide
            return None
        rows = np.sort(rows)
        exact = np.dot(sim.vectors[rows], mean) / sim.norms[rows]
        order = np.argsort(-exact, kind="stable")[: want + 1]
        top = exact[order]
        bound = self.index.query_bound(mean)
        if k < sim.count and not stored[-1] + bound < top[min(want, len(top)) - 1]:
            return None
        if np.any(-np.diff(top) <= 4e-7 * np.abs(top[:-1]) + 1e-9):
            return None
        return [
            (sim.index_to_key[int(rows[o])], float(exact[o]))
            for o in order[:want]
            if int(rows[o]) not in exclude
        ][:topn]

    def _setting(self) -> tuple[str, int]:
        if self.params.kind == "ivf":
            return "nprobe", self.index.nprobe
        return "expansion_search", self.index.expansion_search

    def _oversample(self, value: int) -> None:
        self.params = replace(self.params, oversample=int(value))
        self.meta["params"] = asdict(self.params)

    def _set(self, value: int) -> None:
        name = "nprobe" if self.params.kind == "ivf" else "expansion_search"
        setattr(self.index, name, int(value))
        self.params = replace(self.params, **{name: int(value)})
        self.meta["params"] = asdict(self.params)

    def _ask(self, sim: SimilarityIndex, rows: np.ndarray) -> tuple[np.ndarray, float]:
        """Each row's approximate top 10 (row numbers) and the p50 seconds of a query."""
        out, times = [], []
        for r in rows:
            start = time.perf_counter()
            got = self.most_similar(sim, [int(r)], [], recall.K)
            times.append(time.perf_counter() - start)
            out.append([sim.get_index(w) for w, _ in got])
        return out, float(np.median(times)) if times else 0.0

    def meet_target(self, sim: SimilarityIndex, *, seed: int = 0) -> dict:
        """Set ``nprobe`` (IVF) or ``expansion_search`` (HNSW) to the least that meets
        ``params.recall`` on the model's own queries (module :mod:`~vecserve.search.recall`),
        and say whether it is met within the latency budget; the metadata to keep."""
        p = self.params
        target = p.recall
        tune, check = recall.query_sets(sim.count, p.recall_queries, seed)
        if len(check) == 0:
            return {
                "recall_at_10": 0.0,
                "recall_queries": 0,
                "target": {"recall": target, "met": False, "reason": "no rows"},
            }
        truth_tune = recall.exact_neighbours(sim, tune)
        truth = recall.exact_neighbours(sim, check)
        if p.kind == "ivf":
            curve = recall.ivf_recall_curve(sim, self.index, tune, truth_tune)
            ladder = list(range(1, self.index.nlist + 1))
            lows = [recall.strata_low(curve[:, i], tune, sim.count) for i in range(len(ladder))]
        else:
            ladder, lows = list(EF_LADDER), []
            for ef in ladder:
                self._set(ef)
                got, _ = self._ask(sim, tune)
                got = recall.per_query_recall(truth_tune, got)
                lows.append(recall.strata_low(got, tune, sim.count))
                if lows[-1] >= target:
                    break
        i = next((i for i, low in enumerate(lows) if low >= target), len(lows) - 1)
        held, approx_s, reason = None, 0.0, None
        if p.kind == "ivf":  # what the lists alone allow the held-aside queries
            reach = recall.ivf_recall_curve(sim, self.index, check, truth)
        while True:  # the held-aside queries must agree; if not, scan more
            if p.kind == "ivf" and ladder[i] / self.index.nlist / 2 > p.latency_budget:
                # a scan of stored rows reads at best a half to a quarter of an exact
                # one's bytes
                self._set(ladder[i])
                reason = (
                    f"recall@10 {target} needs nprobe >= {ladder[i]} of "
                    f"{self.index.nlist} lists ({ladder[i] / self.index.nlist:.0%} "
                    f"of the rows): no faster than {p.latency_budget:g} x an exact "
                    "query"
                )
                break
            self._set(ladder[i])
            got, approx_s = self._ask(sim, check)
            per_query = recall.per_query_recall(truth, got)
            held = recall.estimate(per_query)
            # met with 95% confidence on frequent and on other words, not merely on average
            if recall.strata_low(per_query, check, sim.count) >= target:
                break
            if (
                p.kind == "ivf"
                and self.params.oversample < MAX_OVERSAMPLE
                and recall.strata_low(reach[:, ladder[i] - 1], check, sim.count) >= target
            ):  # the lists hold the neighbours: the stored scores rank them too low
                self._oversample(2 * self.params.oversample)
                continue
            if i == len(ladder) - 1:
                name, value = self._setting()
                low = recall.strata_low(per_query, check, sim.count)
                reason = (
                    f"recall@10 {target} not reached ({held.recall:.3f}, 95% CI from "
                    f"{low:.3f} on the weaker of frequent and other words, at {name} {value})"
                )
                break
            i = min(len(ladder) - 1, max(i + 1, round(i * 1.25)))
        name, value = self._setting()
        exact_s = None
        if reason is None:
            exact_s = _exact_p50(sim, check[:EXACT_TIMED])
            budget = max(p.latency_budget * exact_s, LATENCY_FLOOR_S)
            if approx_s > budget:
                reason = (
                    f"recall@10 {target} needs {name} {value}: p50 "
                    f"{approx_s * 1e3:.2f} ms, over the budget of {budget * 1e3:.2f} ms "
                    f"({p.latency_budget:g} x exact {exact_s * 1e3:.2f} ms)"
                )
        if reason is not None:
            log.warning(
                "approximate index of %s: %s; approximate queries are answered exactly",
                sim.name or "model",
                reason,
            )
        return {
            "recall_at_10": round(held.recall, 4) if held is not None else 0.0,
            "recall_interval": [round(held.low, 4), round(held.high, 4)] if held else None,
            "recall_queries": len(check),
            "query_ms": round(approx_s * 1e3, 3) if held is not None else None,
            "exact_query_ms": round(exact_s * 1e3, 3) if exact_s is not None else None,
            "target": {
                "recall": target,
                "met": reason is None,
                "reason": reason,
                "latency_budget": p.latency_budget,
                "setting": {name: value}
                | ({"oversample": self.params.oversample} if p.kind == "ivf" else {}),
                "tuning_queries": len(tune),
            },
        }

    def measure_recall(self, sim: SimilarityIndex, *, queries: int = 200, seed: int = 0) -> dict:
        """recall@10 of :meth:`most_similar` against exact, over sampled vocabulary words."""
        n = min(queries, sim.count)
        if n == 0:
            return {"recall_at_10": 0.0, "recall_queries": 0}
        rows = np.random.default_rng(seed).choice(sim.count, size=n, replace=False)
        qs = [{"positive": [int(r)], "topn": 10} for r in rows]
        exact = [[w for w, _ in res] for res in sim.most_similar_batch(qs)]
        start = time.perf_counter()
        approx = [[w for w, _ in self.most_similar(sim, [int(r)], [], 10)] for r in rows]
        per_query = (time.perf_counter() - start) / n
        return {
            "recall_at_10": round(recall_at_k(exact, approx, 10), 4),
            "recall_queries": n,
            "query_ms": round(per_query * 1000, 3),
        }


def _exact_p50(sim: SimilarityIndex, rows: np.ndarray) -> float:
    """The median seconds of one exact ``most_similar(row)`` over ``rows``."""
    times = []
    for r in rows:
        start = time.perf_counter()
        sim.most_similar(int(r), topn=recall.K)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) if times else 0.0


def _build_hnsw(sim, p: AnnParams, threads: int, progress):
    from usearch.index import Index

    index = Index(
        ndim=sim.dim,
        metric="ip",
        dtype=p.dtype,
        connectivity=p.connectivity,
        expansion_add=p.expansion_add,
        expansion_search=p.expansion_search,
    )
    n = sim.count
    for lo in range(0, n, BUILD_CHUNK):
        hi = min(lo + BUILD_CHUNK, n)
        index.add(np.arange(lo, hi, dtype=np.uint64), _unit_rows(sim, lo, hi), threads=threads)
        if progress is not None:
            progress(hi, n)
    return index


def _build_ivf(sim, p: AnnParams, target: Path | None, threads: int, progress) -> IvfIndex:
    """Build the IVF file at ``target``; without one, in a temporary directory removed
    once the file is mapped."""
    tmpdir = None
    if target is None:
        tmpdir = Path(tempfile.mkdtemp(prefix="vecserve-ivf-"))
        target = tmpdir / p.filename
    nlist = p.nlist or default_nlist(sim.count)
    try:
        IvfIndex.build_arrays(
            sim.vectors,
            target,
            nlist=nlist,
            norms=sim.norms,
            threads=threads,
            chunk=BUILD_CHUNK,
            dtype=p.dtype,
            progress=progress,
        )
        return IvfIndex.open(target)
    finally:
        if tmpdir is not None:  # the mapping outlives the file's name
            shutil.rmtree(tmpdir, ignore_errors=True)


@dataclass
class BuildProgress:
    """How far an index build is: rows added so far, of ``total``; logged every 10%."""

    total: int
    done: int = 0
    started: float = 0.0
    file: Path | None = None  # where other processes read it (next to the index)

    def __post_init__(self) -> None:
        self.started = time.monotonic()
        self._write()

    def update(self, done: int, total: int) -> None:
        step = max(total // 10, 1)
        if done // step != self.done // step or done == total:
            d = self.as_dict(done)
            log.info(
                "ANN index: %d%% (%s/%s vectors), %s vectors/s, ETA %ss",
                round(100 * d["share"]),
                f"{done:,}",
                f"{total:,}",
                f"{d['vectors_per_s']:,.0f}",
                d["eta_s"],
            )
        self.done = done
        self._write()

    def _write(self) -> None:
        if self.file is None:
            return
        data = dict(self.as_dict(), pid=os.getpid(), updated=time.time())
        # progress is informative: never fail a build
        with contextlib.suppress(OSError), atomic_write(self.file, "w", fsync=False) as f:
            f.write(json.dumps(data))

    def remove(self) -> None:
        if self.file is not None:
            with contextlib.suppress(OSError):
                self.file.unlink()

    def as_dict(self, done: int | None = None) -> dict:
        done = self.done if done is None else done
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = done / elapsed
        eta = (self.total - done) / rate if rate > 0 else None
        return {
            "share": round(done / max(self.total, 1), 4),
            "done": done,
            "total": self.total,
            "vectors_per_s": round(rate, 1),
            "eta_s": None if eta is None else round(eta, 1),
        }


def _progress_file(path: Path) -> Path:
    return path.with_name(path.name + ".progress.json")


def _lock_file(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def disk_status(snapshot: str | os.PathLike, params: AnnParams | None = None) -> dict:
    """The ANN index of a snapshot directory as any process sees it on disk: ``ready``
    (with its build metadata and recall), ``building`` (with the builder's progress),
    or ``absent``. ``vecserve models info`` shows this.

    >>> disk_status("/nonexistent")["state"]
    'absent'
    """
    paths = [Path(snapshot) / p.filename for p in _kinds(params or AnnParams())]
    if params is None:  # any index there, the default's first (other recall targets next)
        paths += sorted(
            set(Path(snapshot).glob("ann-*.ivf"))
            | set(Path(snapshot).glob("ann-*.usearch")) - set(paths)
        )
    for path in paths:
        if path.exists():
            with contextlib.suppress(OSError, ValueError):
                meta = json.loads(path.with_suffix(".json").read_text())
                met = meta.get("target", {}).get("met", True)
                return {"state": "ready" if met else "exact-fallback", "path": str(path), **meta}
    for path in paths:
        with contextlib.suppress(OSError, ValueError):
            prog = json.loads(_progress_file(path).read_text())
            if pid_alive(int(prog.get("pid", 0))):
                return {"state": "building", "path": str(path), "progress": prog}
    return {"state": "absent", "path": str(paths[0])}


def _kinds(params: AnnParams) -> list[AnnParams]:
    """The concrete parameters ``params`` may resolve to (``auto``: IVF, then HNSW)."""
    kinds = ["ivf", "hnsw"] if params.kind == "auto" else [params.kind]
    return [replace(params, kind=k, dtype=params.dtype or DEFAULT_DTYPE[k]) for k in kinds]


class _BuildLock:
    """An exclusive ``flock`` on ``<index>.lock``: one builder per index among all the
    processes (workers, restarts, ``vecserve load --ann``) sharing the cache dir; the
    kernel drops it if the builder dies."""

    def __init__(self, path: Path):
        self.path = _lock_file(path)
        self.fd: int | None = None

    def acquire(self) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self.fd = fd
        return True

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the lock
            self.fd = None


def _open_or_drop(path: Path) -> AnnIndex | None:
    """Open ``path``; a damaged index (and its metadata) is removed, to be rebuilt."""
    try:
        return AnnIndex.open(path)
    except ValueError as exc:
        log.warning("%s; rebuilding it", exc)
        for stale in (path, path.with_suffix(".json")):
            stale.unlink(missing_ok=True)
        return None


class AnnManager:
    """Per-process source of ANN indexes: opens them from disk, builds them in the background.

    Parameters
    ----------
    enabled : bool
        When False, :meth:`get` only opens indexes that already exist on disk.
    params : AnnParams, optional
    on_ready : callable, optional
        Called as ``on_ready(model_name, index)`` when an index is opened or built (the
        service sets its recall gauge from it; this module knows nothing of metrics).
    """

    def __init__(
        self,
        *,
        enabled: bool = False,
        params: AnnParams | None = None,
        on_ready: Callable[[str, AnnIndex], None] | None = None,
    ):
        self.enabled = enabled
        self.params = params or AnnParams()
        self.on_ready = on_ready
        self._lock = threading.Lock()
        self._ready: dict[tuple[str, int], AnnIndex] = {}
        self._building: dict[tuple[str, int], threading.Thread] = {}
        self._progress: dict[tuple[str, int], BuildProgress] = {}
        self._failed: dict[tuple[str, int], str] = {}
        self._waiting: dict[tuple[str, int], Path] = {}  # built by another process

    def path_for(self, sim: SimilarityIndex) -> Path | None:
        if sim.path is None:
            return None
        return Path(sim.path) / self.params.resolved(sim.count).filename

    def ready_index(self, sim: SimilarityIndex) -> AnnIndex | None:
        """The index of ``sim`` if it is open and ready; never starts a build."""
        return self._ready.get((sim.name, sim.generation))

    def ready(self, sim: SimilarityIndex) -> bool:
        """Whether approximate queries of ``sim`` are answered now: its index is open and
        met its recall target."""
        ann = self.ready_index(sim)
        return ann is not None and ann.usable

    def approximate(self, sim: SimilarityIndex) -> AnnIndex | None:
        """:meth:`get`, if the index met its recall target (else exact answers)."""
        ann = self.get(sim)
        return ann if ann is not None and ann.usable else None

    def get(self, sim: SimilarityIndex, *, wait: bool = False) -> AnnIndex | None:
        """The ANN index of ``sim``: open from disk, or (if enabled) start building it.

        Returns None while it is being built unless ``wait``; callers then answer exactly.
        """
        key = (sim.name, sim.generation)
        ann = self._ready.get(key)
        if ann is not None:
            return ann
        path = self.path_for(sim)
        with self._lock:
            if key in self._ready:
                return self._ready[key]
            try:
                ann = AnnIndex.open(path) if path is not None else None
            except ValueError as exc:  # damaged: the builder thread replaces it
                ann = None
                if not self.enabled and key not in self._failed:
                    log.error("%s; not used (the ANN index is disabled here)", exc)
                    self._failed[key] = str(exc)
            if ann is not None and self.enabled and self._untargeted(ann):
                log.info(
                    "%s was built to a fixed setting, before recall targets; "
                    "rebuilding it to recall@10 %s",
                    path,
                    self.params.recall,
                )
                for stale in (path, path.with_suffix(".json")):
                    stale.unlink(missing_ok=True)
                ann = None
            if ann is not None:
                return self._keep(key, ann)
            if not self.enabled or key in self._failed:
                return None
            thread = self._building.get(key)
            if thread is None:
                thread = threading.Thread(
                    target=self._build, args=(sim, key, path), daemon=True, name="vecserve-ann"
                )
                self._building[key] = thread
                thread.start()
        if wait:
            thread.join()
            return self._ready.get(key)
        return None

    def _untargeted(self, ann: AnnIndex) -> bool:
        """Whether ``ann`` has no recall target where this manager sets one (an index
        built before targets existed: its fixed ``nprobe`` may miss any target)."""
        return self.params.recall is not None and "target" not in ann.meta

    def _keep(self, key, ann: AnnIndex) -> AnnIndex:
        self._ready = {k: v for k, v in self._ready.items() if k[0] != key[0]}
        self._ready[key] = ann
        if self.on_ready is not None:
            self.on_ready(key[0], ann)
        return ann

    def _build(self, sim: SimilarityIndex, key, path: Path | None) -> None:
        lock = _BuildLock(path) if path is not None else None
        try:
            while lock is not None and not lock.acquire():
                # another process builds this index: wait for it (or for its lock to go)
                self._waiting[key] = path
                time.sleep(WAIT_POLL)
                ann = None
                with contextlib.suppress(ValueError):  # a damaged one: wait for the lock
                    ann = AnnIndex.open(path)
                if ann is not None:
                    with self._lock:
                        self._keep(key, ann)
                    return
            self._waiting.pop(key, None)
            if path is not None and (ann := _open_or_drop(path)) is not None:
                with self._lock:  # built by the process we waited for
                    self._keep(key, ann)
                return
            log.info("building the ANN index of %s generation %s", *key)
            prog = self._progress[key] = BuildProgress(
                total=sim.count, file=_progress_file(path) if path is not None else None
            )
            try:
                ann = AnnIndex.build(sim, path=path, params=self.params, progress=prog.update)
            finally:
                prog.remove()
            with self._lock:
                self._keep(key, ann)
            log.info("ANN index of %s: recall@10 %.3f", key[0], ann.recall_at_10)
        except Exception as exc:
            log.error("building the ANN index of %s failed: %s", key[0], exc)
            self._failed[key] = str(exc)
        finally:
            if lock is not None:
                lock.release()
            self._waiting.pop(key, None)
            self._building.pop(key, None)
            self._progress.pop(key, None)

    def status(self, sim: SimilarityIndex | None) -> dict:
        """What ``GET /models/{name}`` shows under ``ann``."""
        out: dict = {"enabled": self.enabled, "library": self.params.library}
        if sim is None:
            out["state"] = "exact index not loaded in this process"
            return out
        out["library"] = self.params.resolved(sim.count).library
        key = (sim.name, sim.generation)
        ann = self._ready.get(key)
        if ann is None:
            with contextlib.suppress(Exception):
                ann = self.get(sim)
        if ann is not None:
            state = "ready" if ann.usable else "exact-fallback"
            out.update(state=state, **{k: v for k, v in ann.meta.items() if k != "name"})
        elif key in self._building:
            out["state"] = "building"
            prog = self._progress.get(key)
            if prog is not None:
                out["progress"] = prog.as_dict()
            elif key in self._waiting:  # another process builds it: its progress file
                theirs = disk_status(self._waiting[key].parent, self.params)
                if "progress" in theirs:
                    out["progress"] = theirs["progress"]
                out["builder"] = "another process"
        elif key in self._failed:
            out.update(state="failed", error=self._failed[key])
        else:
            out["state"] = "absent"
        return out

    def pending(self, sim: SimilarityIndex) -> str:
        """Why ``sim`` has no approximate index to answer with (its ``status`` state)."""
        if not self.enabled and self.get(sim) is None:
            return "disabled"
        status = self.status(sim)
        if status["state"] == "exact-fallback":
            return f"exact-fallback: {status['target']['reason']}"
        return status["state"]

    def close(self) -> None:
        self._ready.clear()
