"""word2vec binary: ``count dim`` line, then records ``token<space><dim x little-endian f4>``.

Records are cut exactly as gensim 4.4's ``_add_bytes_to_kv`` cuts them: the token is
everything up to the next space (decoded with ``unicode_errors``, then stripped of
leading newlines), the vector the ``4 * dim`` bytes after it.

Per record, Python does only ``bytes.find`` and an append (~150 ns); per buffer of a few
MB, NumPy gathers the vectors (one fancy index on a ``V{4*dim}`` view: a memcpy each)
and the token bytes, which are decoded in one call: a space cannot occur inside a
token and UTF-8 (like the single-byte codecs) decodes the same either side of an ASCII
byte, so ``b" ".join(tokens).decode().split(" ")`` equals decoding each token. Other
codecs, and strict decoding that fails, take the per-token path, which finds the bad
token. Where the file is UTF-8 and a buffer's tokens all decode strictly, the token bytes
are the bytes of their keys: they are kept (``VectorBatch.raw``), split as bytes, and the
decode only checks them (the loader writes them as they are; ``tokens`` is decoded only
when asked for).
"""

from __future__ import annotations

import codecs
from collections.abc import Generator

import numpy as np

from ..errors import CorruptVectorFile, FormatMismatch, TrailingData
from ._source import Source
from ._types import ResumePoint, VectorBatch

__all__ = ["MAX_TOKEN", "binary_batches", "undecodable"]

MAX_TOKEN = 1 << 16  # a longer "token" means the file is not what it claims to be
_JOINABLE = {"utf-8", "ascii", "latin-1", "iso8859-1", "cp1252"}  # decode alike when joined


def binary_batches(
    src: Source,
    *,
    dim: int,
    count: int,
    records: int,
    batch_size: int,
    encoding: str,
    errors: str,
    whole: bool = False,
) -> Generator[VectorBatch, None, None]:
    """Batches of records ``records`` to ``count`` from ``src``, positioned at a record.

    ``whole``: ``count`` is the header's, so the file must end after it (up to one
    newline, which word2vec's own tool writes after every vector); `TrailingData` if not.
    The first record's vector must not read as text (`FormatMismatch`): a text file
    parsed as binary would give number tokens and vectors made of digits.
    """
    vb, vbp1 = 4 * dim, 4 * dim + 1
    row = np.dtype((np.void, vb))  # one vector's bytes, copied as one item
    joinable = codecs.lookup(encoding).name in _JOINABLE
    buf, pos, base = b"", 0, src.offset  # base: decompressed offset of buf[0]
    chunk: bytes | None = None  # a new chunk while ``buf`` is only a bridge into it
    # the bytes from the first record on, kept while a wrong header dimension can show
    opening: bytes | None = b"" if records == 0 else None
    rest = 0  # the bytes of ``buf`` before the chunk, in the bridge
    src.start_readahead()
    while records < count:
        n = min(batch_size, count - records)
        tokens: list[bytes] | list[str] = []  # bytes while every buffer's were valid UTF-8
        out = np.empty(n, dtype=row)  # the batch's vectors, gathered in place
        error: CorruptVectorFile | None = None
        while True:
            spaces: list[int] = []
            find, add, limit, p = buf.find, spaces.append, len(buf) - vb, pos
            for _ in range(1 if chunk is not None else n - len(tokens)):  # the hot loop
                i = find(b" ", p)
                if i < 0 or i >= limit:
                    break
                add(i)
                p = i + vbp1
            if spaces:
                where = (src.path, base, records + len(tokens))
                got, error, pos = _gather(
                    buf, pos, p, spaces, out[len(tokens) :], row, encoding, errors, joinable, where
                )
                tokens = _join(tokens, got)
            if chunk is not None:  # leave the bridge for the chunk it leads into
                buf, base, pos = _leave_bridge(buf, base, pos, rest, chunk)
                chunk = None
                if error is None and len(tokens) < n:
                    continue  # parse on in the chunk
            if error is not None or len(tokens) == n:
                break
            done = records + len(tokens)
            if len(buf) - pos > vb + MAX_TOKEN:  # no record ends in more than a record's bytes
                error = CorruptVectorFile(
                    src.path, _NO_RECORD.format(len(buf) - pos), record=done + 1, offset=base + pos
                )
                break
            data = src.read(src.chunk_size)
            if opening is not None and len(opening) < _OPENING:
                opening += data[: _OPENING - len(opening)]
            if not data:
                error = _binary_eof(src.path, buf[pos:], vb, count, done, base + pos)
                break
            rest = len(buf) - pos
            buf, base, pos, chunk = _extend(buf, pos, base, data, vb)
        if tokens and records == 0:
            _refuse_text_vector(src.path, _as_str(tokens[0]), out[0].tobytes(), dim)
        if error is not None and opening is not None and records + len(tokens) < _OPENING_RECORDS:
            error = _wrong_dim(src.path, error, opening, dim, count, encoding)
        if tokens:
            records += len(tokens)
            yield _batch(tokens, out, dim, ResumePoint(base + pos, records))
            if records >= _OPENING_RECORDS:
                opening = None
        if error is not None:
            raise error
    if whole:
        trailing = _trailing_bytes(src, buf[pos:], count, base + pos)
        if trailing is not None:
            raise trailing


