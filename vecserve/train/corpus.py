"""Streaming corpus readers for the trainer.

Every reader yields *sentences*: lists of tokens. Files are read in big binary chunks and
split with ``bytes.split``, so tokens come out as ``bytes`` (the vocabulary pass decodes
only the words it keeps); a Python iterable of token lists is passed through as is.

Supported sources (:func:`iter_sentences`):

- a text file with one sentence per line (like gensim's ``LineSentence``);
- a text file that is one huge line of space-separated tokens (``text8``): lines longer
  than :data:`MAX_SENTENCE` tokens are cut into pseudo-sentences of that many tokens;
- ``.gz`` and ``.bz2`` compressed files;
- a directory: its regular files, in sorted order, one after the other;
- any iterable of token lists (a one-shot generator too: the trainer reads the corpus
  once, except with ``max_vocab_size`` pruning, which needs a restartable iterable).

>>> list(iter_sentences([["a", "b"], ["c"]]))
[['a', 'b'], ['c']]
"""

from __future__ import annotations

import bz2
import gzip
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Union

from ..errors import TrainingError

__all__ = [
    "CHUNK_BYTES",
    "MAX_SENTENCE",
    "Corpus",
    "Piece",
    "Shard",
    "corpus_files",
    "iter_sentences",
    "shard_corpus",
]

#: Longest sentence the kernels see; longer lines are split (gensim truncates instead).
MAX_SENTENCE = 10_000
#: Bytes read per chunk from a file.
CHUNK_BYTES = 1 << 20

Corpus = Union[str, os.PathLike, "Shard", Iterable[list]]


def corpus_files(path: str | os.PathLike) -> list[Path]:
    """The files a path stands for: itself, or a directory's regular files, sorted.

    Raises :class:`~vecserve.errors.TrainingError` for a missing or unreadable path.

    >>> corpus_files("/nonexistent")
    Traceback (most recent call last):
    ...
    vecserve.errors.TrainingError: corpus /nonexistent: no such file or directory
    """
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith("."))
        if not files:
            raise TrainingError(f"corpus {p}: directory holds no files")
    elif p.exists():
        files = [p]
    else:
        raise TrainingError(f"corpus {p}: no such file or directory")
    for f in files:
        if not os.access(f, os.R_OK):
            raise TrainingError(f"corpus {f}: permission denied")
    return files


def _open(path: Path) -> IO[bytes]:
    name = path.name.lower()
    try:
        if name.endswith(".gz"):
            return gzip.open(path, "rb")
        if name.endswith(".bz2"):
            return bz2.open(path, "rb")
        return open(path, "rb")
    except OSError as exc:
        raise TrainingError(f"corpus {path}: cannot open: {exc}") from exc


_SPACE = frozenset(b" \t\n\r\x0b\x0c")  # what bytes.split() splits on


def _range_chunks(fh, path: Path, start: int, end: int | None, chunk_bytes: int):
    """Chunks of the tokens whose first byte lies in ``[start, end)`` (end None: EOF).

    A token cut by ``start`` belongs to the range before (it is skipped here); a token
    cut by ``end`` is read to its end. So ranges that tile a file tile its tokens.
    """

    def read(n):
        try:
            return fh.read(n)
        except (OSError, EOFError, ValueError) as exc:
            raise TrainingError(f"corpus {path}: cannot read: {exc}") from exc

    pos = start
    if start > 0:
        fh.seek(start - 1)
        if read(1)[:1] not in (b"", *(bytes([c]) for c in _SPACE)):
            while True:  # inside a token that began before start: skip it
                chunk = read(min(chunk_bytes, 1 << 16))
                if not chunk:
                    return
                cut = next((i for i, c in enumerate(chunk) if c in _SPACE), -1)
                if cut >= 0:
                    pos += cut
                    fh.seek(pos)
                    break
                pos += len(chunk)
        if end is not None and pos >= end:
            return  # that token runs past the range: no token starts in it
    last = 32  # the byte before the range, as far as this range cares: a space
    while end is None or pos < end:
        chunk = read(chunk_bytes if end is None else min(chunk_bytes, end - pos))
        if not chunk:
            return
        pos += len(chunk)
        last = chunk[-1]
        yield chunk
    if last in _SPACE:
        return  # end falls between tokens
    # finish the token that straddles end
    while True:
        chunk = read(1 << 12)
        cut = next((i for i, c in enumerate(chunk) if c in _SPACE), -1)
        if cut >= 0:
            chunk = chunk[:cut]
        if chunk:
            yield chunk
        if cut >= 0 or not chunk:
            return


def _file_sentences(
    path: Path, chunk_bytes: int, start: int = 0, end: int | None = None
) -> Iterator[list[bytes]]:
    """Sentences of one file (or of its byte range), as lists of ``bytes`` tokens."""
    pending: list[bytes] = []  # tokens of the current, unfinished line
    tail = b""  # an unfinished token at the end of the previous chunk
    first = True
    with _open(path) as fh:
        chunks = _range_chunks(fh, path, start, end, chunk_bytes)
        while True:
            chunk = next(chunks, b"")
            if first:
                first = False
                if b"\x00" in chunk[:65536]:
                    raise TrainingError(
                        f"corpus {path}: looks like a binary file (NUL bytes), "
                        "expected text with space-separated tokens"
                    )
            if not chunk:
                break
            chunk = tail + chunk
            # keep a token cut at the chunk end for the next chunk
            cut = max(chunk.rfind(b" "), chunk.rfind(b"\n"), chunk.rfind(b"\t"))
            if cut < 0:
                tail = chunk
                continue
            tail = chunk[cut + 1 :]
            lines = chunk[: cut + 1].split(b"\n")
            # all but the last piece end with a newline
            for k, line in enumerate(lines):
                pending.extend(line.split())
                if k < len(lines) - 1:
                    yield from _emit(pending, final=True)
                    pending = []
                elif len(pending) >= MAX_SENTENCE:
                    yield from _emit(pending, final=False)
                    pending = pending[len(pending) - len(pending) % MAX_SENTENCE :]
    pending.extend(tail.split())
    yield from _emit(pending, final=True)


