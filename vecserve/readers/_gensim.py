"""gensim ``KeyedVectors.save()`` files: a pickle, plus ``.npy`` files for big arrays.

gensim is imported only here, and only when such a file is opened. The vectors are
memory-mapped (``mmap="r"``), so a batch is the only copy in memory; rows come in
``index_to_key`` order, with the ``count`` attribute when the file has one. A saved
``FastTextKeyedVectors`` (or ``FastText`` model) brings its n-gram bucket rows
(``vectors_ngrams``) and settings too, so words it never saw get vectors from Redis as
from gensim. A pickle can run code when loaded: open only gensim files you trust.
"""

from __future__ import annotations

import glob
from collections.abc import Callable, Generator, Iterator
from typing import Any

import numpy as np

from ..errors import CorruptVectorFile, UnknownFormat, VectorFileError
from ._types import ResumePoint, VectorBatch

__all__ = ["gensim_batches", "gensim_subwords", "load_keyed_vectors", "side_files"]


def load_keyed_vectors(path: str, *, compressed: bool) -> Any:
    """The ``KeyedVectors`` in ``path`` (or the ``.wv`` of a saved model)."""
    try:
        from gensim.models import KeyedVectors
    except ImportError as exc:  # pragma: no cover - gensim is a dependency
        raise UnknownFormat(path, "reading gensim files needs gensim installed") from exc
    try:
        obj = KeyedVectors.load(path, mmap=None if compressed else "r")
    except FileNotFoundError as exc:
        raise VectorFileError(path, f"a file it refers to is missing: {exc.filename}") from exc
    except Exception as exc:  # unpickling arbitrary bytes can raise anything
        raise CorruptVectorFile(path, f"not a loadable gensim KeyedVectors file: {exc!r}") from exc
    kv = obj if isinstance(obj, KeyedVectors) else getattr(obj, "wv", None)
    if not isinstance(kv, KeyedVectors):
        raise UnknownFormat(path, f"a pickled {type(obj).__name__}, not gensim KeyedVectors")
    return kv


def side_files(path: str) -> list[str]:
    """The ``.npy`` files gensim stored next to ``path`` (``PATH.vectors.npy``, ...)."""
    return sorted(glob.glob(glob.escape(path) + ".*.npy"))


def gensim_batches(
    kv: Any, *, count: int, records: int, batch_size: int, progress: list[int]
) -> Generator[VectorBatch, None, None]:
    """Rows ``records`` to ``count`` of ``kv``; ``progress[0]`` follows the rows done."""
    counts = kv.expandos.get("count") if isinstance(getattr(kv, "expandos", None), dict) else None
    for i in range(records, count, batch_size):
        j = min(i + batch_size, count)
        tokens = [k if isinstance(k, str) else str(k) for k in kv.index_to_key[i:j]]
        vectors = np.array(kv.vectors[i:j], dtype=np.float32, order="C")
        batch_counts = None
        if counts is not None:
            try:
                batch_counts = np.asarray(counts[i:j]).astype(np.int64)
            except (TypeError, ValueError):  # a count of None (gensim's "unknown")
                batch_counts = None
        progress[0] = j
        yield VectorBatch(tokens, vectors, batch_counts, ResumePoint(j, j))


def gensim_subwords(
    kv: Any,
) -> tuple[int, int, int, Callable[[int], Iterator[tuple[int, np.ndarray]]]] | None:
    """``(min_n, max_n, bucket, rows)`` of a ``FastTextKeyedVectors`` with n-grams, else None.

    ``rows(batch_size)`` yields ``(first bucket, float32 rows)`` of ``vectors_ngrams``. A
    model without n-grams (gensim sets ``bucket`` 0 when ``max_n < min_n``) has none: its
    unknown words are KeyErrors, as in gensim.
    """
    bucket = int(getattr(kv, "bucket", 0) or 0)
    ngrams = getattr(kv, "vectors_ngrams", None)
    if not bucket or ngrams is None or len(ngrams) != bucket:
        return None

    def rows(batch_size: int) -> Iterator[tuple[int, np.ndarray]]:
        for lo in range(0, bucket, batch_size):
            yield lo, np.array(ngrams[lo : lo + batch_size], dtype=np.float32, order="C")

    return int(kv.min_n), int(kv.max_n), bucket, rows
