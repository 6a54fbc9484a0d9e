"""The records the store keeps as JSON (:class:`ModelInfo`, the registry entry;
:class:`LoadState`, an unfinished load) and the vocabulary blob encoding.

The vocabulary (``index_to_key``) is kept as one blob per batch rather than one list
element per token: a 1,700-token ``RPUSH`` costs the server ~0.8 us a token, one blob
nothing measurable. A blob is ``uint32 n``, ``n`` uint32 byte lengths, then the tokens'
UTF-8 bytes.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from ..codec import Codec, get_codec
from ..errors import LayoutTooNew
from .keys import counts_key, vector_key_prefix, vocab_key


def pack_vocab(raw: Sequence[bytes]) -> bytes:
    """One vocabulary blob: ``uint32 n``, ``n`` uint32 lengths, the token bytes.

    >>> unpack_vocab(pack_vocab([b"a", b"", "λ".encode()]))
    [b'a', b'', b'\\xce\\xbb']
    """
    n = len(raw)
    return struct.pack(f"<I{n}I", n, *map(len, raw)) + b"".join(raw)


def unpack_vocab(blob: bytes) -> list[bytes]:
    """The token bytes of one vocabulary blob."""
    n = int.from_bytes(blob[:4], "little")
    lens = np.frombuffer(blob, dtype="<u4", count=n, offset=4).astype(np.int64)
    ends = np.cumsum(lens) + 4 + 4 * n
    return [blob[s:e] for s, e in zip((ends - lens).tolist(), ends.tolist(), strict=True)]


def vocab_parts(blob: bytes) -> tuple[np.ndarray, np.ndarray]:
    """``(lengths, bytes)`` of one vocabulary blob's tokens, as views (no copy).

    >>> [a.tolist() for a in vocab_parts(pack_vocab([b"ab", b"c"]))]
    [[2, 1], [97, 98, 99]]
    """
    n = int.from_bytes(blob[:4], "little")
    lens = np.frombuffer(blob, dtype="<u4", count=n, offset=4).astype(np.int64)
    return lens, np.frombuffer(blob, dtype=np.uint8, offset=4 + 4 * n)


#: The store layout this vecserve writes: its key names (:mod:`.keys`), records and
#: encodings. Every load records it in its :class:`LoadState` and :class:`ModelInfo`; a
#: record without one was written before layouts were numbered and is layout 1. A new
#: layout raises this, and readers of older ones go on reading them (or migrate them).
LAYOUT_VERSION = 1


def check_layout(record: ModelInfo | LoadState) -> ModelInfo | LoadState:
    """``record``, if this vecserve can read the layout it was written in; else a
    :class:`~vecserve.errors.LayoutTooNew` naming the model and both layouts.

    >>> check_layout(ModelInfo("M", 4, "f32", 1, 1, "M")).layout
    1
    >>> check_layout(ModelInfo("M", 4, "f32", 1, 1, "M", layout=9))
    Traceback (most recent call last):
    ...
    vecserve.errors.LayoutTooNew: model 'M' is stored in layout 9, ...
    """
    if record.layout > LAYOUT_VERSION:
        raise LayoutTooNew(record.name, record.layout, LAYOUT_VERSION)
    return record


class _JsonRecord:
    """JSON (de)serialisation of a dataclass record; unknown fields are ignored on load,
    so metadata written by a newer vecserve still reads."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)  # type: ignore[call-overload]

    @classmethod
    def from_json(cls, raw: str | bytes):
        data = json.loads(raw)
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class ModelInfo(_JsonRecord):
    """Metadata of one committed generation of a model (the registry entry)."""

    name: str
    dim: int
    codec: str
    count: int
    generation: int
    prefix: str
    buckets: int = 0
    has_counts: bool = False
    source: str = ""
    source_format: str = ""
    sha256: str = ""
    created: float = 0.0
    load_seconds: float = 0.0
    duplicates: int = 0
    # fastText subwords (gensim's FastTextKeyedVectors.min_n, max_n, bucket); 0: none
    min_n: int = 0
    max_n: int = 0
    ngram_buckets: int = 0
    # the vocabulary's word hashes were written at commit (vocab_hashes_key): a lost row
    # is told from an unknown word, and the hashes missing are damage themselves
    word_hashes: bool = False
    # how text is cut into this model's tokens and pooled (vecserve.text.TextSpec as
    # JSON); "": the model has no recorded text rule (word models get a fitted default)
    text: str = ""
    # the store layout it was written in (LAYOUT_VERSION; absent: 1): check_layout
    layout: int = 1

    @property
    def subwords(self) -> bool:
        """True for a fastText model whose out-of-vocabulary words get vectors."""
        return self.ngram_buckets > 0

    @property
    def codec_obj(self) -> Codec:
        return get_codec(self.codec)

    @property
    def vocab_key(self) -> str:
        return vocab_key(self.prefix)

    @property
    def key_prefix(self) -> bytes:
        """Common prefix of every vector key of this generation (for CLIENT TRACKING)."""
        return vector_key_prefix(self.prefix)

    @property
    def counts_key(self) -> str:
        return counts_key(self.prefix)


@dataclass
class LoadState(_JsonRecord):
    """Progress of an unfinished load, kept in ``vecserve:loads`` after every batch."""

    name: str
    dim: int
    codec: str
    generation: int
    prefix: str
    buckets: int = 0
    source: str = ""
    source_format: str = ""
    fingerprint: str = ""
    declared_count: int | None = None
    written: int = 0
    resume: dict = field(default_factory=dict)
    chunks: int = 0
    has_counts: bool = False
    started: float = 0.0
    updated: float = 0.0
    host: str = ""
    pid: int = 0
    min_n: int = 0
    max_n: int = 0
    ngram_buckets: int = 0
    text: str = ""
    layout: int = 1