_NO_RECORD = "no complete record within {} bytes; not word2vec binary?"


def _batch(tokens: list, out: np.ndarray, dim: int, resume: ResumePoint) -> VectorBatch:
    """The batch of ``tokens`` (their key bytes, or str where a buffer's were not valid
    UTF-8) and their vectors, gathered in ``out``'s first rows."""
    vectors = out[: len(tokens)].view("<f4").reshape(len(tokens), dim)
    vectors = vectors.astype(np.float32, copy=False)  # (a copy on big-endian hosts)
    if isinstance(tokens[0], bytes):
        return VectorBatch(None, vectors, None, resume, raw=tokens)
    return VectorBatch(tokens, vectors, None, resume)


def _extend(buf: bytes, pos: int, base: int, data: bytes, vb: int):
    """The parse buffer once chunk ``data`` is read: ``(buf, base, pos, chunk)``. Where
    a record is cut by the chunk boundary, ``buf`` is a small bridge (the cut record and
    the chunk's first bytes) and ``chunk`` the chunk to go on in, rather than a copy of
    the whole chunk behind those bytes; else ``chunk`` is None."""
    if len(buf) > pos and len(data) > 4 * (vb + MAX_TOKEN):
        return buf[pos:] + data[: vb + MAX_TOKEN + 1], base + pos, 0, data
    return buf[pos:] + data, base + pos, 0, None


def _leave_bridge(buf: bytes, base: int, pos: int, rest: int, chunk: bytes):
    """``(buf, base, pos)`` past a bridge whose first ``rest`` bytes came before ``chunk``."""
    if pos >= rest:  # the record across the boundary was parsed: go on in the chunk
        return chunk, base + rest, pos - rest
    return buf[:rest] + chunk, base, pos  # it was not (a decoding error, a long token): join


def _join(tokens: list, got: list) -> list:
    """``tokens + got``, all bytes (UTF-8 key bytes) or all str: where one side is str,
    the other side's bytes are decoded."""
    if not got:
        return tokens
    if not tokens or isinstance(tokens[0], bytes) == isinstance(got[0], bytes):
        return tokens + got
    return [_as_str(t) for t in tokens] + [_as_str(t) for t in got]


def _as_str(token: bytes | str) -> str:
    """A token as str (bytes here are valid UTF-8)."""
    return token.decode("utf-8") if isinstance(token, bytes) else token


