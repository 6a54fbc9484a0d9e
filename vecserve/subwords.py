"""fastText's character n-grams: which bucket rows make up a word's vector.

Byte-exact with fastText's ``Dictionary::computeSubwords`` and gensim's
``compute_ngrams_bytes`` / ``ft_hash_bytes`` / ``ft_ngram_hashes``: the word is wrapped
as ``<word>`` and encoded as UTF-8; an n-gram is ``n`` whole characters (``min_n <= n <=
max_n``; the lone ``<`` and ``>`` are not n-grams); its bucket is the 32-bit FNV-1a hash
of its bytes, each byte sign-extended first (fastText hashes ``char``), modulo the
number of buckets. The n-grams of a word come in fastText's order (by start, then by
length), which matters: gensim sums their vectors in that order, in float32.

Everything is vectorised over a batch of words: one NumPy pass per byte of n-gram length.

>>> ngram_buckets(["hi"], 3, 4, 2_000_000)
[array([1857152,  489882,  787756], dtype=uint32)]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "compose",
    "in_vocabulary",
    "ngram_buckets",
    "ngram_buckets_flat",
    "ngrams",
    "swap_oov",
    "unit_rows",
    "word_hashes",
]

_FNV_OFFSET = np.uint32(2166136261)
_FNV_PRIME = np.uint32(16777619)
_FNV64_OFFSET = np.uint64(14695981039346656037)
_FNV64_PRIME = np.uint64(1099511628211)


def ngrams(word: str, min_n: int, max_n: int) -> list[bytes]:
    """The n-grams of ``word`` as UTF-8 bytes, in fastText's order (for reading, tests).

    >>> ngrams("hé", 3, 3)
    [b'<h\\xc3\\xa9', b'h\\xc3\\xa9>']
    """
    raw = f"<{word}>".encode("utf-8", "surrogateescape")
    out = []
    for i in range(len(raw)):
        if raw[i] & 0xC0 == 0x80:
            continue
        j, n = i, 1
        while j < len(raw) and n <= max_n:
            j += 1
            while j < len(raw) and raw[j] & 0xC0 == 0x80:
                j += 1
            if n >= min_n and not (n == 1 and (i == 0 or j == len(raw))):
                out.append(raw[i:j])
            n += 1
    return out


def ngram_buckets(words: Sequence[str], min_n: int, max_n: int, bucket: int) -> list[np.ndarray]:
    """The bucket of every n-gram of every word (uint32 arrays, fastText's order).

    Words that have no n-gram (``max_n`` 0, or too short) get an empty array.
    """
    flat, bounds = ngram_buckets_flat(words, min_n, max_n, bucket)
    return np.split(flat, bounds[1:-1]) if len(words) else []


def ngram_buckets_flat(
    words: Sequence[str], min_n: int, max_n: int, bucket: int
) -> tuple[np.ndarray, np.ndarray]:
    """`ngram_buckets` as one array: word ``i``'s buckets are ``flat[bounds[i]:bounds[i+1]]``.

    >>> flat, bounds = ngram_buckets_flat(["hi", "a"], 3, 4, 2_000_000)
    >>> bounds.tolist(), len(flat)
    ([0, 3, 4], 4)
    """
    bounds = np.zeros(len(words) + 1, dtype=np.int64)
    if not words or bucket <= 0 or max_n <= 0 or max_n < min_n:
        return np.zeros(0, np.uint32), bounds
    encoded = [f"<{w}>".encode("utf-8", "surrogateescape") for w in words]
    lens = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    buf = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    ends = np.cumsum(lens)
    begins = ends - lens
    word_of = np.repeat(np.arange(len(words)), lens)
    end_of = ends[word_of]  # per byte: the end of its word
    cont = (buf & 0xC0) == 0x80
    starts = np.flatnonzero(~cont)  # n-grams start at a character
    is_first = starts == begins[word_of[starts]]
    # one column per byte of n-gram: at most 4 bytes a character (UTF-8)
    width = 4 * max_n
    h = np.full(len(starts), _FNV_OFFSET, dtype=np.uint32)
    chars = np.zeros(len(starts), dtype=np.int64)
    live = np.ones(len(starts), dtype=bool)
    signed = buf.view(np.int8).astype(np.int32).astype(np.uint32)  # sign-extended bytes
    padded_cont = np.append(cont, False)  # the byte after the last one
    stop = end_of[starts]
    hashes = np.zeros((len(starts), width), dtype=np.uint32)
    emit = np.zeros((len(starts), width), dtype=bool)
    for k in range(width):
        pos = starts + k
        live &= pos < stop
        if not live.any():
            break
        p = np.where(live, pos, 0)
        h = np.where(live, (h ^ signed[p]) * _FNV_PRIME, h)
        boundary = live & ((p + 1 == stop) | ~padded_cont[p + 1])
        chars += boundary
        live &= chars <= max_n
        single_edge = (chars == 1) & (is_first | (p + 1 == stop))
        emit[:, k] = boundary & (chars >= min_n) & (chars <= max_n) & ~single_edge
        hashes[:, k] = h
    flat = hashes[emit] % np.uint32(bucket)
    per_start = emit.sum(axis=1)
    per_word = np.bincount(word_of[starts], weights=per_start, minlength=len(words))
    np.cumsum(per_word.astype(np.int64), out=bounds[1:])
    return flat, bounds


def compose(base: np.ndarray | None, ids: Sequence[np.ndarray], rows: np.ndarray) -> np.ndarray:
    """gensim's float32 sums: ``(base + sum of n-gram rows) / (n + 1)``, or the mean of rows.

    ``ids[w]`` are the rows (in ``rows``) of word ``w``'s n-grams, in order. With
    ``base`` (in-vocabulary words: ``FastTextKeyedVectors.adjust_vectors``) the word's own
    row comes first; without it (out-of-vocabulary words: ``get_vector``) the sum starts at
    zero and a word without n-grams stays the zero vector. The additions happen in the
    n-grams' order, one float32 add at a time, so the result is bit-identical to gensim's.

    >>> rows = np.array([[1, 2], [3, 4]], np.float32)
    >>> compose(None, [np.array([0, 1, 1])], rows).tolist()
    [[2.3333332538604736, 3.3333332538604736]]
    """
    n = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    dim = rows.shape[1]
    out = (
        np.array(base, dtype=np.float32, copy=True)
        if base is not None
        else np.zeros((len(ids), dim), np.float32)
    )
    if len(ids) == 0:
        return out
    width = int(n.max(initial=0))
    table = np.zeros((len(ids), width), dtype=np.int64)
    for w, b in enumerate(ids):
        table[w, : len(b)] = b
    for r in range(width):
        who = np.flatnonzero(n > r)
        out[who] += rows[table[who, r]]
    divisor = n + 1 if base is not None else np.maximum(n, 1)
    # one float32 division per component, as gensim's ``vector /= k``
    out /= divisor.astype(np.float32)[:, None]
    return out


def word_hashes(words: Sequence[bytes]) -> np.ndarray:
    """The 64-bit FNV-1a hash of each word's bytes (uint64), vectorised over the batch.

    A model keeps the sorted hashes of its vocabulary (8 bytes a word), so a reader tells
    a word whose row is lost from an unknown word, and a fastText reader knows which
    words of a batch are missing, and hashes and fetches only their n-grams, before the
    read. Two different words share a hash with probability ~2**-64 per pair.

    >>> word_hashes([b"", b"a"]).tolist()
    [14695981039346656037, 12638187200555641996]
    """
    lens = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    return flat_word_hashes(np.frombuffer(b"".join(words), dtype=np.uint8), lens)


def flat_word_hashes(buf: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """:func:`word_hashes` of words given as their concatenated bytes and lengths.

    FNV-1a goes byte by byte, so the words go longest first: the words still hashing at
    byte ``k`` are then a prefix of that order, and each step is a gather of their byte
    ``k`` and two in-place operations on that prefix (~0.1 us a word in all; masking
    every word at every step cost ~0.5).

    >>> flat_word_hashes(np.frombuffer(b"a", np.uint8), np.array([0, 1])).tolist()
    [14695981039346656037, 12638187200555641996]
    """
    lens = np.asarray(lens, dtype=np.int64)
    h = np.full(len(lens), _FNV64_OFFSET, dtype=np.uint64)
    longest = int(lens.max(initial=0))
    if not longest:
        return h
    # a stable sort of 16-bit keys is a radix sort: ~10x faster than of int64
    key = longest - lens
    order = np.argsort(key.astype(np.uint16) if longest < 1 << 16 else key, kind="stable")
    begins = (np.cumsum(lens) - lens)[order]
    descending = lens[order]
    # live[k]: how many words have more than k bytes (a prefix of the order)
    live = len(lens) - np.searchsorted(descending[::-1], np.arange(longest), side="right")
    buf = np.asarray(buf, dtype=np.uint8)
    hs = h.copy()
    for k in range(longest):
        part = hs[: int(live[k])]
        np.bitwise_xor(part, buf[begins[: len(part)] + k], out=part)
        part *= _FNV64_PRIME
    h[order] = hs
    return h


def in_vocabulary(known: np.ndarray, words: Sequence[bytes]) -> np.ndarray:
    """Whether each word's hash is among ``known``, a vocabulary's sorted word hashes
    (bool; a word of another vocabulary is taken for present with probability ~1e-13 at
    2M words).

    >>> in_vocabulary(np.sort(word_hashes([b"a", b"b"])), [b"b", b"c"]).tolist()
    [True, False]
    """
    h = word_hashes(words)
    if not len(known):
        return np.zeros(len(h), dtype=bool)
    at = np.minimum(np.searchsorted(known, h), len(known) - 1)
    return known[at] == h


def unit_rows(rows: np.ndarray) -> np.ndarray:
    """Rows at unit length (zero rows stay zero), gensim's per-word normalisation."""
    norms = np.linalg.norm(rows, axis=1)
    return rows / np.where(norms > 0, norms, 1)[:, None]


def swap_oov(items: Sequence, vectors: dict) -> list:
    """``most_similar`` terms with the words in ``vectors`` (a fastText model's
    out-of-vocabulary words -> their unit vectors) replaced by their vectors; a
    ``(word, weight)`` pair keeps its weight.

    >>> swap_oov(["a", ("b", 2.0), "c"], {"b": "B", "c": "C"})
    ['a', ('B', 2.0), 'C']
    """

    def swap(item):
        if isinstance(item, tuple) and isinstance(item[0], str) and item[0] in vectors:
            return (vectors[item[0]], *item[1:])
        return vectors[item] if isinstance(item, str) and item in vectors else item

    return [swap(i) for i in items]
