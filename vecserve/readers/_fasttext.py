"""Facebook's native fastText ``.bin`` models: words, counts and n-gram bucket rows.

The layout (little-endian, as fastText writes it on x86)::

    int32 magic 793712314, int32 version (11 or 12)
    args    12 x int32 (dim ws epoch minCount neg wordNgrams loss model bucket minn maxn
            lrUpdateRate), float64 t
    dict    int32 size, nwords, nlabels; int64 ntokens, pruneidx_size;
            size x (token bytes, b"\\0", int64 count, int8 type); pruneidx_size x 2 int32
    input   bool quantized; int64 rows (= nwords + bucket), cols (= dim); rows x cols float32
    output  bool quantized; int64 rows, cols; rows x cols float32 (not read, size checked)

The word vectors yielded are gensim's ``FastTextKeyedVectors.vectors`` (what
``load_facebook_vectors(path)[word]`` returns): the word's input row plus its n-grams'
bucket rows, divided by their number, summed in float32 in gensim's order
(`vecserve.subwords.compose`). `ngram_batches` yields the bucket rows themselves.

The file is read with ``pread`` (the matrix through a read-only memory map, so the
n-gram rows a batch of words needs are paged in by the OS, not held by the process);
compressed ``.bin`` files are refused. The dictionary is read twice: once at open, to
check it and find the matrix, and again batch by batch alongside the word rows.
Supervised models (labels) and quantized models (``.ftz``) are refused with a message
that says so.

Files fastText wrote before its format got a version (2017, e.g. gensim's test models
``lee_fasttext.bin``) have no magic number: the header starts with ``dim, ws`` directly,
the dictionary has no ``pruneidx_size`` and the matrices no ``quantized`` flag. They are
recognised by a header that is plausible field by field (`old_header`), as gensim's loader
tells them apart, and read the same way otherwise.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Generator
from dataclasses import dataclass

import numpy as np

from ..errors import CorruptVectorFile, UnknownFormat, VectorFileError
from ..subwords import compose, ngram_buckets
from ._binary import MAX_TOKEN, undecodable
from ._source import Source
from ._types import ResumePoint, VectorBatch

__all__ = [
    "MAGIC",
    "FastTextBin",
    "fasttext_batches",
    "ngram_batches",
    "old_header",
    "open_fasttext",
]

MAGIC = 793712314
_ARGS = struct.Struct("<2i12id")  # magic, version, 12 int args, t
_OLD_ARGS = struct.Struct("<12id")  # the pre-2017 header: 12 int args, t
_DICT = struct.Struct("<3i2q")
_OLD_DICT = struct.Struct("<3iq")  # no pruneidx_size
_MATRIX = struct.Struct("<?2q")
_OLD_MATRIX = struct.Struct("<2q")  # no quantized flag
_CHUNK = 1 << 20
_MAX_DIM = 1 << 16


@dataclass(frozen=True)
class FastTextBin:
    """What the header and dictionary of a fastText ``.bin`` say (offsets in bytes).

    >>> FastTextBin(dim=5, min_n=3, max_n=6, bucket=100, nwords=22, dict_offset=92,
    ...             matrix_offset=400, model=1).vectors_offset
    417
    >>> FastTextBin(dim=5, min_n=3, max_n=6, bucket=100, nwords=22, dict_offset=76,
    ...             matrix_offset=400, model=1, versioned=False).vectors_offset
    416
    """

    dim: int
    min_n: int
    max_n: int
    bucket: int
    nwords: int
    dict_offset: int  # the first dictionary entry
    matrix_offset: int  # the input matrix's header
    model: int
    versioned: bool = True  # False: the pre-2017 layout without magic number

    @property
    def matrix_header(self) -> struct.Struct:
        return _MATRIX if self.versioned else _OLD_MATRIX

    @property
    def vectors_offset(self) -> int:
        return self.matrix_offset + self.matrix_header.size


class _File:
    """``pread`` with errors that name the file and the offset."""

    def __init__(self, src: Source):
        self.path = src.path
        if src.compression is not None:
            raise VectorFileError(
                self.path,
                f"a {src.compression}-compressed fastText .bin: decompress it first "
                "(its n-gram rows are read at random)",
            )
        self.fd = os.open(self.path, os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size
        self.done = 0  # bytes consumed, for progress

    def read(self, offset: int, n: int, what: str) -> bytes:
        data = os.pread(self.fd, n, offset) if offset < self.size else b""
        if len(data) < n:
            raise CorruptVectorFile(
                self.path,
                f"the file ends inside the {what} ({len(data)} of its {n} bytes)",
                offset=offset + len(data),
            )
        return data

    def close(self) -> None:
        os.close(self.fd)


def _entries(
    f: _File, offset: int, count: int, first: int
) -> Generator[tuple[list[bytes], np.ndarray, np.ndarray, list[int]], None, None]:
    """Dictionary entries from ``offset``, in chunks: tokens, counts, types, end offsets.

    ``first`` is the number of the first entry (from 0), for messages.
    """
    done = 0
    while done < count:
        buf = os.pread(f.fd, _CHUNK + MAX_TOKEN + 9, offset)
        tokens: list[bytes] = []
        ends: list[int] = []
        pos = 0
        limit = min(len(buf), _CHUNK)
        while done + len(tokens) < count and pos < limit:
            z = buf.find(b"\0", pos)
            if z >= 0 and z - pos > MAX_TOKEN:
                raise CorruptVectorFile(
                    f.path,
                    f"a dictionary word longer than {MAX_TOKEN} bytes: corrupt?",
                    offset=offset + pos,
                )
            if z < 0 or z + 10 > len(buf):
                if len(buf) < _CHUNK + MAX_TOKEN + 9:  # the end of the file
                    what = "a word" if z < 0 else "a word's count"
                    raise CorruptVectorFile(
                        f.path,
                        f"the file ends inside the dictionary ({what}; entry "
                        f"{first + done + len(tokens) + 1} of {count + first})",
                        offset=offset + pos,
                    )
                raise CorruptVectorFile(
                    f.path,
                    f"a dictionary word longer than {MAX_TOKEN} bytes: corrupt?",
                    offset=offset + pos,
                )
            tokens.append(buf[pos:z])
            ends.append(z)
            pos = z + 10
        if not tokens:  # a chunk boundary inside a long token: read from it
            raise CorruptVectorFile(f.path, "a dictionary entry does not parse", offset=offset)
        e = np.array(ends, dtype=np.int64)
        arr = np.frombuffer(buf, dtype=np.uint8)
        counts = arr[(e + 1)[:, None] + np.arange(8)].copy().view("<i8").ravel()
        types = arr[e + 9].view(np.int8)
        yield tokens, counts, types, (e + 10 + offset).tolist()
        offset += pos
        done += len(tokens)


def open_fasttext(src: Source, *, encoding: str, errors: str) -> tuple[_File, FastTextBin]:
    """Check a ``.bin``'s header, dictionary and sizes; its layout, or CorruptVectorFile."""
    f = _File(src)
    try:
        return f, _check(f, encoding=encoding, errors=errors)
    except BaseException:
        f.close()
        raise