def _emit(tokens: list[bytes], *, final: bool) -> Iterator[list[bytes]]:
    n = len(tokens)
    full = n - n % MAX_SENTENCE
    for s in range(0, full, MAX_SENTENCE):
        yield tokens[s : s + MAX_SENTENCE]
    if final and full < n:
        yield tokens[full:]


@dataclass(frozen=True)
class Piece:
    """Bytes ``[start, end)`` of a file (``end`` None: to its end), token-aligned."""

    path: Path
    start: int = 0
    end: int | None = None


@dataclass(frozen=True)
class Shard:
    """One rank's share of a corpus: consecutive pieces of its byte stream."""

    pieces: tuple[Piece, ...]
    rank: int = 0
    size: int = 1

    @property
    def nbytes(self) -> int:
        """Bytes this shard covers (compressed size for .gz/.bz2 files)."""
        return sum(
            (p.end if p.end is not None else p.path.stat().st_size) - p.start for p in self.pieces
        )


def _compressed(path: Path) -> bool:
    return path.name.lower().endswith((".gz", ".bz2"))


def shard_corpus(corpus: str | os.PathLike, rank: int, size: int) -> Shard:
    """Rank *rank*'s share of the files of *corpus*, for data-parallel training.

    The corpus's files are taken as one stream of bytes in :func:`corpus_files` order and
    cut into *size* consecutive shares of about equal size: plain files at token
    boundaries (a token belongs to the share its first byte is in), compressed files
    whole. Shares in rank order are the corpus in order, so counts merged in rank order
    see words first where one reader would.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> with open(os.path.join(d, "c.txt"), "w") as f:
    ...     _ = f.write("aa bb cc\\ndd ee ff gg\\n")
    >>> [list(iter_sentences(shard_corpus(d, r, 3))) for r in range(3)]
    [[[b'aa', b'bb', b'cc']], [[b'dd', b'ee']], [[b'ff', b'gg']]]
    """
    if not 0 <= rank < size:
        raise TrainingError(f"rank {rank} is not in 0..{size - 1}")
    files = corpus_files(corpus)
    sizes = [f.stat().st_size for f in files]
    total = sum(sizes)
    lo, hi = total * rank // size, total * (rank + 1) // size
    pieces: list[Piece] = []
    offset = 0
    for f, n in zip(files, sizes, strict=True):
        a, b = offset, offset + n
        offset = b
        if _compressed(f):  # whole: to the share holding the file's middle byte
            mid = a + n // 2
            if lo <= mid < hi or (rank == size - 1 and mid >= hi):
                pieces.append(Piece(f))
        elif a < hi and b > lo:
            start, end = max(lo, a) - a, min(hi, b) - a
            pieces.append(Piece(f, start, None if end == n else end))
    return Shard(tuple(pieces), rank, size)


def iter_sentences(corpus: Corpus, *, chunk_bytes: int = CHUNK_BYTES) -> Iterator[list]:
    """Yield the sentences of *corpus* (a path or an iterable of token lists).

    Tokens read from files are ``bytes``; tokens of an iterable are passed through.
    Sentences longer than :data:`MAX_SENTENCE` tokens are split.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> with open(os.path.join(d, "c.txt"), "w") as f:
    ...     _ = f.write("the cat\\nsat  on the mat\\n")
    >>> list(iter_sentences(d))
    [[b'the', b'cat'], [b'sat', b'on', b'the', b'mat']]
    """
    if isinstance(corpus, (str, os.PathLike)):
        for path in corpus_files(corpus):
            yield from _file_sentences(path, chunk_bytes)
        return
    if isinstance(corpus, Shard):
        for piece in corpus.pieces:
            yield from _file_sentences(piece.path, chunk_bytes, piece.start, piece.end)
        return
    if isinstance(corpus, (bytes, bytearray)):
        raise TrainingError("corpus must be a path or an iterable of token lists, not bytes")
    if not isinstance(corpus, Iterable):
        raise TrainingError(
            f"corpus must be a path or an iterable of token lists, not {type(corpus).__name__}"
        )
    for sentence in corpus:
        if isinstance(sentence, (str, bytes)):
            raise TrainingError(
                "corpus iterable must yield lists of tokens, got a "
                f"{type(sentence).__name__} (split your sentences into words)"
            )
        if len(sentence) > MAX_SENTENCE:
            sentence = list(sentence)
            yield from _emit(sentence, final=True)
        else:
            yield sentence


def check_restartable(corpus: Corpus) -> None:
    """Refuse a one-shot iterator where the corpus must be read twice.

    >>> check_restartable(iter([["a"]]))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    vecserve.errors.TrainingError: corpus is a one-shot iterator; ...
    """
    if isinstance(corpus, Iterator):
        raise TrainingError(
            "corpus is a one-shot iterator; the trainer reads it twice, "
            "pass a list or a restartable iterable"
        )
