"""Pooling: a batch's token rows to one vector per text.

:func:`pool` takes the rows of a batch's distinct tokens (read once) and a
:class:`~vecserve.text.tokenize.Cut`, and sums each text's occurrences as one sparse
product (texts x distinct tokens, the count of each token in each text) in float64, then
divides by the number of tokens used: the mean, as Model2Vec's ``encode``, WordLlama's
``embed`` and gensim's ``get_mean_vector`` compute it in float32, to ~1e-7.

>>> rows = np.array([[1, 0], [0, 2]], np.float32)
>>> cut = Cut(["a", "b"], np.array([0, 1, 1]), np.array([0, 3, 3]), np.zeros(2, np.int64))
>>> got = pool(rows, np.array([True, True]), cut)
>>> got.vectors.tolist(), got.used.tolist()
([[0.3333333432674408, 1.3333333730697632], [0.0, 0.0]], [3, 0])
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import sparse

from .tokenize import Cut

__all__ = ["Pooled", "pool", "unit"]


class Pooled(NamedTuple):
    vectors: np.ndarray  # float32 (texts, dims)
    used: np.ndarray  # int64 per text: token occurrences pooled
    unknown: np.ndarray  # int64 per text: occurrences dropped (tokenizer) or without a row


def unit(m: np.ndarray) -> np.ndarray:
    """Rows of ``m`` divided by their norms (zero rows stay zero)."""
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)


def pool(
    rows: np.ndarray,
    found: np.ndarray,
    cut: Cut,
    *,
    normalize: bool = False,
    pre_normalize: bool = False,
    dims: int | None = None,
    weights: np.ndarray | None = None,
) -> Pooled:
    """Each text's mean row (see the module docstring).

    ``rows`` / ``found``: the distinct tokens' rows and whether the model has them;
    ``dims`` keeps the first dimensions (Matryoshka) before any normalisation;
    ``weights`` (one per distinct token): a weighted mean, divided by the weights' sum.
    """
    n = len(cut.offsets) - 1
    rows = np.asarray(rows, np.float32)
    if dims is not None:
        rows = rows[:, :dims]
    if pre_normalize:
        rows = unit(rows)
    lengths = np.diff(cut.offsets)
    text_of = np.repeat(np.arange(n), lengths)
    ok = found[cut.index] if len(cut.index) else np.zeros(0, bool)
    used = np.bincount(text_of[ok], minlength=n).astype(np.int64)
    unknown = cut.dropped + (lengths - used)
    indices = cut.index[ok]
    if weights is None:
        data, total = np.ones(len(indices)), used.astype(np.float64)
    else:
        data = np.asarray(weights, np.float64)[indices]
        total = np.bincount(text_of[ok], weights=data, minlength=n)
    # the occurrences are already text by text: the CSR rows as they stand (a token met
    # twice in a text is two entries, summed by the product; no sort, no merge)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(used, out=indptr[1:])
    counts = sparse.csr_matrix((data, indices, indptr), shape=(n, len(rows)))
    sums = counts @ rows.astype(np.float64)
    means = np.divide(sums, total[:, None], out=np.zeros_like(sums), where=total[:, None] > 0)
    vectors = means.astype(np.float32)
    if normalize:
        vectors = unit(vectors)
    return Pooled(np.ascontiguousarray(vectors), used, unknown)
