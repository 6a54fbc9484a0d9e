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
from pathlib import Path
from typing import IO, Union

from ..errors import TrainingError

__all__ = ["CHUNK_BYTES", "MAX_SENTENCE", "Corpus", "corpus_files", "iter_sentences"]

#: Longest sentence the kernels see; longer lines are split (gensim truncates instead).
MAX_SENTENCE = 10_000
#: Bytes read per chunk from a file.
CHUNK_BYTES = 1 << 20

Corpus = Union[str, os.PathLike, Iterable[list]]  # noqa: UP007  (a runtime alias, py3.10)


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


def _file_sentences(path: Path, chunk_bytes: int) -> Iterator[list[bytes]]:
    """Sentences of one file, as lists of ``bytes`` tokens."""
    pending: list[bytes] = []  # tokens of the current, unfinished line
    tail = b""  # an unfinished token at the end of the previous chunk
    first = True
    with _open(path) as fh:
        while True:
            try:
                chunk = fh.read(chunk_bytes)
            except (OSError, EOFError, ValueError) as exc:
                raise TrainingError(f"corpus {path}: cannot read: {exc}") from exc
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