def _gather(buf, pos, end, spaces, out, row, encoding, errors, joinable, where):
    """The records of ``buf`` from ``pos`` whose tokens end at ``spaces``: their tokens
    (UTF-8 bytes where ``encoding`` is UTF-8 and they all are valid, else decoded), their
    vectors copied into ``out``; ``(tokens, error or None, new pos)``, the error and the
    position at the first token that does not decode. ``where``: ``(path, base, records
    before these)``, for the error's file and position."""
    vbp1 = row.itemsize + 1
    sp = np.array(spaces, dtype=np.intp)
    starts = np.empty_like(sp)
    starts[0], starts[1:] = pos, sp[:-1] + vbp1
    got, bad = _decode_tokens(buf, starts, sp, encoding, errors, joinable)
    if bad is not None:
        sp, end = sp[: len(got)], int(starts[len(got)])
    rows = np.ndarray((len(buf) - row.itemsize + 1,), row, buffer=buf, strides=(1,))
    out[: len(got)] = rows[sp + 1]
    if bad is None:
        return got, None, end
    path, base, before = where
    return got, CorruptVectorFile(path, bad, record=before + len(got) + 1, offset=base + end), end


def _refuse_text_vector(path: str, token: str, vector: bytes, dim: int) -> None:
    """`FormatMismatch` when the first vector reads as text: a text file parsed as binary."""
    if dim >= 4 and _is_text(vector):
        raise FormatMismatch(
            path,
            f"the vector of {token[:40]!r} is text ({vector[:40]!r}), not "
            "binary float32: the file is not w2v-bin but a text format; pass --format "
            "w2v-text, fasttext or glove, or leave --format out to detect it",
            declared="w2v-bin",
            detected=None,
        )


def _wrong_dim(path, error: CorruptVectorFile, opening: bytes, dim, count, encoding):
    """``error``, or where the first records read as vectors of another size, the error
    that says the header's dimension (not the bytes) is wrong."""
    fits = _fitting_dim(opening, dim, min(count, _OPENING_RECORDS), encoding)
    if fits is None:
        return error
    return CorruptVectorFile(
        path,
        f"the records do not fit the header's dimension {dim}: they read as "
        f"{fits}-d vectors (is the header wrong, or the file not word2vec "
        "binary?)",
        record=error.record,
        offset=error.offset,
    )


_OPENING = 1 << 16  # bytes of the first records kept to diagnose a wrong dimension
_OPENING_RECORDS = 64  # records within which a wrong dimension is diagnosed


