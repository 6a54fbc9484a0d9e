"""`open_vectors`: a vector file opened, its format recognised (or checked) from its first
bytes and handed to that format's opener (`open_word2vec`, `open_fasttext_bin`,
`open_gensim`: their lines in :data:`vecserve.readers.formats.TABLE`), which reads its
header and returns the `VectorReader` (``_vectorreader``) that streams its batches."""

from __future__ import annotations

import codecs
import importlib
import os
import stat
import sys
from collections.abc import Iterable
from itertools import islice
from typing import Any, BinaryIO

from ..errors import CorruptVectorFile, InvalidSetting, UnknownFormat, VectorFileError
from ._binary import binary_batches
from ._dedup import TokenSet
from ._fasttext import fasttext_batches, ngram_batches, open_fasttext
from ._gensim import gensim_batches, gensim_subwords, load_keyed_vectors, side_files
from ._sniff import check_declared, glove_dim, parse_header, sniff
from ._source import SNIFF, STDIN, Source
from ._text import text_batches
from ._types import ResumePoint
from ._vectorreader import VectorReader, _Subwords, batch_for
from .formats import FORMATS, by_name

__all__ = ["is_pipe", "open_vectors"]


def is_pipe(path: str | os.PathLike[str] | BinaryIO) -> bool:
    """Whether ``path`` is read once, front to back: ``"-"`` (standard input), a binary
    stream, or a path that is no regular file (a named pipe, ``/dev/stdin``)."""
    if path == "-" or hasattr(path, "read"):
        return True
    try:
        mode = os.stat(path).st_mode  # type: ignore[arg-type]
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


def open_vectors(
    path: str | os.PathLike[str] | BinaryIO,
    *,
    format: str = "auto",
    limit: int | None = None,
    unicode_errors: str = "strict",
    encoding: str = "utf-8",
    batch_size: int | None = 2000,
    resume: ResumePoint | None = None,
    seen_tokens: Iterable[str] = (),
) -> VectorReader:
    """Open a word-vector file for streaming; see `vecserve.readers` for the formats.

    Parameters
    ----------
    path : str, PathLike or binary stream
        The file; gzip and bz2 compression are recognised by content. ``"-"`` reads
        standard input, and an object with ``read(n)`` is read as a stream: front to
        back, once, in constant memory (the text and word2vec binary formats; a native
        fastText ``.bin`` and a gensim file need a file).
    format : str, optional
        One of `FORMATS`, or "auto" (default) to recognise it with `detect_format`.
    limit : int, optional
        Read at most this many records (duplicates included), like gensim's ``limit``;
        None or 0 reads all.
    unicode_errors : str, optional
        How to decode token bytes: "strict" (default) raises `CorruptVectorFile`,
        "ignore"/"replace" give gensim's tokens.
    encoding : str, optional
        The tokens' encoding (an ASCII-compatible one), "utf-8" by default.
    batch_size : int, optional
        Records per batch (a batch holds fewer tokens when some are duplicates); None:
        about 2 MiB of float32 vectors a batch (``BATCH_BYTES``), for the file's ``dim``.
    resume : ResumePoint, optional
        Continue after the batch whose ``resume`` this is: the bytes before it are read
        (for the checksum) but not parsed.
    seen_tokens : iterable of str, optional
        With ``resume``: the tokens already loaded, for duplicate detection. (Or open
        without either and call `VectorReader.resume_from` before iterating: a loader
        learns where to go on from only once the file's header is read.)

    Returns
    -------
    VectorReader
        Use it as a context manager; ``dim`` and ``count`` are known at once.

    Raises
    ------
    VectorFileError
        The file does not exist (wrapping ``FileNotFoundError``) or is a directory.
    UnknownFormat
        ``format="auto"`` cannot recognise it, or ``format`` is not one of `FORMATS`.
    CorruptVectorFile
        The file is empty, its header is not two integers, or, during iteration, a
        record does not parse (`DimensionMismatch` for a wrong number of numbers).

    Examples
    --------
    >>> from gensim.test.utils import datapath
    >>> with open_vectors(datapath("euclidean_vectors.bin"), batch_size=10) as reader:
    ...     batch = next(iter(reader))
    >>> reader.format, reader.dim, reader.count, len(batch.tokens), batch.vectors.shape
    ('w2v-bin', 10, 2747, 10, (10, 10))
    """
    stream: BinaryIO | None = None
    if path == "-":
        if sys.stdin.isatty():
            raise VectorFileError(STDIN, "is a terminal: pipe a vector file into it")
        stream, path = sys.stdin.buffer, STDIN
    elif hasattr(path, "read"):
        stream, path = path, str(getattr(path, "name", "") or "<stream>")  # type: ignore[assignment]
    path = os.fspath(path)  # type: ignore[arg-type]
    owned = stream is None and is_pipe(path)
    if owned:  # a named pipe, /dev/stdin, `<(curl ...)`: read once, as a stream
        try:
            stream = open(path, "rb")  # noqa: SIM115 - closed by the Source
        except OSError as exc:
            raise VectorFileError(path, f"cannot open: {exc.strerror or exc}") from exc
    if format != "auto" and format not in FORMATS:
        raise UnknownFormat(path, f"unknown format {format!r}; choose auto or {', '.join(FORMATS)}")
    if limit is not None and limit < 0:
        raise InvalidSetting(f"limit must be >= 0 or None, not {limit}")
    if batch_size is not None and batch_size < 1:
        raise InvalidSetting(f"batch_size must be >= 1, not {batch_size}")
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise VectorFileError(
            path, f"unknown encoding {encoding!r} (--encoding, e.g. utf-8, latin-1)"
        ) from None
    try:
        codecs.lookup_error(unicode_errors)
    except LookupError:
        raise VectorFileError(
            path, f"unknown --unicode-errors {unicode_errors!r}: strict, ignore or replace"
        ) from None
    src = Source(path, stream, owned=owned)
    try:
        reader = _open(
            src,
            format,
            limit=limit or None,
            unicode_errors=unicode_errors,
            encoding=encoding,
            batch_size=batch_size,
        )
    except BaseException:
        src.close()
        raise
    try:
        if resume is not None or seen_tokens != ():  # else: the caller may still resume_from
            reader.resume_from(resume, seen_tokens)
        return reader
    except BaseException:
        reader.close()
        src.close()
        raise