def old_header(head: bytes) -> tuple | None:
    """The 13 fields of a pre-2017 header (no magic number), or None where implausible.

    Every field must be in the range fastText allows (dimension, window, epochs, counts,
    loss 1-4, model 1-3, n-gram lengths, a sampling threshold in (0, 1]): random bytes and
    the text formats fail at the first fields.

    >>> old_header(_OLD_ARGS.pack(100, 5, 5, 5, 5, 1, 2, 2, 2000000, 3, 6, 100, 1e-4))[:3]
    (100, 5, 5)
    >>> old_header(b"3000000 300\\n" + bytes(44)) is None
    True
    """
    if len(head) < _OLD_ARGS.size:
        return None
    args = _OLD_ARGS.unpack_from(head)
    dim, ws, epoch, min_count, neg, word_ngrams, loss, model, bucket, minn, maxn, lr_rate, t = args
    checks = (
        1 <= dim <= _MAX_DIM,
        1 <= ws <= 1000,
        1 <= epoch <= 100_000,
        min_count >= 0,
        0 <= neg <= 1000,
        1 <= word_ngrams <= 100,
        1 <= loss <= 4,
        1 <= model <= 3,
        bucket >= 0,
        0 <= minn <= 64,
        0 <= maxn <= 64,
        lr_rate >= 1,
        0 < t <= 1,
    )
    plausible = all(checks)
    return args if plausible else None


def _check(f: _File, *, encoding: str, errors: str) -> FastTextBin:
    """The layout of a native fastText ``.bin``, every part checked: the header, the
    dictionary (each word decodable) and both matrices' sizes against the file's."""
    versioned, args, off, dict_struct = _check_header(f)
    dim, _ws, _ep, _mc, _neg, _wng, _loss, model, bucket, minn, maxn, _lr, _t = args
    nwords, off = _check_dictionary_head(f, off, dict_struct)
    dict_offset = off
    off = _check_words(f, off, nwords, encoding=encoding, errors=errors)
    matrix = _MATRIX if versioned else _OLD_MATRIX
    layout = FastTextBin(
        dim=dim,
        min_n=minn,
        max_n=maxn,
        bucket=bucket,
        nwords=nwords,
        dict_offset=dict_offset,
        matrix_offset=off,
        model=model,
        versioned=versioned,
    )
    _check_matrices(f, layout, matrix)
    return layout


