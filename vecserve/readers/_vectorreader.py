"""`VectorReader`: an open vector file, its metadata at once and its batches on iteration
(duplicates dropped on the way), the n-gram rows of a fastText model (`_Subwords`), and
the batch size left to the reader (`batch_for`). The openers that make one are in
``_reader``."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Generator, Iterable, Iterator
from types import TracebackType

import numpy as np

from ._dedup import TokenSet
from ._source import Source
from ._types import ResumePoint, VectorBatch

__all__ = ["BATCH_BYTES", "VectorReader", "batch_for"]

logger = logging.getLogger("vecserve.readers")

_MAX_DUP_LOGGED = 20  # duplicates logged one by one per file; the others are only counted


class VectorReader:
    """An open vector file: ``format``, ``dim``, ``count`` now, `VectorBatch` es on iteration.

    Made by `open_vectors`; iterate it once. ``count`` is the number of records the
    header declares, after ``limit`` (None for GloVe, which has no header);
    ``size_bytes`` the on-disk size (compressed size for ``.gz``/``.bz2``; for gensim
    files including their ``.npy`` side files) and ``bytes_read`` how much of it was
    consumed, for a progress bar. ``duplicates`` counts the tokens dropped as repeats.

    Examples
    --------
    >>> with open_vectors("vectors.vec") as reader:  # doctest: +SKIP
    ...     print(reader.format, reader.dim, reader.count)
    ...     n = sum(len(batch.tokens) for batch in reader)
    fasttext 300 2000000
    """

    def __init__(
        self,
        src: Source,
        start: _Start,
        *,
        format: str,
        dim: int,
        count: int | None,
        extra_files: list[str] | None = None,
        bytes_read: Callable[[], int] | None = None,
        subwords: _Subwords | None = None,
    ):
        self.path = src.path
        self.format = format
        self.dim = dim
        self.count = count
        self.duplicates = 0
        self._src = src
        self._start = start
        self._seen: TokenSet | None = None
        self._batches: Generator[VectorBatch, None, None] | None = None
        self._extra_files = extra_files or []
        self.size_bytes = (
            None
            if src.size_bytes is None
            else src.size_bytes + sum(os.path.getsize(f) for f in self._extra_files)
        )
        self._bytes_read = bytes_read or (lambda: src.bytes_read)
        self.subwords = subwords

    @property
    def bytes_read(self) -> int:
        """On-disk bytes consumed so far."""
        return self._bytes_read()

    def resume_from(self, point: ResumePoint | None, seen_tokens: Iterable[str] = ()) -> None:
        """Continue after the batch whose ``resume`` is ``point`` (None: from the first
        record), ``seen_tokens`` being the tokens already loaded (duplicate detection).

        Called at most once, before iterating (iterating first reads from the start): a
        loader opens the file once, learns its ``dim`` and ``count``, then asks where to
        go on from. The bytes before ``point`` are read for the checksum, not parsed.
        """
        if self._batches is not None:
            raise RuntimeError(f"{self.path}: resume_from after reading began")
        batches, self._seen = self._start(point, seen_tokens)
        self._batches = self._dedup(batches) if self._seen is not None else batches

    def __iter__(self) -> Iterator[VectorBatch]:
        if self._batches is None:
            self.resume_from(None)
        assert self._batches is not None
        return self._batches

    def _dedup(self, batches: Iterator[VectorBatch]) -> Generator[VectorBatch, None, None]:
        """Drop tokens seen before (in this file or ``seen_tokens``), keeping the first."""
        assert self._seen is not None
        for batch in batches:
            raw = batch.raw  # the tokens as the store writes them: no decode on the way
            keep = self._seen.add_new(raw)
            if keep is not None:
                first = batch.resume.records - len(raw) + 1  # vector number of [0]
                for i in sorted(set(range(len(raw))) - set(keep.tolist())):
                    self.duplicates += 1
                    if self.duplicates <= _MAX_DUP_LOGGED:
                        logger.warning(
                            "duplicate word %r in %s (vector #%d), ignoring all but the first%s",
                            batch.tokens[i],  # (a batch with a duplicate is decoded)
                            self.path,
                            first + i,
                            "; further duplicates are counted, not logged"
                            if self.duplicates == _MAX_DUP_LOGGED
                            else "",
                        )
                batch = batch.take(keep)
            if len(batch.vectors):
                yield batch
        if self.duplicates:
            logger.info("%s: %d duplicate words ignored", self.path, self.duplicates)

    def sha256(self) -> str:
        """Hex sha256 of the whole on-disk file (then of a gensim file's ``.npy`` files).

        Reads whatever iteration has not (the rest after ``limit``, say) without
        disturbing it.
        """
        return self._src.sha256(self._extra_files)

    def close(self) -> None:
        """Close the file; iteration stops."""
        if self._batches is not None:
            self._batches.close()
        if self.subwords is not None:
            self.subwords.close()
        self._src.close()

    def __enter__(self) -> VectorReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<VectorReader {self.format} {self.path!r} dim={self.dim} count={self.count}>"


#: ``start(resume, seen_tokens)``: a format's batches from ``resume`` on, and the set of
#: tokens seen (None where the format's tokens are unique).
_Start = Callable[
    [ResumePoint | None, Iterable[str]],
    tuple[Generator[VectorBatch, None, None], TokenSet | None],
]


class _Subwords:
    """A fastText model's n-gram settings and bucket rows (``VectorReader.subwords``).

    ``min_n``, ``max_n`` and ``bucket`` as in gensim's ``FastTextKeyedVectors``;
    `batches` yields ``(first bucket, float32 rows)`` over all ``bucket`` rows, read by
    ``rows(batch_size)`` (from a native ``.bin`` or a gensim model's ``vectors_ngrams``).
    """

    def __init__(
        self,
        min_n: int,
        max_n: int,
        bucket: int,
        rows: Callable[[int], Iterator[tuple[int, np.ndarray]]],
        close: Callable[[], None] = lambda: None,
    ):
        self.min_n, self.max_n, self.bucket = min_n, max_n, bucket
        self._rows = rows
        self._close = close

    def batches(self, batch_size: int) -> Iterator[tuple[int, np.ndarray]]:
        return self._rows(batch_size)

    def close(self) -> None:
        self._close()
        self._close = lambda: None


BATCH_BYTES = 2 << 20  # float32 bytes of a batch when the caller leaves its size to us


def batch_for(dim: int) -> int:
    """Records per batch of about ``BATCH_BYTES`` of ``dim``-d float32 vectors.

    >>> batch_for(300)
    1747
    """
    return max(64, BATCH_BYTES // (4 * max(dim, 1)))
