"""The formats the readers know, one line each: the table every list of formats derives
from (`FORMATS`, ``open_vectors``' dispatch, the CLI's ``--format`` choices, the message
naming what a file looks like).

A line is the format's name, its opener (``"module:function"`` in this package: the
function that reads its header once the file is open and returns the `VectorReader`),
whether it reads from a stream (standard input, a pipe) and what its content looks
like. A new format is its module (with its opener) plus one line here; where its
content can be recognised, a rule in ``_sniff`` lets ``format="auto"`` find it.

This module imports nothing heavy: the CLI reads it at start-up.

>>> FORMATS[:3], by_name("gensim").streams
(('w2v-bin', 'w2v-text', 'glove'), False)
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["FORMATS", "TABLE", "Format", "by_name"]


class Format(NamedTuple):
    """One format the readers know (a line of `TABLE`)."""

    name: str
    opener: str
    streams: bool
    looks: str


_HEADER = "a 'count dim' header, then"

TABLE = (
    Format("w2v-bin", "_reader:open_word2vec", True, f"{_HEADER} binary float32 vectors"),
    Format("w2v-text", "_reader:open_word2vec", True, f"{_HEADER} lines of a token and numbers"),
    Format("glove", "_reader:open_word2vec", True, "lines of a token and numbers, no header"),
    Format("fasttext", "_reader:open_word2vec", True, f"{_HEADER} lines of a token and numbers"),
    Format("fasttext-bin", "_reader:open_fasttext_bin", False, "a native fastText model"),
    Format(
        "gensim", "_reader:open_gensim", False, "a pickle, as gensim's KeyedVectors.save() writes"
    ),
)

#: The formats `open_vectors` reads, by the names its ``format=`` accepts besides "auto".
FORMATS = tuple(f.name for f in TABLE)


def by_name(name: str) -> Format:
    """The line of format ``name`` (one of `FORMATS`)."""
    return next(f for f in TABLE if f.name == name)
