"""One approximate index, :class:`AnnIndex`: built (:mod:`.build`, its recall measured or
tuned by :mod:`.tuning`), saved beside its typed metadata (:mod:`.meta`) or mapped from
disk, and queried: candidates from the index, re-scored exactly against the snapshot."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from ...fileio import atomic_path, atomic_write
from .._exact import best_candidates
from ..ivf import IvfIndex
from ..snapshot import SimilarityIndex
from . import build as builders
from . import tuning
from .meta import BuildMeta
from .params import PROOF_EXTRA, AnnParams

__all__ = ["AnnIndex"]


class AnnIndex:
    """An approximate index over the unit rows of one :class:`SimilarityIndex` (keys = row
    numbers): an HNSW graph (usearch) or an :class:`~vecserve.search.ivf.IvfIndex`.

    Parameters
    ----------
    index : usearch.index.Index or IvfIndex
        Built, or mapped from a file.
    meta : BuildMeta
        Build parameters, build time, index bytes, recall@10 measured at build (a ``dict``
        of the metadata's JSON is read as :meth:`BuildMeta.from_json` reads it).
    """

    def __init__(self, index, meta: BuildMeta | dict):
        self.index = index
        self.meta = meta if isinstance(meta, BuildMeta) else BuildMeta.from_json(meta)
        name = self.params.setting_name  # the stored search effort, on the index
        setattr(self.index, name, getattr(self.params, name))

    @property
    def params(self) -> AnnParams:
        return self.meta.params

    @property
    def recall_at_10(self) -> float:
        return self.meta.recall_at_10

    @property
    def usable(self) -> bool:
        """Whether approximate queries may use this index: it met its recall target
        within its latency budget (or was built to fixed settings). An IVF index that
        did not still answers exact queries (:meth:`exact_most_similar`)."""
        return self.meta.usable

    @property
    def fallback_reason(self) -> str | None:
        return self.meta.fallback_reason

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
            size = ann.index.nbytes if p.kind == "ivf" else tmp.stat().st_size
            ann.meta = replace(ann.meta, index_bytes=size)
            # the metadata first: whoever finds the index finds its metadata
            with atomic_write(path.with_suffix(".json"), "w", fsync=False) as f:
                f.write(json.dumps(ann.meta.to_json(), indent=1))
        return cls.open(path) or ann

    @classmethod
    def _build(cls, sim, p: AnnParams, target: Path | None, threads: int, progress) -> AnnIndex:
        """The index (an IVF one built into ``target``), its recall measured or tuned."""
        start = time.perf_counter()
        if p.kind == "ivf":
            index = builders.build_ivf(sim, p, target, threads, progress)
        else:
            index = builders.build_hnsw(sim, p, threads, progress)
        ann = cls(
            index,
            BuildMeta(
                library=builders.library_version(p.kind),
                params=p,
                name=sim.name,
                generation=sim.generation,
                rows=sim.count,
                nlist=index.nlist if p.kind == "ivf" else None,
                build_seconds=round(time.perf_counter() - start, 3),
            ),
        )
        if p.recall is None:
            measured = tuning.measure(ann, sim, queries=p.recall_queries)
        else:
            measured = tuning.meet_target(ann, sim)
        ann.meta = measured.into(ann.meta)
        return ann

    @classmethod
    def open(cls, path: str | os.PathLike) -> AnnIndex | None:
        """Memory-map a saved index (shared by every process that opens it); None if absent.

        Raises ``ValueError`` (one line: which file, what is wrong) if the file is damaged.
        """
        path = Path(path)
        try:
            meta = BuildMeta.from_json(json.loads(path.with_suffix(".json").read_text()))
        except (OSError, ValueError, KeyError, TypeError):
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
        if index is None or (meta.rows >= 0 and len(index) != meta.rows):
            raise ValueError(
                f"{path}: damaged HNSW index (not the {meta.rows} rows its metadata names)"
            )
        return cls(index, meta)

    # -- the search effort, as tuning sets it --------------------------------------------

    def setting(self) -> tuple[str, int]:
        """The search effort now: ``("nprobe", n)`` or ``("expansion_search", ef)``."""
        name = self.params.setting_name
        return name, getattr(self.index, name)

    def set_setting(self, value: int) -> None:
        name = self.params.setting_name
        setattr(self.index, name, int(value))
        self.meta = self.meta.with_params(replace(self.params, **{name: int(value)}))

    def set_oversample(self, value: int) -> None:
        self.meta = self.meta.with_params(replace(self.params, oversample=int(value)))

    def meet_target(self, sim: SimilarityIndex, *, seed: int = 0) -> None:
        """Tune to ``params.recall`` (:func:`.tuning.meet_target`), kept in :attr:`meta`."""
        self.meta = tuning.meet_target(self, sim, seed=seed).into(self.meta)

    def measure_recall(self, sim: SimilarityIndex, *, queries: int = 200, seed: int = 0) -> None:
        """Measure recall@10 at the fixed settings (:func:`.tuning.measure`), kept in
        :attr:`meta`."""
        self.meta = tuning.measure(self, sim, queries=queries, seed=seed).into(self.meta)

    # -- queries --------------------------------------------------------------------------
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