def _open(
    src: Source,
    format: str,
    *,
    limit: int | None,
    unicode_errors: str,
    encoding: str,
    batch_size: int | None,
) -> VectorReader:
    """Recognise (or check) the format from the first bytes, then hand the open file to
    that format's opener (its line in :data:`vecserve.readers.formats.TABLE`)."""
    path = src.path
    prefix = src.peek(2)
    if not prefix:
        raise CorruptVectorFile(path, "the file is empty", offset=0)
    if format == "auto":
        fmt = sniff(prefix, path, encoding)
    else:
        check_declared(prefix, path, format, encoding)
        fmt = format
    line = by_name(fmt)
    if src.is_stream and not line.streams:
        raise VectorFileError(
            path,
            f"a {fmt} file cannot be read from a stream (its parts are read at random, or "
            "from files beside it): save it to a file and load that",
        )
    module, function = line.opener.split(":")
    opener = getattr(importlib.import_module(f".{module}", __package__), function)
    return opener(
        src,
        fmt,
        prefix,
        limit=limit,
        unicode_errors=unicode_errors,
        encoding=encoding,
        batch_size=batch_size,
    )


def _token_set(tokens: Iterable[str]) -> TokenSet:
    """The tokens a resumed load wrote, for duplicate detection (as UTF-8, like
    `VectorBatch.raw`, which it is checked against)."""
    seen = TokenSet()
    it = iter(tokens)
    while chunk := list(islice(it, 1 << 16)):
        seen.add_new([t.encode("utf-8", "surrogateescape") for t in chunk])
    return seen


def open_fasttext_bin(
    src: Source,
    fmt: str,
    prefix: bytes,
    *,
    limit: int | None,
    unicode_errors: str,
    encoding: str,
    batch_size: int | None,
) -> VectorReader:
    """The opener of a native fastText ``.bin``: its dictionary, then its n-gram rows."""
    path = src.path
    f, layout = open_fasttext(src, encoding=encoding, errors=unicode_errors)
    count = min(layout.nwords, limit) if limit else layout.nwords
    batch_size = batch_size or batch_for(layout.dim)
    sub = _Subwords(
        layout.min_n,
        layout.max_n,
        layout.bucket,
        lambda size: ngram_batches(f, layout, batch_size=size),
        f.close,
    )

    def start(resume: ResumePoint | None, seen_tokens: Iterable[str]):
        records = resume.records if resume else 0
        if resume is not None and not (
            layout.dict_offset <= resume.offset <= layout.matrix_offset and 0 <= records <= count
        ):
            raise ValueError(f"{resume} is not a point in the dictionary of {path}")
        batches = fasttext_batches(
            f,
            layout,
            count=count,
            records=records,
            resume_offset=resume.offset if resume else None,
            batch_size=batch_size,
            encoding=encoding,
            errors=unicode_errors,
        )
        return batches, _token_set(seen_tokens)

    return VectorReader(
        src,
        start,
        format=fmt,
        dim=layout.dim,
        count=count,
        bytes_read=lambda: f.done,
        subwords=sub,
    )


