"""SimilarityIndex: exact, gensim-identical search over one generation's snapshot (what
is stored and why, the gensim quirks kept: :mod:`vecserve.search.snapshot`).

Its rows, norms and vocabulary are arrays (memory maps of a snapshot directory, or in
memory); :meth:`SimilarityIndex.build` and :meth:`SimilarityIndex.open` get them from the
directory :mod:`vecserve.search.snapshot.files` writes and reads.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from numbers import Integral
from pathlib import Path

import numpy as np

from ... import config
from ...errors import SnapshotDamaged
from ...fileio import atomic_dir
from ...store import ModelInfo, Store
from .. import i8rows
from ..arith import KEY_TYPES as _KEY_TYPES
from ..arith import NO_COSMUL_INPUT, REAL, ensure_list, mean_vector, row_norms, split_weights
from ..exact import ExactScan, gensim_argsort
from ..vocab import SharedVocab
from . import files

__all__ = ["SimilarityIndex"]

log = logging.getLogger(__name__)


class SimilarityIndex:
    """Exact nearest-neighbour search over one generation of a model, gensim-identical.

    Parameters
    ----------
    index_to_key : list of str or SharedVocab
        Tokens in model order (a list is turned into an in-memory :class:`SharedVocab`).
    vectors : numpy.ndarray
        ``(count, dim)`` float32 (usually a read-only memory map).
    norms : numpy.ndarray, optional
        Row norms; computed when omitted.
    name, generation : str, int
        Which model generation this is a snapshot of.

    Examples
    --------
    >>> import numpy as np
    >>> ix = SimilarityIndex.from_arrays(["x", "y", "z"], np.array(
    ...     [[1, 0], [1, 1], [0, 1]], dtype=np.float32))
    >>> ix.most_similar(positive=["x"], negative=["z"], topn=2)
    [('y', 0.0)]
    """

    def __init__(
        self,
        index_to_key: Sequence[str],
        vectors: np.ndarray,
        norms: np.ndarray | None = None,
        *,
        name: str = "",
        generation: int = 0,
        path: Path | None = None,
    ):
        if not isinstance(index_to_key, SharedVocab):
            index_to_key = SharedVocab.from_words(index_to_key)
        self.index_to_key = index_to_key
        self.key_to_index = index_to_key.key_to_index
        self.vectors = vectors
        self.norms = row_norms(vectors) if norms is None else norms
        rows_file = None if path is None else Path(path) / i8rows.FILE
        self.exact = ExactScan(self.vectors, self.norms, rows_file=rows_file)
        self.name = name
        self.generation = generation
        self.path = path

    @classmethod
    def from_arrays(
        cls, index_to_key: Sequence[str], vectors: np.ndarray, *, name: str = "", generation=0
    ) -> SimilarityIndex:
        """An in-memory index (tests, small models)."""
        return cls(
            list(index_to_key),
            np.asarray(vectors, dtype=REAL),
            name=name,
            generation=generation,
        )

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    @property
    def count(self) -> int:
        return len(self.index_to_key)

    def __len__(self) -> int:
        return len(self.index_to_key)

    def __repr__(self) -> str:
        return f"<SimilarityIndex {self.name} g{self.generation}: {self.count} x {self.dim}>"

    # -- building from Redis --------------------------------------------------------------

    @classmethod
    def build(
        cls,
        store: Store,
        info: ModelInfo,
        *,
        cache_dir: str | os.PathLike | None = None,
        chunk: int = files.BUILD_CHUNK,
    ) -> SimilarityIndex:
        """The snapshot of generation ``info``: reuse it from disk, or stream it out of Redis.

        Memory stays bounded by ``chunk`` rows while building; the result is memory-mapped.
        Raises StoreUnavailable if the generation disappears while it is being read.
        """
        root = Path(cache_dir) if cache_dir is not None else files.default_cache_dir()
        final = root / files.dir_name(info)
        if (final / "vectors.npy").exists():
            try:
                return cls.open(final, name=info.name, generation=info.generation)
            except SnapshotDamaged as exc:
                log.warning("%s; rebuilding it", exc)
                if exc.part == "vocabulary":  # the vectors are whole: rewrite the words only
                    files.rewrite_vocab(store, info, final, chunk)
                else:
                    shutil.rmtree(final, ignore_errors=True)
        if not (final / "vectors.npy").exists():
            config.make_dir(root, "cache dir", "$VECSERVE_CACHE_DIR")  # one line if it cannot be
            with atomic_dir(final) as tmp:  # another builder's, if first, is used
                files.write_snapshot(store, info, tmp, chunk)
            files.remove_older(root, info)
        return cls.open(final, name=info.name, generation=info.generation)

    @classmethod
    def open(cls, path: str | os.PathLike, *, name: str = "", generation: int = 0):
        """Memory-map a snapshot directory written by :meth:`build`.

        Raises :class:`~vecserve.errors.SnapshotDamaged` (one line: which file, which
        part, what is wrong) if a file is missing or damaged.
        """
        path = Path(path)
        arrays = []
        for name_ in ("vectors.npy", "norms.npy"):
            try:
                arrays.append(np.load(path / name_, mmap_mode="r").view(np.ndarray))
            except (ValueError, EOFError) as exc:
                raise SnapshotDamaged(path / name_, "arrays", str(exc)) from None
        vectors, norms = arrays
        vocab = files.open_vocab(path)
        if not (vectors.ndim == 2 and norms.shape == (len(vectors),) == (len(vocab),)):
            raise SnapshotDamaged(
                path / files.VOCAB_FILE,
                "vocabulary",
                f"{len(vocab)} words for {vectors.shape} vectors and {norms.shape} norms",
            )
        return cls(vocab, vectors, norms, name=name, generation=generation, path=path)

    # -- lookups --------------------------------------------------------------------------

    def get_index(self, key, default=None) -> int:
        """Position of ``key`` (an int is a position itself), as gensim's ``get_index``."""
        val = self.key_to_index.get(key, -1)
        if val >= 0:
            return val
        if isinstance(key, (int, np.integer)) and 0 <= key < len(self.index_to_key):
            return int(key)
        if default is not None:
            return default
        raise KeyError(f"Key '{key}' not present")

    def has_index_for(self, key) -> bool:
        return self.get_index(key, -1) >= 0

    def __contains__(self, key) -> bool:
        return self.has_index_for(key)

    def get_vector(self, key, norm: bool = False) -> np.ndarray:
        index = self.get_index(key)
        return self.vectors[index] / self.norms[index] if norm else self.vectors[index]

    # -- gensim's whole-matrix queries ----------------------------------------------------

    def query_vector(self, positive=None, negative=None) -> tuple[np.ndarray, list[int]]:
        """Unit mean vector of a most_similar query and the indices of its input keys."""
        keys, weight = split_weights(positive, negative)
        normed = {
            k: self.get_vector(k, norm=True)
            for k in keys
            if isinstance(k, _KEY_TYPES) and self.has_index_for(k)
        }
        mean = mean_vector(keys, weight, normed, self.dim)
        all_keys = [self.get_index(k) for k in keys if isinstance(k, _KEY_TYPES) and k in normed]
        return mean, all_keys

    def query_vectors(self, asked) -> tuple[np.ndarray, list[list[int]]]:
        """:meth:`query_vector` of each ``(positive, negative)`` of ``asked``: the unit
        means (``len(asked) x dim`` float32, each the same floats) and the excluded rows.

        A query of one word or position (the common case) is done for all such at once, in
        gensim's own operations: the word's row divided by its norm, widened to float64,
        divided by BLAS's ``nrm2`` of it and narrowed back (``matutils.unitvec``); anything
        else, and a row whose norm is zero, goes through :meth:`query_vector`."""
        from gensim.matutils import blas_nrm2

        means = np.empty((len(asked), self.dim), dtype=np.float32)
        excludes: list[list[int]] = [[] for _ in asked]
        plain, plain_rows = [], []
        lookup, count = self.key_to_index.get, self.count
        for j, (positive, negative) in enumerate(asked):
            if not negative and isinstance(positive, (list, tuple)) and len(positive) == 1:
                word = positive[0]
                if isinstance(word, str):
                    row = lookup(word)
                elif isinstance(word, (int, np.integer)) and 0 <= word < count:
                    row = int(word)  # a position, as get_index takes it
                else:
                    row = None
                if row is not None and self.norms[row] > 0:
                    plain.append(j)
                    plain_rows.append(row)
                    continue
            means[j], excludes[j] = self.query_vector(positive, negative)
        if len(plain) == 1:  # the same operations on one row, without index arrays
            row = plain_rows[0]
            unit = (self.vectors[row] / self.norms[row]).astype(np.float64)
            length = blas_nrm2(unit)
            if length > 0:
                means[plain[0]] = unit * (1.0 / length)
                excludes[plain[0]] = [row]
                return means, excludes
        if plain:
            idx = np.asarray(plain_rows, dtype=np.int64)
            unit = (self.vectors[idx] / self.norms[idx][:, None]).astype(np.float64)
            lengths = [blas_nrm2(u) for u in unit]
            if min(lengths) > 0:
                means[plain] = unit * (1.0 / np.asarray(lengths))[:, None]
            else:  # a zero mean: gensim keeps it as it is
                for j in plain:
                    means[j], _ = self.query_vector(*asked[j])
            for j, row in zip(plain, plain_rows, strict=True):
                excludes[j] = [row]
        return means, excludes

    def most_similar(
        self,
        positive=None,
        negative=None,
        topn=10,
        clip_start=0,
        clip_end=None,
        restrict_vocab=None,
    ):
        """gensim's ``KeyedVectors.most_similar``: ``[(key, cosine), ...]`` best first.

        ``topn=None`` returns the similarities of every key in the clip range, as an array.
        """
        if isinstance(topn, Integral) and topn < 1:
            return []
        clip_end = clip_end or len(self.vectors)
        if restrict_vocab:
            clip_start = 0
            clip_end = restrict_vocab
        mean, all_keys = self.query_vector(positive, negative)
        dists = self.exact.scores(mean, clip_start, clip_end)
        return self._top(dists, topn, all_keys, clip_start)

    def _top(self, dists, topn, exclude, offset=0):
        if not topn:
            return dists
        best = ExactScan.top_rows(dists, topn + len(exclude))
        result = [
            (self.index_to_key[sim + offset], float(dists[sim]))
            for sim in best
            if (sim + offset) not in exclude
        ]
        return result[:topn]

    def similar_by_key(self, key, topn=10, restrict_vocab=None):
        return self.most_similar(positive=[key], topn=topn, restrict_vocab=restrict_vocab)

    similar_by_word = similar_by_key

    def similar_by_vector(self, vector, topn=10, restrict_vocab=None):
        return self.most_similar(positive=[vector], topn=topn, restrict_vocab=restrict_vocab)

    def most_similar_cosmul(self, positive=None, negative=None, topn=10, restrict_vocab=None):
        """gensim's 3CosMul; like gensim 4.4, ``restrict_vocab`` is accepted and ignored."""
        if isinstance(topn, Integral) and topn < 1:
            return []
        positive = ensure_list(positive)
        negative = ensure_list(negative)
        all_words = {
            self.get_index(w)
            for w in positive + negative
            if not isinstance(w, np.ndarray) and w in self.key_to_index
        }
        positive = [self.get_vector(w, norm=True) if isinstance(w, str) else w for w in positive]
        negative = [self.get_vector(w, norm=True) if isinstance(w, str) else w for w in negative]
        if not positive:
            raise ValueError(NO_COSMUL_INPUT)
        pos = [((1 + np.dot(self.vectors, t) / self.norms) / 2) for t in positive]
        neg = [((1 + np.dot(self.vectors, t) / self.norms) / 2) for t in negative]
        dists = np.prod(pos, axis=0) / (np.prod(neg, axis=0) + 0.000001)
        if not topn:
            return dists
        best = gensim_argsort(dists, topn=topn + len(all_words), reverse=True)
        result = [(self.index_to_key[s], float(dists[s])) for s in best if s not in all_words]
        return result[:topn]

    def distances(self, word_or_vector, other_words=()) -> np.ndarray:
        """Cosine distances from a key or vector to ``other_words`` (default: every key)."""
        if isinstance(word_or_vector, _KEY_TYPES):
            vec = self.get_vector(word_or_vector)
        else:
            vec = word_or_vector
        if not other_words:
            others, others_norms = self.vectors, self.norms
        else:
            idx = [self.get_index(w) for w in other_words]
            others = self.vectors[idx]
            others_norms = row_norms(others)
        return 1 - np.dot(others, vec) / (np.linalg.norm(vec) * others_norms)

    def closer_than(self, key1, key2) -> list[str]:
        """All keys closer to ``key1`` than ``key2`` is, in vocabulary order."""
        all_distances = self.distances(key1)
        e1 = self.get_index(key1)
        e2 = self.get_index(key2)
        closer = np.where(all_distances < all_distances[e2])[0]
        return [self.index_to_key[i] for i in closer if i != e1]

    def rank(self, key1, key2) -> int:
        return len(self.closer_than(key1, key2)) + 1

    # -- many queries, one multiply -------------------------------------------------------

    def most_similar_batch(self, queries: Sequence[dict]) -> list:
        """Answer many ``most_similar`` queries at once: each answer is the one
        :meth:`most_similar` gives (words, order and scores), the whole-matrix ones from
        one blocked ``sgemm`` for all of them (:meth:`ExactScan.batch`).

        Each query is a dict of most_similar's arguments (``positive``, ``negative``,
        ``topn``, ``restrict_vocab``; ``cosmul=True`` runs most_similar_cosmul alone);
        ``restrict_vocab`` and ``topn=None`` queries are answered one by one.

        >>> import numpy as np
        >>> ix = SimilarityIndex.from_arrays(["a", "b", "c"], np.eye(3, dtype=np.float32))
        >>> ix.most_similar_batch([{"positive": ["a"], "topn": 1}, {"positive": ["b"]}])[0]
        [('b', 0.0)]
        """
        results: list = [None] * len(queries)
        plain = []
        for i, q in enumerate(queries):
            q = dict(q)
            if q.pop("cosmul", False):
                results[i] = self.most_similar_cosmul(**q)
            elif not isinstance(q.get("topn", 10), Integral) or q.get("restrict_vocab"):
                results[i] = self.most_similar(**q)
            elif q.get("topn", 10) < 1:
                results[i] = []
            else:
                plain.append((i, q.get("positive"), q.get("negative"), int(q.get("topn", 10))))
        if plain:
            means, excludes = self.query_vectors([(pos, neg) for _, pos, neg, _ in plain])
            wants = [p[3] + len(ex) for p, ex in zip(plain, excludes, strict=True)]
            found = self.exact.batch(means, wants)
            asked = zip(plain, means, excludes, found, strict=True)
            for (i, *_, topn), mean, exclude, got in asked:
                if got is None:  # not proven: the single query's own path
                    results[i] = self._top(self.exact.scores(mean), topn, exclude)
                    continue
                rows, scores = got
                pairs = zip(rows.tolist(), scores.tolist(), strict=True)
                kept = [(self.index_to_key[r], s) for r, s in pairs if r not in exclude]
                results[i] = kept[:topn]
        return results

    # -- gensim view ----------------------------------------------------------------------

    def as_keyedvectors(self, limit: int | None = None):
        """A gensim ``KeyedVectors`` over the first ``limit`` rows, sharing the memory map."""
        from gensim.models import KeyedVectors

        n = len(self.index_to_key) if limit is None else min(limit, len(self.index_to_key))
        kv = KeyedVectors(self.dim, count=0, dtype=REAL)
        kv.index_to_key = self.index_to_key[:n]  # a list (the slice decodes the words)
        kv.key_to_index = {k: i for i, k in enumerate(kv.index_to_key)}
        kv.vectors = self.vectors[:n]
        kv.norms = self.norms[:n]
        kv.expandos = {}
        return kv
