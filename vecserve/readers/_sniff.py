"""Recognising a file's format from its first bytes, and parsing its first line."""

from __future__ import annotations

import os

from ..errors import CorruptVectorFile, FormatMismatch, UnknownFormat
from ._fasttext import old_header
from ._source import SNIFF, Source
from .formats import FORMATS, by_name

__all__ = ["FORMATS", "check_declared", "detect_format", "glove_dim", "parse_header", "sniff"]

_PICKLE_PROTOCOLS = b"\x02\x03\x04\x05"
_FASTTEXT_MAGIC = (793712314).to_bytes(4, "little")  # fastText's own .bin models


def parse_header(line: bytes, encoding: str) -> tuple[int, int] | None:
    """``(count, dim)`` from a ``count dim`` line (as gensim parses it), or None."""
    try:
        fields = line.decode(encoding).split()
        count, dim = (int(x) for x in fields) if len(fields) == 2 else (-1, -1)
    except (UnicodeDecodeError, ValueError):
        return None
    return (count, dim) if count >= 0 and dim >= 1 else None


def _is_float(field: str | bytes) -> bool:
    try:
        float(field)
    except ValueError:
        return False
    return True


def glove_dim(line: bytes, encoding: str) -> int:
    """Number of trailing numeric fields of a GloVe line (a token keeps >= 1 field)."""
    parts = line.rstrip().decode(encoding, "replace").split(" ")
    dim = 0
    while dim < len(parts) - 1 and _is_float(parts[-1 - dim]):
        dim += 1
    return dim


def sniff(prefix: bytes, path: str, encoding: str) -> str:
    """The format of a file whose decompressed stream starts with ``prefix``."""
    if not prefix:
        raise CorruptVectorFile(path, "the file is empty", offset=0)
    if prefix[:1] == b"\x80" and prefix[1:2] and prefix[1] in _PICKLE_PROTOCOLS:
        return "gensim"
    if prefix[:4] == _FASTTEXT_MAGIC or old_header(prefix) is not None:
        return "fasttext-bin"
    first, _, rest = prefix.partition(b"\n")
    if parse_header(first, encoding) is not None:
        name = path.lower().removesuffix(".gz").removesuffix(".bz2")
        text = "fasttext" if name.endswith(".vec") else "w2v-text"
        if not rest:  # a header and nothing else: the extension decides
            return "w2v-bin" if name.endswith(".bin") else text
        line2, newline, _ = rest.partition(b"\n")
        parts = line2.rstrip().split(b" ")
        if not newline and len(prefix) >= SNIFF and len(parts) > 2:
            del parts[-1]  # cut short by the sniffing limit
        looks_text = len(parts) >= 2 and all(_is_float(p) for p in parts[1:])
        return text if looks_text else "w2v-bin"
    if glove_dim(first, encoding) >= 1:
        return "glove"
    raise UnknownFormat(
        path,
        f"cannot detect the format: line 1 ({first[:60]!r}) is neither a 'count dim' header "
        f"nor a GloVe line of a token and numbers; pass --format, one of {', '.join(FORMATS)}",
    )


_TEXT_BYTES = frozenset(range(0x20, 0x7F)) | {0x09, 0x0A, 0x0D}


def _text_like(data: bytes) -> bool:
    """Whether ``data`` reads as text: printable ASCII, tabs, newlines, or UTF-8 beyond it."""
    if all(b in _TEXT_BYTES for b in data):
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(data) - 3 and exc.reason == "unexpected end of data"
    return not any(b < 0x20 and b not in _TEXT_BYTES for b in data)


def looks_like(prefix: bytes, path: str, encoding: str) -> str | None:
    """The format the content plainly is, or None where it is not plain.

    Unlike `sniff`, which must pick one, this names a format only on strong evidence (a
    pickle, fastText's header, a header then a record that is text or is not): the
    check of a format given by the caller (`check_declared`) must never refuse a file on
    a guess.
    """
    if not prefix:
        return None
    if prefix[:1] == b"\x80" and prefix[1:2] and prefix[1] in _PICKLE_PROTOCOLS:
        return "gensim"
    if prefix[:4] == _FASTTEXT_MAGIC or old_header(prefix) is not None:
        return "fasttext-bin"
    first, newline, rest = prefix.partition(b"\n")
    if not newline:
        return None
    header = parse_header(first, encoding)
    name = path.lower().removesuffix(".gz").removesuffix(".bz2")
    text = "fasttext" if name.endswith(".vec") else "w2v-text"
    if header is not None:
        dim = header[1]
        token, space, after = rest.partition(b" ")
        if not space or len(token) > 1000:
            return None
        record = after[: 4 * dim]
        if len(record) < min(4 * dim, 16):
            return None
        if not _text_like(record):
            return "w2v-bin"
        line = rest.partition(b"\n")[0].rstrip().split(b" ")
        if len(line) == dim + 1 and all(_is_float(f) for f in line[1:]):
            return text
        return None
    second, newline, _ = rest.partition(b"\n")
    lines = [first, second] if newline else [first]
    if all(map(_text_like, lines)):
        dims = {glove_dim(line, encoding) for line in lines}
        if len(dims) == 1 and min(dims) >= 1:  # the first two lines agree
            return "glove"
    return None


def check_declared(prefix: bytes, path: str, declared: str, encoding: str) -> None:
    """Raise `FormatMismatch` when the content plainly is another format than ``declared``.

    word2vec text and fastText ``.vec`` are one layout: either name fits either file.
    """
    detected = looks_like(prefix, path, encoding)
    same = {detected, declared} <= {"w2v-text", "fasttext"}
    if detected is None or detected == declared or same:
        return
    raise FormatMismatch(
        path,
        f"the content is not {declared}: it looks like {detected} ({by_name(detected).looks}); "
        f"pass --format {detected}, or leave --format out to detect it",
        declared=declared,
        detected=detected,
    )


def detect_format(path: str | os.PathLike[str], *, encoding: str = "utf-8") -> str:
    """Recognise a vector file's format from its content (decompressing gzip/bz2).

    A pickle is a gensim ``KeyedVectors.save()`` file; fastText's magic number (or a
    plausible pre-2017 fastText header) is a native fastText model (``fasttext-bin``, with
    its subwords); a first line of two integers is a
    word2vec header, followed by a text line (``w2v-text``, or ``fasttext`` for a
    ``.vec`` name) or by binary floats (``w2v-bin``); a first line of a token and numbers
    is GloVe.

    Raises
    ------
    UnknownFormat
        When the content fits none of `FORMATS`.
    CorruptVectorFile
        When the file is empty or its compression is damaged.
    VectorFileError
        When the file does not exist (wrapping ``FileNotFoundError``) or is a directory.

    Examples
    --------
    >>> detect_format("GoogleNews-vectors-negative300.bin.gz")  # doctest: +SKIP
    'w2v-bin'
    """
    path = os.fspath(path)
    src = Source(path)
    try:
        return sniff(src.peek(2), path, encoding)
    finally:
        src.close()
