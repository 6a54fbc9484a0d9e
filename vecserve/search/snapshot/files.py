"""A snapshot's directory: where it lives, how it is written out of Redis and read back.

``$VECSERVE_CACHE_DIR`` or ``<platform user cache dir>/vecserve``, one directory per
generation named ``<model>.g<generation>.<sha/created tag>`` (:func:`snapshot_dir`)
holding ``vectors.npy``, ``norms.npy`` and ``vocab.idx`` (:mod:`vecserve.search.vocab`).
:func:`write_snapshot` streams the generation in ``BUILD_CHUNK`` rows at a time and
refuses one that changed while it was read; the caller writes it into a temporary
directory renamed into place (:meth:`~vecserve.search.snapshot.SimilarityIndex.build`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from ... import config
from ...errors import SnapshotDamaged, StoreUnavailable
from ...store import ModelInfo, Store
from ..arith import REAL, row_norms
from ..vocab import SharedVocab
from ..vocab import write as write_vocab

__all__ = [
    "BUILD_CHUNK",
    "VOCAB_FILE",
    "default_cache_dir",
    "dir_name",
    "open_vocab",
    "remove_older",
    "rewrite_vocab",
    "snapshot_dir",
    "write_snapshot",
]

# Row chunk when streaming a generation out of Redis (~24 MB of 300-d float32).
BUILD_CHUNK = 20_000
VOCAB_FILE = "vocab.idx"


def default_cache_dir() -> Path:
    """``$VECSERVE_CACHE_DIR``, or ``<platform user cache dir>/vecserve``."""
    return config.cache_dir()


def snapshot_dir(info: ModelInfo, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where generation *info*'s snapshot (and its ANN index) lives or will live."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / dir_name(info)


def dir_name(info: ModelInfo) -> str:
    tag = (
        f"{info.sha256[:12]}-{int(info.created * 1000):x}"
        if info.sha256
        else (f"{int(info.created * 1000):x}")
    )
    return f"{info.name}.g{info.generation}.{tag}"


def remove_older(root: Path, info: ModelInfo) -> None:
    """Delete snapshots of older generations of the same model (best effort)."""
    keep = dir_name(info)
    for p in root.glob(f"{info.name}.g*"):
        rest = p.name[len(info.name) + 2 :]
        gen = rest.split(".", 1)[0]
        if p.name != keep and gen.isdigit() and int(gen) < info.generation:
            shutil.rmtree(p, ignore_errors=True)


def open_vocab(path: Path) -> SharedVocab:
    """Map ``path/vocab.idx``."""
    idx = path / VOCAB_FILE
    if not idx.exists():
        raise SnapshotDamaged(idx, "vocabulary", "no vocabulary file", what="damaged snapshot")
    try:
        return SharedVocab.open(idx)
    except OSError as exc:
        raise SnapshotDamaged(idx, "vocabulary", exc.strerror) from None


def rewrite_vocab(store: Store, info: ModelInfo, final: Path, chunk: int) -> None:
    """Write ``final/vocab.idx`` again from the generation's vocabulary in Redis."""
    words = [w for tokens in store.iter_vocab(info, chunk=chunk) for w in tokens]
    if len(words) != info.count:
        raise StoreUnavailable(
            f"vocabulary of {info.name!r} has {len(words)} tokens, the registry says "
            f"{info.count}: the generation changed while it was being read"
        )
    write_vocab(final / VOCAB_FILE, words)


def write_snapshot(store: Store, info: ModelInfo, out: Path, chunk: int) -> None:
    vectors = np.lib.format.open_memmap(
        out / "vectors.npy", mode="w+", dtype=REAL, shape=(info.count, info.dim)
    )
    norms = np.empty(info.count, dtype=REAL)
    vocab: list[str] = []
    for tokens in store.iter_vocab(info, chunk=chunk):
        lo = len(vocab)
        _, mat, found = store.read_rows(info, tokens, follow=False)
        if not found.all():
            missing = tokens[int(np.argmin(found))]
            raise StoreUnavailable(
                f"generation {info.generation} of {info.name!r} changed while it was being "
                f"snapshotted (the vector of {missing!r} is gone); retry"
            )
        vectors[lo : lo + len(tokens)] = mat
        norms[lo : lo + len(tokens)] = row_norms(mat)
        vocab.extend(tokens)
    if len(vocab) != info.count:
        raise StoreUnavailable(
            f"vocabulary of {info.name!r} has {len(vocab)} tokens, the registry says "
            f"{info.count}: the generation changed while it was being snapshotted"
        )
    vectors.flush()
    del vectors
    np.save(out / "norms.npy", norms)
    write_vocab(out / VOCAB_FILE, vocab)
