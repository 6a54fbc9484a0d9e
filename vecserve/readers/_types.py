"""The two value types every reader yields: `ResumePoint` and `VectorBatch`."""

from __future__ import annotations

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


class VectorBatch:
    """One batch of distinct tokens and their vectors.

    ``vectors`` is a C-contiguous ``(len(tokens), dim)`` float32 array; ``counts`` an
    int64 array for gensim files that carry counts, else None; ``resume`` the point right
    after this batch. ``raw`` holds the tokens as UTF-8 bytes, the bytes of their keys: a
    reader that cut them from the file as exactly those bytes (word2vec binary in UTF-8)
    gives them as ``raw=`` and ``tokens`` is decoded from them when first asked for; the
    loader writes ``raw``, so such a token goes from the file to Redis without a decode.

    >>> b = VectorBatch(["a"], np.zeros((1, 2), np.float32), None, ResumePoint(10, 1))
    >>> b.vectors.shape, b.raw
    ((1, 2), [b'a'])
    >>> v = np.zeros((1, 2), np.float32)
    >>> VectorBatch(None, v, None, ResumePoint(10, 1), raw=[b"\\xce\\xbb"]).tokens
    ['λ']
    """

    __slots__ = ("_raw", "_tokens", "counts", "resume", "vectors")

    def __init__(
        self,
        tokens: list[str] | None,
        vectors: np.ndarray,
        counts: np.ndarray | None,
        resume: ResumePoint,
        *,
        raw: list[bytes] | None = None,
    ):
        if tokens is None and raw is None:
            raise TypeError("VectorBatch needs tokens or raw")
        self._tokens, self._raw = tokens, raw
        self.vectors, self.counts, self.resume = vectors, counts, resume

    @property
    def tokens(self) -> list[str]:
        """The tokens, as str."""
        if self._tokens is None:
            assert self._raw is not None
            self._tokens = [t.decode("utf-8", "surrogateescape") for t in self._raw]
        return self._tokens

    @property
    def raw(self) -> list[bytes]:
        """The tokens as UTF-8 bytes (lone surrogates as ``surrogateescape`` writes them)."""
        if self._raw is None:
            assert self._tokens is not None
            try:
                self._raw = [t.encode("utf-8", "surrogateescape") for t in self._tokens]
            except UnicodeEncodeError:  # unicode_errors="surrogatepass" made other surrogates
                self._raw = [_utf8(t) for t in self._tokens]
        return self._raw

    def take(self, keep: np.ndarray) -> VectorBatch:
        """The batch of the rows ``keep`` (ascending indices), ``resume`` unchanged."""
        pick = keep.tolist()
        return VectorBatch(
            None if self._tokens is None else [self._tokens[i] for i in pick],
            self.vectors[keep],
            None if self.counts is None else self.counts[keep],
            self.resume,
            raw=None if self._raw is None else [self._raw[i] for i in pick],
        )

    def __repr__(self) -> str:
        return f"<VectorBatch {len(self.vectors)} tokens, resume={self.resume}>"


def _utf8(token: str) -> bytes:
    """``token`` in UTF-8, a surrogate that ``surrogateescape`` cannot write as its
    3-byte form (what ``surrogatepass`` read it from)."""
    try:
        return token.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return token.encode("utf-8", "surrogatepass")
