"""Streaming readers for word-vector files: batches of (tokens, vectors), constant memory.

==========  =======================================================  =======================
format      layout                                                   gensim parity reference
==========  =======================================================  =======================
w2v-bin     ``count dim`` line, then ``token<space><dim x <f4>``     ``load_word2vec_format``
                                                                     ``(binary=True)``
w2v-text    ``count dim`` line, then ``token f1 ... fdim`` lines     ``load_word2vec_format``
fasttext    ``.vec``: w2v-text whose lines often end with a space    ``load_word2vec_format``
fasttext-   Facebook's native ``.bin`` (magic 793712314): args,      ``load_facebook_vectors``
bin         dictionary, input matrix (words + n-gram buckets)        (``.vectors``)
glove       no header; ``token f1 ... fdim`` lines                   ``load_word2vec_format``
                                                                     ``(no_header=True)``
gensim      a ``KeyedVectors.save()`` pickle (+ ``.npy`` files)      ``KeyedVectors.load``
==========  =======================================================  =======================

For the word2vec-family formats the tokens, their order and the float32 values are
bit-identical to gensim 4.4's ``load_word2vec_format`` on the same file with the same
``limit=`` and ``unicode_errors=``: text values are parsed by ``float`` then cast to
float32 (which is what ``np.float32(str)`` does), binary tokens lose leading ``\\n``, a
repeated token keeps its first vector and is logged with `logging` (never `warnings`),
and ``limit`` counts records, duplicates included (``limit=0`` reads all, as in gensim).

Where vecserve differs on purpose: gensim 4.4 may read past ``limit`` (and then raise
``EOFError``) when a duplicate precedes one of its 100 kB chunk boundaries; vecserve
reads exactly ``limit`` records. For each duplicate gensim also leaves a ``None`` key
with a zero vector at the end of ``index_to_key``; vecserve yields only real tokens. A
GloVe token may contain spaces (the last ``dim``
fields are the numbers) where gensim raises. Errors are `vecserve.errors` classes that
name the file and the position (line, vector number counted from 1, byte offset in the
decompressed stream) instead of ``EOFError``/``ValueError``; a missing file is a
`VectorFileError` whose ``__cause__`` is the ``FileNotFoundError``.

A file is what its format says or it is refused: a format given by the caller is
checked against the first bytes (`FormatMismatch` names the format they plainly are);
a word2vec binary file must end after its header's ``count`` records (up to one final
newline), a text file may only have blank lines after them (`TrailingData` counts what
remains; gensim ignores it, ``limit`` reads only the first records on purpose); the
first vector of a binary file must not be text.

Standard input (``"-"``), a binary stream or a named pipe (`is_pipe`) is read once,
front to back: the text formats and word2vec binary, plain, gzip or bz2 (a native
fastText ``.bin`` and gensim files need a file).

Memory does not grow with the file: a 4 MiB parse buffer and up to three more read
ahead (a thread reads, hashes and decompresses them), the batch being built, and at
most 16 bytes per distinct token for duplicate detection. A bad record raises only after every
record before it was yielded, so a loader can stop cleanly at the first bad one.

The formats are one table, `vecserve.readers.formats` (`FORMATS` and each format's
opener derive from it). One module per concern: ``_source`` (file, decompression,
checksum), ``_sniff``
(recognising formats), ``_binary``, ``_text``, ``_gensim`` (one per format family),
``_fasttext`` (native fastText ``.bin``; ``VectorReader.subwords`` gives its n-gram
settings and bucket rows), ``_dedup`` (duplicates), ``_reader`` (`open_vectors` and each
format's opener), ``_vectorreader`` (`VectorReader`: an open file's batches), ``_types``.

>>> with open_vectors("GoogleNews-vectors-negative300.bin.gz") as reader:  # doctest: +SKIP
...     for batch in reader:
...         store.put(batch.tokens, batch.vectors)
...     checksum = reader.sha256()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .formats import FORMATS

if TYPE_CHECKING:
    from ._reader import is_pipe, open_vectors
    from ._sniff import detect_format
    from ._types import ResumePoint, VectorBatch
    from ._vectorreader import VectorReader, batch_for

__all__ = [
    "FORMATS",
    "ResumePoint",
    "VectorBatch",
    "VectorReader",
    "batch_for",
    "detect_format",
    "is_pipe",
    "open_vectors",
]

# imported on first use: the CLI reads `FORMATS` at start-up without the parsers
_WHERE = {
    "ResumePoint": "._types",
    "VectorBatch": "._types",
    "VectorReader": "._vectorreader",
    "batch_for": "._vectorreader",
    "is_pipe": "._reader",
    "open_vectors": "._reader",
    "detect_format": "._sniff",
}


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