def _fitting_dim(data: bytes, dim: int, records: int, encoding: str) -> int | None:
    """Another dimension than ``dim`` whose records of ``data`` (from the first record
    on) all have a plausible token -- strictly decodable, no control bytes, at most 256
    bytes -- over the first ``records`` records (or 16 and more, when ``data`` is only
    the file's opening), or None.

    >>> import numpy as np
    >>> two = b"".join(w + b" " + np.ones(4, "<f4").tobytes() for w in (b"a", b"bc", b"d"))
    >>> _fitting_dim(two, 5, 3, "utf-8")
    4
    """
    for d in range(1, _OPENING // 4):
        if d == dim:
            continue
        p, n = 0, 0
        while n < records:
            i = data.find(b" ", p, p + 257)
            if i < 0:
                break
            token = data[p:i].lstrip(b"\n")
            if not token or token.translate(None, _PRINTABLE_AND_HIGH):
                break
            try:
                token.decode(encoding)
            except UnicodeDecodeError:
                break
            p, n = i + 1 + 4 * d, n + 1
            if p >= len(data):
                break
        if n == records or (len(data) == _OPENING and p >= len(data) and n >= 16):
            return d
    return None


_PRINTABLE_AND_HIGH = bytes(range(0x21, 0x7F)) + bytes(range(0x80, 0x100))


def _is_text(raw: bytes) -> bool:
    """Whether a vector's bytes are all printable ASCII (or tabs, newlines): numbers
    written as text. A float32 vector of 4 or more components is that by chance with
    odds below 1e-5 (its mantissa bytes are near uniform)."""
    return not raw.translate(None, _TEXT_BYTES)


_TEXT_BYTES = bytes(range(0x20, 0x7F)) + b"\t\n\r"


def _trailing_bytes(src: Source, tail: bytes, count: int, offset: int) -> TrailingData | None:
    """`TrailingData` if more than one final newline follows the last record, else None.

    Reads the rest of the stream to say how many bytes remain (an error path only)."""
    n, first = len(tail), tail[:2]
    while len(first) < 2 and (data := src.read(src.chunk_size)):
        n, first = n + len(data), first + data[: 2 - len(first)]
    if first in (b"", b"\n"):
        return None
    while data := src.read(src.chunk_size):
        n += len(data)
    return TrailingData(
        src.path,
        f"{n:,} bytes remain after the {count:,} vectors the header declares: its count "
        f"is wrong, or the file is not word2vec binary; pass --limit {count} to read only "
        "those vectors",
        remaining=n,
        lines=None,
        record=count + 1,
        offset=offset,
    )


def _decode_tokens(
    buf: bytes, starts: np.ndarray, spaces: np.ndarray, encoding: str, errors: str, joinable: bool
) -> tuple[list[bytes] | list[str], str | None]:
    """The tokens ``buf[starts[k]:spaces[k]]`` as gensim decodes them, and an error message.

    In UTF-8, where they all decode strictly, the tokens are their bytes (the same tokens:
    ``unicode_errors`` changes nothing in valid bytes). On an undecodable token, returns
    the tokens before it and the message.
    """
    if joinable:
        arr = np.frombuffer(buf, np.uint8)
        s = starts.copy()
        while (nl := (s < spaces) & (arr[s] == 10)).any():  # leading newlines, as bytes
            s[nl] += 1
        lengths = spaces - s + 1  # each token with the space after it
        ends = np.cumsum(lengths)
        joined = arr[np.arange(int(ends[-1])) + np.repeat(s - (ends - lengths), lengths)]
        data = joined.tobytes()
        if codecs.lookup(encoding).name == "utf-8":
            try:
                data.decode("utf-8")  # checked, not kept: the bytes are the key bytes
            except UnicodeDecodeError:
                pass  # decode with ``errors`` below, or find the bad token
            else:
                raw = data.split(b" ")
                raw.pop()
                return raw, None
        try:
            text = data.decode(encoding, errors)
        except UnicodeDecodeError:
            text = ""  # find the bad token below
        tokens = text.split(" ")
        tokens.pop()
        if len(tokens) == len(starts):
            # a newline left behind bytes that "ignore" dropped: strip it as gensim does
            return ([t.lstrip("\n") for t in tokens] if "\n" in text else tokens), None
    tokens = []
    for a, b in zip(starts.tolist(), spaces.tolist(), strict=True):
        try:
            token = buf[a:b].decode(encoding, errors)
        except UnicodeDecodeError as exc:
            return tokens, undecodable(exc, buf[a:b], encoding)
        tokens.append(token.lstrip("\n"))
    return tokens, None


def undecodable(exc: UnicodeDecodeError, raw: bytes, encoding: str, what: str = "token") -> str:
    """The message for bytes that do not decode with ``unicode_errors="strict"``."""
    return (
        f"{raw[max(0, exc.start - 40) : exc.start + 40]!r} is not valid {encoding} "
        f"({exc.reason} at byte {exc.start} of the {what}); "
        "name the file's encoding with --encoding if it is another, or pass "
        "--unicode-errors replace (or ignore) to load it anyway"
    )


def _binary_eof(
    path: str, rest: bytes, vb: int, count: int, done: int, offset: int
) -> CorruptVectorFile:
    """The error for a binary file that ends before its header's ``count`` records."""
    where = {"record": done + 1, "offset": offset}
    if not rest.strip():
        return CorruptVectorFile(
            path, f"the header promises {count} vectors but the file ends after {done}", **where
        )
    token, space, floats = rest.lstrip(b"\n").partition(b" ")
    if not space:
        return CorruptVectorFile(path, f"the file ends inside a token ({token[:80]!r})", **where)
    return CorruptVectorFile(
        path,
        f"the file is truncated: the vector of {token[:80]!r} has {len(floats)} of its {vb} bytes",
        **where,
    )
