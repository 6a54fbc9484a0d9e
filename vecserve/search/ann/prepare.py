"""Readying one generation's whole-matrix search, the one entry point every caller uses:
``vecserve load --ann`` (:func:`build_model`) and the service's preload (:func:`build_for`
on its own snapshot and manager) do the same work in the same order.

What is built, into the snapshot's directory (the cache dir): the int8 rows of exact
batches (where the CPU and matrix take them) and, where the manager is enabled, the
approximate index to its recall target (:class:`~.manager.AnnManager`, one builder per
machine). Each part is mapped instead when another process built it already.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...errors import VecserveError
from ..snapshot import IndexManager, SimilarityIndex
from .index import AnnIndex
from .manager import AnnManager
from .params import AnnParams

__all__ = ["Built", "build_for", "build_model"]


def build_for(sim: SimilarityIndex, manager: AnnManager | None) -> AnnIndex | None:
    """Build (or map) what queries of ``sim`` need beyond the snapshot, waiting for it:
    its int8 rows, then its approximate index if ``manager`` is enabled (else None)."""
    sim.exact.quantized()
    if manager is None or not manager.enabled:
        return None
    return manager.get(sim, wait=True)


@dataclass(frozen=True)
class Built:
    """What :func:`build_model` readied: the snapshot's directory and the approximate
    index (``index.usable`` False: approximate queries are answered exactly, and
    ``index.fallback_reason`` says why)."""

    path: Path | None
    index: AnnIndex


def build_model(store, info, *, params: AnnParams, cache_dir=None) -> Built:
    """Snapshot generation ``info`` (a committed :class:`~vecserve.store.ModelInfo`) from
    ``store`` into the cache dir and ready it as the service's preload does.

    Raises :class:`~vecserve.errors.VecserveError` when the index cannot be built (the
    reason is logged).
    """
    indexes = IndexManager(store, cache_dir=cache_dir)
    try:
        sim = indexes.get(info.name, info=info)
        built = build_for(sim, AnnManager(enabled=True, params=params))
    finally:
        indexes.close()
    if built is None:
        raise VecserveError(f"building the approximate index of {info.name} failed (see above)")
    return Built(path=None if sim.path is None else Path(sim.path), index=built)
