"""Write a trained subword model as fastText's native binary ``.bin``.

The layout fastText 0.9 writes (``FastText::saveModel``; little-endian, version 12),
which fastText's ``load_model``, gensim's ``load_facebook_model`` and vecserve's own
reader (:mod:`vecserve.readers._fasttext`) read::

    int32 magic 793712314, int32 version 12
    args    12 x int32 (dim ws epoch minCount neg wordNgrams loss model bucket minn maxn
            lrUpdateRate), float64 t
    dict    int32 size, nwords, nlabels; int64 ntokens, pruneidx_size (-1: none);
            size x (token bytes, b"\\0", int64 count, int8 type 0: a word)
    input   bool quantized (0); int64 rows (nwords + bucket), cols (dim); float32 rows
    output  bool quantized (0); int64 rows (nwords), cols; float32 rows

Tokens are written as UTF-8; a token holding a NUL byte or whitespace cannot be read
back by fastText and is refused.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from typing import BinaryIO

import numpy as np

from ..errors import TrainingError
from ..fileio import atomic_write

__all__ = ["MAGIC", "VERSION", "write_fasttext_bin"]

MAGIC = 793712314
VERSION = 12
_LOSS_HS, _LOSS_NS = 1, 2  # fastText's loss_name: hs 1, ns 2, softmax 3, ova 4
_MODEL = {0: 1, 1: 2}  # fastText's model_name: cbow 1, sg 2 (by sg)
_LR_UPDATE_RATE = 100  # fastText's default; not used by a trained model


def write_fasttext_bin(
    path: str | os.PathLike,
    *,
    words: Sequence[str],
    counts: np.ndarray,
    wi: np.ndarray,
    wo: np.ndarray,
    args: dict,
) -> None:
    """Write the model (*wi*: word rows then n-gram rows; *wo*: output rows) to *path*,
    whole or not at all. *args*: ``dim, ws, epoch, min_count, neg, sg, bucket, minn,
    maxn, t`` and ``hs`` (hierarchical softmax: *wo* holds the tree's inner nodes)."""
    encoded = [w.encode("utf-8") for w in words]
    for w, raw in zip(words, encoded, strict=True):
        if b"\0" in raw or any(c in raw for c in b" \t\n\v\f\r"):
            raise TrainingError(f"cannot write {path}: token {w!r} holds whitespace or NUL")
    nwords = len(encoded)
    if wi.shape != (nwords + args["bucket"], args["dim"]) or wo.shape != (nwords, args["dim"]):
        raise ValueError(f"matrices {wi.shape}, {wo.shape} for {nwords} words")
    try:
        with atomic_write(os.fspath(path), "wb") as fh:
            _write(fh, encoded, counts, wi, wo, args)
    except OSError as exc:
        raise TrainingError(f"cannot write {path}: {exc}") from exc


def _write(fh: BinaryIO, words: list[bytes], counts, wi, wo, a: dict) -> None:
    fh.write(struct.pack("<2i", MAGIC, VERSION))
    fh.write(
        struct.pack(
            "<12id",
            a["dim"],
            a["ws"],
            a["epoch"],
            a["min_count"],
            a["neg"],
            1,  # wordNgrams
            _LOSS_HS if a.get("hs") else _LOSS_NS,
            _MODEL[int(bool(a["sg"]))],
            a["bucket"],
            a["minn"],
            a["maxn"],
            _LR_UPDATE_RATE,
            float(a["t"]),
        )
    )
    counts = np.asarray(counts, dtype=np.int64)
    fh.write(struct.pack("<3i2q", len(words), len(words), 0, int(counts.sum()), -1))
    entries = zip(words, counts, strict=True)
    fh.write(b"".join(w + b"\0" + struct.pack("<qb", int(c), 0) for w, c in entries))
    for m in (wi, wo):
        fh.write(struct.pack("<?2q", False, m.shape[0], m.shape[1]))
        _write_rows(fh, m)


def _write_rows(fh: BinaryIO, m: np.ndarray, chunk: int = 1 << 16) -> None:
    """The rows as little-endian float32, a chunk at a time (no whole copy)."""
    for lo in range(0, len(m), chunk):
        fh.write(np.ascontiguousarray(m[lo : lo + chunk], dtype="<f4").tobytes())
