"""The two value types every reader yields: `ResumePoint` and `VectorBatch`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = ["ResumePoint", "VectorBatch"]


class ResumePoint(NamedTuple):
    """Where to continue an interrupted load: right after a batch.

    ``offset`` is a byte position in the decompressed stream (a row number for gensim
    files) and ``records`` the number of records consumed from the file, duplicates
    included.

    >>> ResumePoint(offset=4096, records=2000)
    ResumePoint(offset=4096, records=2000)
    """

    offset: int
    records: int


@dataclass(frozen=True)
class VectorBatch:
    """One batch of distinct tokens and their vectors.

    ``vectors`` is a C-contiguous ``(len(tokens), dim)`` float32 array; ``counts`` an
    int64 array for gensim files that carry counts, else None; ``resume`` the point right
    after this batch.

    >>> b = VectorBatch(["a"], np.zeros((1, 2), np.float32), None, ResumePoint(10, 1))
    >>> b.vectors.shape
    (1, 2)
    """

    tokens: list[str]
    vectors: np.ndarray
    counts: np.ndarray | None
    resume: ResumePoint