def open_gensim(
    src: Source,
    fmt: str,
    prefix: bytes,
    *,
    limit: int | None,
    unicode_errors: str,
    encoding: str,
    batch_size: int | None,
) -> VectorReader:
    """The opener of a gensim ``KeyedVectors.save()`` file (its tokens are unique)."""
    path = src.path
    kv = load_keyed_vectors(path, compressed=src.compression is not None)
    count = min(len(kv), limit) if limit else len(kv)
    done = [0]
    batch_size = batch_size or batch_for(int(kv.vector_size))

    def start(resume: ResumePoint | None, seen_tokens: Iterable[str]):
        done[0] = resume.records if resume else 0
        batches = gensim_batches(
            kv, count=count, records=done[0], batch_size=batch_size, progress=done
        )
        return batches, None

    extra = side_files(path)
    ngrams = gensim_subwords(kv)
    return VectorReader(
        src,
        start,
        format=fmt,
        dim=int(kv.vector_size),
        count=count,
        extra_files=extra,
        subwords=_Subwords(*ngrams) if ngrams else None,
        bytes_read=lambda: (
            (src.size_bytes + sum(map(os.path.getsize, extra))) * done[0] // max(count, 1)
        ),
    )


def open_word2vec(
    src: Source,
    fmt: str,
    prefix: bytes,
    *,
    limit: int | None,
    unicode_errors: str,
    encoding: str,
    batch_size: int | None,
) -> VectorReader:
    """The opener of the word2vec family: binary, text, fastText ``.vec``, GloVe."""
    path = src.path
    first, newline, _ = prefix.partition(b"\n")
    if fmt == "glove":
        dim, count, header, whole = glove_dim(first, encoding), None, False, False
        if dim < 1:
            raise CorruptVectorFile(path, f"{first[:60]!r} is not a GloVe line", line=1, offset=0)
    else:
        parsed = parse_header(first, encoding)
        if parsed is None or (not newline and len(prefix) >= SNIFF):
            raise CorruptVectorFile(
                path,
                f"{first[:60]!r} is not a 'count dim' header of two integers",
                line=1,
                offset=0,
            )
        declared, dim = parsed
        count, header = min(declared, limit) if limit else declared, True
        # bytes after the declared records are refused, unless --limit stops before them
        whole = not limit or limit > declared
        src.skip(len(first) + len(newline))

    def start(resume: ResumePoint | None, seen_tokens: Iterable[str]):
        if resume is not None:
            _skip_to(src, resume)
        options: dict[str, Any] = {
            "records": resume.records if resume else 0,
            "batch_size": batch_size or batch_for(dim),
            "encoding": encoding,
            "errors": unicode_errors,
        }
        if fmt == "w2v-bin":
            assert count is not None
            batches = binary_batches(src, dim=dim, count=count, whole=whole, **options)
        else:
            batches = text_batches(
                src,
                dim=dim,
                count=count if header else limit,
                header=header,
                whole=whole,
                glove=fmt == "glove",
                **options,
            )
        return batches, _token_set(seen_tokens)

    return VectorReader(src, start, format=fmt, dim=dim, count=count)


def _skip_to(src: Source, resume: ResumePoint) -> None:
    """Read (hash, decompress) but do not parse the bytes before ``resume``."""
    if resume.offset < src.offset or resume.records < 0:
        raise ValueError(f"{resume} is before the first record (byte {src.offset})")
    src.start_readahead()  # hash and decompress what is skipped on another thread
    if not src.skip(resume.offset - src.offset):
        raise CorruptVectorFile(
            src.path,
            f"the file ends before the resume point {resume}; did it change?",
            offset=src.offset,
        )
