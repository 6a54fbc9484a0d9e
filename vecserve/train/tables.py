"""The per-word tables the kernels take, built from the vocabulary's counts: subsampling
thresholds (`sample_thresholds`), the unigram^0.75 alias table for negative sampling
(`alias_table`), the Huffman tree for hierarchical softmax (`huffman_tree`).

>>> import numpy as np
>>> huffman_tree(np.array([5, 3, 1])).codelens.tolist()
[1, 2, 2]
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

__all__ = ["HuffmanTree", "alias_table", "huffman_tree", "sample_thresholds"]


def sample_thresholds(counts: np.ndarray, sample: float) -> np.ndarray:
    """uint32 keep thresholds: word w survives a draw u if ``thresholds[w] >= u``.

    Keep probability ``(sqrt(c/t) + 1) * t/c`` with ``t = sample * total`` (C word2vec,
    gensim); ``sample=0`` keeps everything.
    """
    counts = np.asarray(counts, dtype=np.float64)
    if not sample:
        return np.full(len(counts), 2**32 - 1, np.uint32)
    t = sample * counts.sum() if sample < 1.0 else float(sample)
    p = np.minimum((np.sqrt(counts / t) + 1.0) * (t / counts), 1.0)
    return (p * (2**32 - 1)).astype(np.uint32)


def alias_table(counts: np.ndarray, exponent: float = 0.75) -> tuple[np.ndarray, np.ndarray]:
    """Walker/Vose alias table for sampling word w with probability ~ counts[w]**exponent.

    Returns ``(prob, alias)``: draw i uniformly and a uniform uint32 u; the sample is i if
    ``u < prob[i]`` else ``alias[i]``.
    """
    w = np.asarray(counts, dtype=np.float64) ** exponent
    n = len(w)
    scaled = w * (n / w.sum())
    prob = np.ones(n)
    alias = np.arange(n, dtype=np.int32)
    small = [i for i in range(n) if scaled[i] < 1.0]
    large = [i for i in range(n) if scaled[i] >= 1.0]
    sc = scaled.tolist()
    while small and large:
        s, g = small.pop(), large.pop()
        prob[s] = sc[s]
        alias[s] = g
        sc[g] -= 1.0 - sc[s]
        (small if sc[g] < 1.0 else large).append(g)
    prob_u = np.minimum(prob * 2.0**32, 2.0**32 - 1).astype(np.uint32)
    prob_u[prob >= 1.0] = 2**32 - 1
    return prob_u, alias


@dataclass
class HuffmanTree:
    """Codes and inner-node paths per word, padded to ``max_code`` columns."""

    codes: np.ndarray  # uint8 (vocab, max_code)
    points: np.ndarray  # int32 (vocab, max_code)
    codelens: np.ndarray  # int32 (vocab,)


def huffman_tree(counts: np.ndarray) -> HuffmanTree:
    """The Huffman tree over counts (inner nodes numbered 0..vocab-2, root vocab-2)."""
    n = len(counts)
    if n < 2:
        return HuffmanTree(
            np.zeros((n, 1), np.uint8), np.zeros((n, 1), np.int32), np.zeros(n, np.int32)
        )
    heap = [(int(c), i) for i, c in enumerate(counts)]
    heapq.heapify(heap)
    parent = np.zeros(2 * n - 1, np.int64)
    binary = np.zeros(2 * n - 1, np.uint8)
    for k in range(n - 1):
        c1, a = heapq.heappop(heap)
        c2, b = heapq.heappop(heap)
        node = n + k
        parent[a], parent[b] = node, node
        binary[b] = 1
        heapq.heappush(heap, (c1 + c2, node))
    root = 2 * n - 2
    codes_l, points_l = [], []
    for w in range(n):
        code, path = [], []
        node = w
        while node != root:
            code.append(binary[node])
            node = parent[node]
            path.append(node - n)
        codes_l.append(code[::-1])
        points_l.append(path[::-1])
    max_code = max(len(c) for c in codes_l)
    codes = np.zeros((n, max_code), np.uint8)
    points = np.zeros((n, max_code), np.int32)
    lens = np.zeros(n, np.int32)
    for w in range(n):
        k = len(codes_l[w])
        codes[w, :k] = codes_l[w]
        points[w, :k] = points_l[w]
        lens[w] = k
    return HuffmanTree(codes, points, lens)
