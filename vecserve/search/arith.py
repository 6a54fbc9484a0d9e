"""gensim's arithmetic of a query, written once: the items of ``positive`` / ``negative``
(:func:`ensure_list`), their keys and weights (:func:`split_weights`), the weighted mean
(:func:`mean_vector`) and the row norms (:func:`row_norms`), each as gensim 4.4 computes
it, so every caller's floats are gensim's.

Used by the snapshot (:mod:`vecserve.search.snapshot`), the query items' JSON
(:mod:`vecserve.search.wire`) and the clients' lookups and whole-matrix calls (through the
snapshot's names today: ``vecserve.search.snapshot.mean_vector`` and friends are these).

>>> keys, weights = split_weights(["king", ("woman", 2.0)], "man")
>>> keys, weights.tolist()
(['king', 'woman', 'man'], [1.0, 2.0, -1.0])
>>> vecs = {"a": np.array([1.0, 0.0], REAL), "b": np.array([0.0, 1.0], REAL)}
>>> mean_vector(["a", "b"], np.ones(2), vecs, 2).tolist()
[0.7071067690849304, 0.7071067690849304]
"""

from __future__ import annotations

import numpy as np

from ..errors import QueryRejected

__all__ = [
    "EXTENDED_KEY_TYPES",
    "KEY_TYPES",
    "NO_COSMUL_INPUT",
    "NO_INPUT",
    "REAL",
    "ensure_list",
    "mean_vector",
    "require_input",
    "row_norms",
    "split_weights",
]

#: gensim's float type of vectors.
REAL = np.float32
#: What a key is: a word or a row number.
KEY_TYPES = (str, int, np.integer)
#: What a most_similar item is without a weight: a key or a vector.
EXTENDED_KEY_TYPES = (str, int, np.integer, np.ndarray)
#: gensim's messages for a query with nothing to compute from (``get_mean_vector``'s, and
#: ``most_similar_cosmul``'s when it has no positive item).
NO_INPUT = "cannot compute mean with no input"
NO_COSMUL_INPUT = "cannot compute similarity with no input"


def ensure_list(value):
    """gensim's ``_ensure_list``: a single key or vector becomes a one-item list."""
    if value is None:
        return []
    if isinstance(value, KEY_TYPES) or (isinstance(value, np.ndarray) and value.ndim == 1):
        return [value]
    if isinstance(value, np.ndarray) and value.ndim == 2:
        return list(value)
    return value


def require_input(positive: list, negative: list, *, cosmul: bool = False) -> None:
    """gensim's error for a most_similar query with nothing to compute from, raised where
    every path reads a query (the planner for the service, the snapshot's
    :func:`split_weights` for a local one): no item at all, or for cosmul no positive one.
    ``positive`` and ``negative`` are lists (gensim's ``_ensure_list`` of the arguments);
    `QueryRejected` is a ``ValueError``, with gensim's message.

    >>> require_input([], [])
    Traceback (most recent call last):
    ...
    vecserve.errors.QueryRejected: cannot compute mean with no input
    >>> require_input([], ["king"], cosmul=True)
    Traceback (most recent call last):
    ...
    vecserve.errors.QueryRejected: cannot compute similarity with no input
    """
    if cosmul and not len(positive):
        raise QueryRejected(NO_COSMUL_INPUT)
    if not len(positive) and not len(negative):
        raise QueryRejected(NO_INPUT)


def split_weights(positive, negative) -> tuple[list, np.ndarray]:
    """Keys and float64 weights of a most_similar query, exactly as gensim builds them."""
    positive = ensure_list(positive)
    negative = ensure_list(negative)
    require_input(positive, negative)  # gensim's ValueError for nothing to average
    keys = []
    weight = np.concatenate((np.ones(len(positive)), -1.0 * np.ones(len(negative))))
    for idx, item in enumerate(positive + negative):
        if isinstance(item, EXTENDED_KEY_TYPES):
            keys.append(item)
        else:
            keys.append(item[0])
            weight[idx] = item[1]
    return keys, weight


def mean_vector(
    keys,
    weights,
    vecs: dict,
    dim: int,
    *,
    post_normalize: bool = True,
    ignore_missing: bool = False,
) -> np.ndarray:
    """gensim's ``get_mean_vector`` arithmetic, given the vectors of the word keys in ``vecs``.

    Items of ``keys`` are words (looked up in ``vecs``, already normalised or not as the
    caller's ``pre_normalize`` asks) or vectors (used as they are), as in gensim.
    """
    from gensim import matutils

    mean = np.zeros(dim, REAL)
    total_weight = 0
    for idx, key in enumerate(keys):
        if isinstance(key, np.ndarray):
            mean += weights[idx] * key
            total_weight += abs(weights[idx])
        elif key in vecs:
            mean += weights[idx] * vecs[key]
            total_weight += abs(weights[idx])
        elif not ignore_missing:
            raise KeyError(f"Key '{key}' not present in vocabulary")
    if total_weight > 0:
        mean = mean / total_weight
    return matutils.unitvec(mean).astype(REAL) if post_normalize else mean


def row_norms(vectors: np.ndarray) -> np.ndarray:
    """L2 norm of every row, as gensim's ``fill_norms`` computes it (float32)."""
    return np.linalg.norm(vectors, axis=1)
