"""Duplicate detection in at most 16 bytes per token: `TokenSet`."""

from __future__ import annotations

import numpy as np

__all__ = ["TokenSet"]


class TokenSet:
    """The tokens seen so far, as 96-bit fingerprints: <= 16 bytes per token, no strings.

    Tokens are str or (as the loader gives them) their UTF-8 bytes, one kind per set. A
    token's fingerprint is two SipHash values (Python's ``hash`` of the token, 64
    bits, and of the token behind a NUL, of which 32 bits are kept: two inputs of one
    keyed PRF, so independent values). Two distinct tokens share a fingerprint with
    probability 2**-96, so a false duplicate among n tokens has probability
    <= n**2 / 2**97: 5.7e-17 for 3M tokens, 6.3e-14 for 100M. ``hash`` is seeded per
    process; a resumed load re-hashes its ``seen_tokens``.

    Fingerprints live in runs sorted by the 64-bit part (12 bytes per token), merged
    LSM-style: a new run absorbs the previous one while that one is at most twice its
    size, so each fingerprint is moved O(log n) times. In front of them a one-hash
    bitmap of 16 to 32 bits per token (<= 4 bytes) answers "certainly new" for ~97% of
    new tokens, so the runs are searched only for the rest. A repeat inside one batch is
    found by sorting the batch's fingerprints and confirmed on the strings.

    >>> s = TokenSet()
    >>> s.add_new(["a", "b"]) is None, s.add_new(["b", "c", "c"]).tolist(), len(s)
    (True, [1], 3)
    """

    _MIN_BITS = 1 << 16  # the bitmap's initial size: 8 KiB

    def __init__(self) -> None:
        self._runs: list[tuple[np.ndarray, np.ndarray]] = []  # (uint64 sorted, uint32)
        self._n = 0
        self._bits = np.zeros(self._MIN_BITS // 8, dtype=np.uint8)
        self._shift = 64 - self._MIN_BITS.bit_length() + 1  # bit index: top bits of h1

    def __len__(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        """Bytes held: fingerprints and bitmap."""
        return self._bits.nbytes + sum(h1.nbytes + h2.nbytes for h1, h2 in self._runs)

    def add_new(self, tokens: list[str] | list[bytes]) -> np.ndarray | None:
        """Add ``tokens``; return the indices of those to keep, or None to keep them all.

        A token is kept at its first occurrence in ``tokens`` if it was not seen before.
        """
        n = len(tokens)
        h1 = np.fromiter(map(hash, tokens), dtype=np.int64, count=n).view(np.uint64)
        nul = b"\0" if n and isinstance(tokens[0], bytes) else "\0"
        h2 = np.fromiter(map(hash, map(nul.__add__, tokens)), dtype=np.int64, count=n)
        order = np.argsort(h1, kind="stable")  # stable: ~2x the default on random 64-bit keys
        h1, h2 = h1[order], h2[order].view(np.uint64).astype(np.uint32)  # low 32 bits
        if n > 1 and (h1[1:] == h1[:-1]).any():  # a repeat inside the batch (or a 2**-64 tie)
            first: dict[str | bytes, int] = {}
            for i, token in enumerate(tokens):
                first.setdefault(token, i)
            if len(first) < n:
                keep = np.zeros(n, dtype=bool)
                keep[list(first.values())] = True
                keep = keep[order]
                h1, h2, order = h1[keep], h2[keep], order[keep]
        maybe = np.flatnonzero(self._maybe(h1))
        if len(maybe):
            old = maybe[self._contains(h1[maybe], h2[maybe])]
            if len(old):
                new = np.ones(len(h1), dtype=bool)
                new[old] = False
                h1, h2, order = h1[new], h2[new], order[new]
        if len(h1):
            self._add(h1, h2)
        return None if len(order) == n else np.sort(order)

    def _maybe(self, h1: np.ndarray) -> np.ndarray:
        """False where the bitmap proves a fingerprint new."""
        at = (h1 >> self._shift).astype(np.intp)
        return (self._bits[at >> 3] >> (at & 7)) & 1 == 1

    def _set_bits(self, h1: np.ndarray) -> None:
        """Set the bitmap bits of ``h1`` (sorted, so equal bytes are neighbours)."""
        at = (h1 >> self._shift).astype(np.intp)
        byte, bit = at >> 3, np.left_shift(1, at & 7).astype(np.uint8)
        starts = np.flatnonzero(np.concatenate(([True], byte[1:] != byte[:-1])))
        self._bits[byte[starts]] |= np.bitwise_or.reduceat(bit, starts)

    def _contains(self, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
        """Which of the pairs ``(h1, h2)`` (sorted by ``h1``) are in the runs."""
        found = np.zeros(len(h1), dtype=bool)
        for r1, r2 in self._runs:
            at = np.searchsorted(r1, h1)
            clipped = np.minimum(at, len(r1) - 1)
            same1 = r1[clipped] == h1
            if not same1.any():
                continue
            hit = same1 & (r2[clipped] == h2)
            for j in np.flatnonzero(same1 & ~hit):  # equal h1, other h2: scan its (rare) run
                k = at[j] + 1
                while k < len(r1) and r1[k] == h1[j] and not hit[j]:
                    hit[j] = r2[k] == h2[j]
                    k += 1
            found |= hit
        return found

    def _add(self, b1: np.ndarray, b2: np.ndarray) -> None:
        """Add a run sorted by ``b1``, merging it with the runs not much bigger."""
        self._n += len(b1)
        if self._n * 16 > len(self._bits) * 8:  # keep >= 16 bits per token: rebuild bigger
            while self._n * 16 > len(self._bits) * 8:
                self._bits = np.zeros(len(self._bits) * 2, dtype=np.uint8)
                self._shift -= 1
            for r1, _ in self._runs:
                self._set_bits(r1)
        self._set_bits(b1)
        while self._runs and len(self._runs[-1][0]) <= 2 * len(b1):
            a1, a2 = self._runs.pop()
            b1, b2 = np.concatenate((a1, b1)), np.concatenate((a2, b2))
            order = np.argsort(b1, kind="stable")  # timsort merges the two runs: ~10 ns/item
            b1, b2 = b1[order], b2[order]
        self._runs.append((b1, b2))