def _check_header(f: _File):
    """``(versioned, args, offset after them, dictionary struct)``, the args checked."""
    path = f.path
    head = f.read(0, _OLD_ARGS.size, "header")
    versioned = head[:4] == MAGIC.to_bytes(4, "little")
    if versioned:
        _magic, version, *args = _ARGS.unpack(f.read(0, _ARGS.size, "header"))
        if version not in (11, 12):
            raise CorruptVectorFile(
                path, f"fastText format version {version}; 11 or 12 are read", offset=4
            )
        off, base, dict_struct = _ARGS.size, 8, _DICT
    else:
        args = old_header(head)
        if args is None:
            raise UnknownFormat(
                path,
                "not a fastText .bin (no magic number 793712314 at byte 0, nor a pre-2017 header)",
            )
        off, base, dict_struct = _OLD_ARGS.size, 0, _OLD_DICT
    dim, _ws, _ep, _mc, _neg, _wng, _loss, model, bucket, minn, maxn, _lr, _t = args
    if not 1 <= dim <= _MAX_DIM:
        raise CorruptVectorFile(path, f"dimension {dim} in the header", offset=base)
    if model == 3:
        raise UnknownFormat(
            path, "a supervised fastText model (classifier): it has no word vectors to serve"
        )
    if model not in (1, 2):
        raise CorruptVectorFile(path, f"model type {model} (1 cbow, 2 skipgram)", offset=base + 28)
    if bucket < 0 or minn < 0 or maxn < 0 or (maxn and minn > maxn) or maxn > 64 or minn > 64:
        raise CorruptVectorFile(
            path, f"n-gram settings minn {minn}, maxn {maxn}, bucket {bucket}", offset=base + 32
        )
    return versioned, args, off, dict_struct


def _check_dictionary_head(f: _File, off: int, dict_struct) -> tuple[int, int]:
    """``(words, offset of the first entry)`` from the dictionary's own header."""
    path = f.path
    size, nwords, nlabels, ntokens, *pruned = dict_struct.unpack(
        f.read(off, dict_struct.size, "dictionary")
    )
    pruneidx = pruned[0] if pruned else 0
    if nlabels:
        raise UnknownFormat(path, f"a supervised fastText model ({nlabels} labels)")
    if size < 0 or nwords != size:
        raise CorruptVectorFile(
            path, f"the dictionary declares {size} entries and {nwords} words", offset=off
        )
    if ntokens < 0:
        raise CorruptVectorFile(path, f"the dictionary declares {ntokens} tokens", offset=off + 12)
    if pruneidx > 0:
        raise UnknownFormat(
            path, "a pruned (quantized) fastText model: load the .bin it was quantized from"
        )
    return nwords, off + dict_struct.size


def _check_words(f: _File, off: int, size: int, *, encoding: str, errors: str) -> int:
    """Check every dictionary entry (a decodable word of type 0); the offset after them."""
    path = f.path
    n = 0
    for tokens, counts, types, ends in _entries(f, off, size, 0):
        for i, raw in enumerate(tokens):
            try:
                raw.decode(encoding, errors)
            except UnicodeDecodeError as exc:
                raise CorruptVectorFile(
                    path,
                    undecodable(exc, raw, encoding, "word"),
                    record=n + i + 1,
                    offset=ends[i] - 10 - len(raw),
                ) from None
        bad = np.flatnonzero((types != 0) | (counts < 0))
        if len(bad):
            i = int(bad[0])
            raise CorruptVectorFile(
                path,
                f"dictionary entry {n + i + 1} has type {int(types[i])} and count {int(counts[i])}",
                record=n + i + 1,
                offset=ends[i] - 9,
            )
        n += len(tokens)
        off = ends[-1]
        f.done = off
    return off


