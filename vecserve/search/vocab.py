"""A vocabulary in one memory-mappable file: word -> row and row -> word, shared by processes.

A model's snapshot (:mod:`vecserve.search.snapshot`) answers two vocabulary questions on every
query: the row of each input word, and the word of each answer row. A Python ``list`` of
3M ``str`` and a ``dict`` over it cost ~500 MB in *every* process that serves the model;
:class:`SharedVocab` keeps both structures as NumPy arrays over one read-only ``mmap`` of
a file, so all processes mapping it share the same page-cache pages and build nothing.

File layout (``vocab.idx``; all integers little-endian, sections 64-byte aligned)::

    b"VSVOCAB1"                   magic and format version
    uint64 H                      length of the JSON header
    H bytes                       {"count": n, "nbytes": B, "slots": S, "table": "<i4"}
    offsets  int64[n + 1]         word i is data[offsets[i]:offsets[i + 1]]
    table    int32[S] (or int64)  open addressing, linear probing: a row id, or -1 (empty)
    data     uint8[B]             the words' UTF-8 bytes (surrogateescape), in row order

``S`` is the power of two >= 2n (load <= 0.5), and a word's first slot is
``(crc32(word) * 0x9E3779B1 mod 2**32) >> (32 - log2 S)`` (crc32 is in C and the same in
every process, unlike ``hash``). The table is filled in rounds, so that its content does not
depend on anything but the words. Words are unique: :func:`encode` refuses duplicates.

:meth:`SharedVocab.open` checks that the file is whole (size, offsets, table population,
a sample of lookups) and raises ``ValueError`` naming the file and what is wrong.

>>> v = SharedVocab.from_words(["king", "queen", "Köln"])
>>> v.get("Köln"), v[1], "prince" in v, len(v)
(2, 'queen', False, 3)
"""

from __future__ import annotations

import json
import mmap
import operator
import os
import struct
import sys
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np

from ..errors import SnapshotDamaged
from ..fileio import atomic_write

__all__ = ["SharedVocab", "encode", "write"]

MAGIC = b"VSVOCAB1"
ALIGN = 64
_FIB = 0x9E3779B1
_MASK32 = 0xFFFFFFFF
_crc32 = zlib.crc32
# Rows sampled by open() to check that table, offsets and data agree.
CHECK_SAMPLE = 64
# From this many rows, words() finds their offsets with NumPy (~150 ns a word); below it,
# NumPy's fixed ~5 us costs more than a Python loop's ~230 ns a word.
WORDS_VECTORISED_FROM = 64


def _pad(n: int) -> int:
    return -n % ALIGN


def _utf8(word: str) -> bytes:
    return word.encode("utf-8", "surrogateescape")


def _bits(slots: int) -> int:
    return slots.bit_length() - 1


def encode(words: Iterable[str]) -> list[bytes | memoryview]:
    """The sections of a ``vocab.idx`` file holding ``words`` in order (joined = the file).

    Raises ``ValueError`` naming the first duplicate word and its two rows.
    """
    encoded = [_utf8(w) for w in words]
    n = len(encoded)
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    hashes = np.fromiter(map(zlib.crc32, encoded), dtype=np.uint64, count=n)
    _refuse_duplicates(encoded, hashes)
    slots = 8
    while slots < 2 * n:
        slots *= 2
    bits = _bits(slots)
    home = ((hashes * _FIB) & _MASK32) >> np.uint64(32 - bits)
    home = home.astype(np.int64)
    table_dtype = np.dtype("<i4") if n < 2**31 - 1 else np.dtype("<i8")
    table = np.full(slots, -1, dtype=table_dtype)
    pending = np.arange(n, dtype=np.int64)
    step = 0
    while pending.size:
        pos = (home[pending] + step) & (slots - 1)
        free = np.flatnonzero(table[pos] < 0)
        taken, first = np.unique(pos[free], return_index=True)
        winners = free[first]  # the lowest pending row wins each free slot
        table[taken] = pending[winners]
        keep = np.ones(pending.size, dtype=bool)
        keep[winners] = False
        pending = pending[keep]
        step += 1
    header = json.dumps(
        {"count": n, "nbytes": int(offsets[-1]), "slots": slots, "table": table_dtype.str}
    ).encode()
    head = MAGIC + struct.pack("<Q", len(header)) + header
    parts: list[bytes | memoryview] = [head, b"\0" * _pad(len(head))]
    for arr in (offsets.astype("<i8"), table):
        parts += [memoryview(arr).cast("B"), b"\0" * _pad(arr.nbytes)]
    parts.append(b"".join(encoded))
    return parts


