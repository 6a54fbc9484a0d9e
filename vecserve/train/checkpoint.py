"""Checkpoints: the weights after each epoch, in one ``.npz`` file a job can resume from.

The file holds the weight matrices and a JSON record of what they belong to (the
parameters that shape training and a hash of the vocabulary) and how many epochs are
done. It is written whole or not at all (:func:`vecserve.fileio.atomic_write`), so a job
killed while saving keeps the previous checkpoint. A resume checks the record against
the job's own before it takes any weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import TrainingError
from ..fileio import atomic_write

__all__ = ["FILE_NAME", "Found", "fingerprint", "read", "resume", "write"]

FILE_NAME = "vecserve-w2v-checkpoint.npz"

#: the parameters a checkpoint must match to be resumed
FINGERPRINT_PARAMS = (
    "vector_size",
    "window",
    "sg",
    "hs",
    "negative",
    "ns_exponent",
    "cbow_mean",
    "sample",
    "alpha",
    "min_alpha",
    "epochs",
    "seed",
)


@dataclass(frozen=True)
class Found:
    """What a checkpoint directory holds for this job: ``epochs_done`` (0: no
    checkpoint, start from the first epoch), or ``problem``: why it cannot be resumed."""

    path: str
    epochs_done: int = 0
    problem: str | None = None


def fingerprint(params: Any, words: list[str], counts: np.ndarray) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: the parameters and the vocabulary."""
    h = hashlib.sha256()
    h.update("\n".join(words).encode())
    h.update(np.ascontiguousarray(counts).tobytes())
    return {
        "params": {k: getattr(params, k) for k in FINGERPRINT_PARAMS},
        "vocab_sha256": h.hexdigest(),
    }


def write(directory: str | os.PathLike, weights: dict[str, np.ndarray], meta: dict) -> str:
    """Write *weights* and *meta* (JSON) as the checkpoint in *directory*; returns its
    path."""
    path = os.path.join(os.fspath(directory), FILE_NAME)
    try:
        os.makedirs(os.fspath(directory), exist_ok=True)
        with atomic_write(path, "wb") as fh:
            np.savez(fh, meta=np.array(json.dumps(meta)), **weights)
    except OSError as exc:
        raise TrainingError(f"cannot write checkpoint {path}: {exc}") from exc
    return path


def read(
    directory: str | os.PathLike, want: dict[str, Any], weights: dict[str, np.ndarray]
) -> Found:
    """Copy the checkpoint in *directory* into *weights* (same names and shapes) if its
    fingerprint is *want*; nothing is copied unless the record matches."""
    path = os.path.join(os.fspath(directory), FILE_NAME)
    if not os.path.exists(path):
        return Found(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            for k in ("params", "vocab_sha256"):
                if meta.get(k) != want[k]:
                    what = "parameters" if k == "params" else "vocabulary"
                    return Found(
                        path,
                        problem=(
                            f"checkpoint {path} was written with other {what}; "
                            "resume with the same corpus and options, or delete it"
                        ),
                    )
            for name, m in weights.items():
                if name not in z or z[name].shape != m.shape:
                    return Found(
                        path,
                        problem=(f"checkpoint {path}: {name} is missing or has the wrong shape"),
                    )
                np.copyto(m, z[name])
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        return Found(path, problem=f"checkpoint {path} is unreadable: {exc}")
    return Found(path, epochs_done=int(meta["epochs_done"]))


def resume(group: Any, directory: str | os.PathLike, want: dict[str, Any], weights: dict) -> Found:
    """:func:`read` on rank 0 of *group*, its verdict sent to every rank and, where
    epochs are done, its *weights* (each rank's arrays filled in place); a checkpoint
    that cannot be resumed raises a :class:`~vecserve.errors.TrainingError` on every
    rank (``collective``)."""
    found = read(directory, want, weights) if group.rank == 0 else None
    found = group.bcast(found)
    if found.problem is not None:
        raise TrainingError(found.problem, collective=True)
    if found.epochs_done:
        for m in weights.values():
            group.bcast_array(m)
    return found