def _check_matrices(f: _File, layout: FastTextBin, matrix) -> None:
    """Check the input matrix (words + buckets rows x dim) and that the output matrix
    ends the file."""
    path, off, dim = f.path, layout.matrix_offset, layout.dim
    nwords, bucket = layout.nwords, layout.bucket
    quantized, rows, cols = _matrix_header(f, off, matrix, "input")
    if quantized:
        raise UnknownFormat(
            path,
            "a quantized fastText model (.ftz): its vectors are "
            "compressed; load the .bin it was quantized from",
        )
    if rows != nwords + bucket or cols != dim:
        raise CorruptVectorFile(
            path,
            f"the input matrix is {rows} x {cols}, expected {nwords} words + {bucket} "
            f"buckets = {nwords + bucket} x {dim}",
            offset=off + matrix.size - 16,
        )
    out = layout.vectors_offset + 4 * rows * cols
    if out + matrix.size > f.size:
        raise CorruptVectorFile(
            path,
            f"the file is truncated: {f.size} bytes, the input matrix alone needs {out}",
            offset=min(f.size, out),
        )
    _q, orows, ocols = _matrix_header(f, out, matrix, "output")
    end = out + matrix.size + 4 * orows * ocols
    if orows < 0 or ocols != dim:
        raise CorruptVectorFile(
            path, f"the output matrix header ({orows} x {ocols}) is corrupt", offset=out
        )
    if end != f.size:
        raise CorruptVectorFile(
            path,
            f"the file has {f.size} bytes, its matrices end at byte {end}: "
            f"{'truncated' if f.size < end else 'trailing data'}",
            offset=min(f.size, end),
        )


def _matrix_header(f: _File, off: int, matrix: struct.Struct, which: str) -> tuple:
    """``(quantized, rows, cols)`` of the matrix header at ``off`` (old ones: never quantized)."""
    raw = f.read(off, matrix.size, f"{which} matrix header")
    if matrix is _OLD_MATRIX:
        return (False, *matrix.unpack(raw))
    if raw[0] > 1:
        raise CorruptVectorFile(
            f.path, f"the {which} matrix's quantized flag is not 0 or 1", offset=off
        )
    return matrix.unpack(raw)


def _matrix(f: _File, layout: FastTextBin) -> tuple[mmap.mmap, np.ndarray]:
    rows = layout.nwords + layout.bucket
    mm = mmap.mmap(f.fd, 0, access=mmap.ACCESS_READ)
    return mm, np.ndarray((rows, layout.dim), "<f4", buffer=mm, offset=layout.vectors_offset)


def fasttext_batches(
    f: _File,
    layout: FastTextBin,
    *,
    count: int,
    records: int,
    resume_offset: int | None,
    batch_size: int,
    encoding: str,
    errors: str,
) -> Generator[VectorBatch, None, None]:
    """Word batches of words ``records`` to ``count`` (from dictionary byte ``resume_offset``)."""
    mm, mat = _matrix(f, layout)
    ngram_rows = mat[layout.nwords :]
    try:
        offset = layout.dict_offset if resume_offset is None else resume_offset
        left = count - records
        for raw, counts, _types, ends in _entries(f, offset, left, records):
            words = [t.decode(encoding, errors) for t in raw]
            for lo in range(0, len(words), batch_size):
                hi = min(lo + batch_size, len(words))
                yield _word_batch(
                    words[lo:hi],
                    counts[lo:hi],
                    mat[records : records + hi - lo],
                    ngram_rows,
                    layout,
                    ResumePoint(ends[hi - 1], records + hi - lo),
                )
                records += hi - lo
                f.done = layout.vectors_offset + 4 * layout.dim * records
    finally:
        del mat, ngram_rows
        _close(mm)


def _word_batch(words, counts, own, ngram_rows, layout, resume) -> VectorBatch:
    base = np.array(own, dtype=np.float32)
    if layout.bucket and layout.max_n:
        ids = ngram_buckets(words, layout.min_n, layout.max_n, layout.bucket)
        if any(len(b) for b in ids):
            uniq, inverse = np.unique(np.concatenate(ids), return_inverse=True)
            rows = np.array(ngram_rows[uniq.astype(np.int64)], dtype=np.float32)
            local = np.split(inverse, np.cumsum([len(b) for b in ids])[:-1])
            base = compose(base, local, rows)
    return VectorBatch(words, base, np.asarray(counts, dtype=np.int64), resume)


def ngram_batches(
    f: _File, layout: FastTextBin, *, batch_size: int
) -> Generator[tuple[int, np.ndarray], None, None]:
    """``(first bucket, float32 rows)`` of every n-gram bucket row, in order."""
    mm, mat = _matrix(f, layout)
    try:
        for lo in range(0, layout.bucket, batch_size):
            hi = min(lo + batch_size, layout.bucket)
            yield lo, np.array(mat[layout.nwords + lo : layout.nwords + hi], dtype=np.float32)
            f.done = layout.vectors_offset + 4 * layout.dim * (layout.nwords + hi)
    finally:
        del mat
        _close(mm)


def _close(mm: mmap.mmap) -> None:
    with contextlib.suppress(BufferError):  # a view is still alive: the collector closes it
        mm.close()