def _refuse_duplicates(encoded: list[bytes], hashes: np.ndarray) -> None:
    """ValueError if two words are equal (only words sharing a crc32 are compared)."""
    _, inverse, counts = np.unique(hashes, return_inverse=True, return_counts=True)
    suspects = np.flatnonzero(counts[inverse] > 1)
    seen: dict[bytes, int] = {}
    for row in suspects.tolist():
        first = seen.setdefault(encoded[row], row)
        if first != row:
            word = encoded[row].decode("utf-8", "surrogateescape")
            raise ValueError(f"duplicate word {word!r} at rows {first} and {row}")


def write(path: str | os.PathLike, words: Iterable[str]) -> None:
    """Write ``vocab.idx`` for ``words`` at ``path`` atomically (temp file, then rename)."""
    parts = encode(words)
    with atomic_write(path) as f:
        for part in parts:
            f.write(part)


class SharedVocab(Sequence):
    """The words of a model in row order, over one buffer (usually a read-only ``mmap``).

    Behaves as ``index_to_key`` (a read-only sequence of ``str``); :attr:`key_to_index`
    is the matching read-only mapping. Nothing per word is built in Python.
    """

    def __init__(self, buf, *, source: str = "<memory>"):
        self._buf = buf
        self.source = source
        size = len(buf)

        def bad(what: str) -> SnapshotDamaged:
            return SnapshotDamaged(source, "vocabulary", what)

        if size < 16 or bytes(buf[:8]) != MAGIC:
            raise bad("not a vecserve vocabulary, or an unknown version")
        (hlen,) = struct.unpack("<Q", buf[8:16])
        try:
            header = json.loads(bytes(buf[16 : 16 + hlen]))
            n, nbytes, slots = int(header["count"]), int(header["nbytes"]), int(header["slots"])
            table_dtype = np.dtype(header["table"])
        except (ValueError, KeyError, TypeError) as exc:
            raise bad(f"header: {exc}") from None
        start = 16 + hlen
        start += _pad(start)
        t_start = start + 8 * (n + 1)
        t_start += _pad(t_start)
        d_start = t_start + table_dtype.itemsize * slots
        d_start += _pad(d_start)
        if n < 0 or slots < 8 or slots & (slots - 1) or slots < 2 * n:
            raise bad(f"{n} words in {slots} slots")
        if size != d_start + nbytes:
            raise bad(f"{size:,} bytes, {d_start + nbytes:,} expected: truncated?")
        self._offsets = np.frombuffer(buf, dtype="<i8", count=n + 1, offset=start)
        self._table = np.frombuffer(buf, dtype=table_dtype, count=slots, offset=t_start)
        self._data = d_start
        # Lookups index memoryviews: ~3x faster than a NumPy scalar, and a Python int
        # comes out. A big-endian machine reads native copies (per process, not shared).
        if sys.byteorder == "little":
            view = memoryview(buf)
            self._off = view[start : start + 8 * (n + 1)].cast("q")
            self._slot = view[t_start : t_start + self._table.nbytes].cast(table_dtype.char)
        else:
            self._off = memoryview(self._offsets.astype("=i8")).cast("B").cast("q")
            native = self._table.astype(table_dtype.newbyteorder("="))
            self._slot = memoryview(native).cast("B").cast(table_dtype.char)
        self._count = n
        self._shift = 32 - _bits(slots)
        self._mask = slots - 1
        self._probe = (self._slot, self._off, buf, d_start, self._mask, self._shift)
        self.key_to_index = KeyToIndex(self)
        self._check(bad)

    def _check(self, bad) -> None:
        off, table, n = self._offsets, self._table, self._count
        if off[0] != 0 or off[-1] != len(self._buf) - self._data:
            raise bad("word offsets do not span the data")
        if n and np.any(off[1:] < off[:-1]):
            raise bad("word offsets go backwards")
        used = table[table >= 0]
        if used.size != n or (n and (table.min() < -1 or used.max() >= n)):
            raise bad(f"hash table holds {used.size} rows, {n} expected")
        for row in np.linspace(0, n - 1, min(n, CHECK_SAMPLE), dtype=np.int64).tolist():
            try:
                ok = self.get(self[row]) == row
            except UnicodeDecodeError:
                ok = False
            if not ok:
                raise bad(f"word {row} is not found where the table says")

    @classmethod
    def from_words(cls, words: Iterable[str]) -> SharedVocab:
        """An in-memory vocabulary (same structure, in a ``bytes`` buffer)."""
        return cls(b"".join(bytes(p) for p in encode(words)))

    @classmethod
    def open(cls, path: str | os.PathLike) -> SharedVocab:
        """Map ``path`` read-only; :class:`~vecserve.errors.SnapshotDamaged` (one line, a
        ``ValueError``) if it is damaged."""
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                raise SnapshotDamaged(path, "vocabulary", "empty")
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return cls(buf, source=str(path))

    # -- row -> word ----------------------------------------------------------------------

    def __len__(self) -> int:
        return self._count

    def word_bytes(self, row: int) -> bytes:
        off, data = self._off, self._data
        return self._buf[data + off[row] : data + off[row + 1]]

    def __getitem__(self, row):
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(self._count))]
        row = operator.index(row)
        if row < 0:
            row += self._count
        if not 0 <= row < self._count:
            raise IndexError("vocabulary index out of range")
        off, data = self._off, self._data
        return self._buf[data + off[row] : data + off[row + 1]].decode("utf-8", "surrogateescape")

    def words(self, rows) -> list[str]:
        """The words of ``rows`` (row numbers: a list of ints or any int array), in one
        call: what ``[self[r] for r in rows]`` gives, without a method call a word.

        >>> SharedVocab.from_words(["a", "bb", "ccc"]).words([2, 0, 2])
        ['ccc', 'a', 'ccc']
        """
        if not isinstance(rows, list) or len(rows) >= WORDS_VECTORISED_FROM:
            rows = np.asarray(rows, dtype=np.int64).ravel()
        buf, data, n = self._buf, self._data, self._count
        if len(rows) < WORDS_VECTORISED_FROM:
            if not isinstance(rows, list):  # (a short list of ints is taken as it is)
                rows = rows.tolist()
            if rows and not (min(rows) >= 0 and max(rows) < n):
                raise IndexError("vocabulary index out of range")
            off = self._off
            return [
                buf[data + off[r] : data + off[r + 1]].decode("utf-8", "surrogateescape")
                for r in rows
            ]
        if not (rows.min() >= 0 and rows.max() < n):
            raise IndexError("vocabulary index out of range")
        starts = (self._offsets[rows] + data).tolist()
        ends = (self._offsets[rows + 1] + data).tolist()
        pairs = zip(starts, ends, strict=True)
        return [buf[a:b].decode("utf-8", "surrogateescape") for a, b in pairs]

    def __iter__(self) -> Iterator[str]:
        for row in range(self._count):
            yield self.word_bytes(row).decode("utf-8", "surrogateescape")

    def __eq__(self, other) -> bool:
        if isinstance(other, (SharedVocab, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<SharedVocab {self._count} words from {self.source}>"

    # -- word -> row ----------------------------------------------------------------------

    def get(self, word, default=None):
        """Row of ``word`` (a ``str``), or ``default``."""
        if not isinstance(word, str):
            return default
        # (~0.5 us a word: the Python steps, not the memory, are the cost; locals and one
        # tuple unpack instead of attribute reads and a helper call save a third)
        key = word.encode("utf-8", "surrogateescape")
        table, off, buf, data, mask, shift = self._probe
        slot = ((_crc32(key) * _FIB) & _MASK32) >> shift
        while True:
            row = table[slot]
            if row < 0:
                return default
            if buf[data + off[row] : data + off[row + 1]] == key:
                return row
            slot = (slot + 1) & mask

    def __contains__(self, word) -> bool:
        return self.get(word) is not None

    def index(self, word, start=0, stop=None) -> int:
        row = self.get(word)
        if row is None or row < start or (stop is not None and row >= stop):
            raise ValueError(f"{word!r} is not in the vocabulary")
        return row


class KeyToIndex(Mapping):
    """``key_to_index`` of a :class:`SharedVocab`: a read-only ``{word: row}`` view."""

    def __init__(self, vocab: SharedVocab):
        self._vocab = vocab
        # ``get``: the vocabulary's own lookup, no call in between (the hot path of queries)
        self.get = vocab.get

    def __getitem__(self, word) -> int:
        row = self._vocab.get(word)
        if row is None:
            raise KeyError(word)
        return row

    def __contains__(self, word) -> bool:
        return self._vocab.get(word) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._vocab)

    def __len__(self) -> int:
        return len(self._vocab)
