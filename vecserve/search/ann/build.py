"""The two builders: an HNSW graph (usearch) and an IVF file (:mod:`vecserve.search.ivf`),
over the unit rows of a similarity snapshot, ``BUILD_CHUNK`` rows at a time with
``progress(done, total)`` after each chunk. Neither measures recall (:mod:`.tuning`)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..ivf import IvfIndex, default_nlist
from ..snapshot import SimilarityIndex
from .params import AnnParams

__all__ = ["BUILD_CHUNK", "build_hnsw", "build_ivf", "library_version"]

#: Rows added a step (a progress report after each).
BUILD_CHUNK = 50_000

Progress = Callable[[int, int], None] | None


def library_version(kind: str) -> str:
    """What built an index of ``kind`` (kept in its metadata)."""
    if kind == "ivf":
        return f"vecserve IVF, numpy {np.__version__}"
    import usearch

    return f"usearch {usearch.__version__}"


def unit_rows(sim: SimilarityIndex, lo: int, hi: int) -> np.ndarray:
    """Rows ``lo:hi`` of ``sim`` divided by their norms (a zero row stays zero)."""
    rows = np.asarray(sim.vectors[lo:hi], dtype=np.float32)
    norms = np.asarray(sim.norms[lo:hi], dtype=np.float32)[:, None]
    return np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)


def build_hnsw(sim: SimilarityIndex, p: AnnParams, threads: int, progress: Progress):
    """A usearch HNSW graph over ``sim``'s unit rows (keys: row numbers), in memory."""
    from usearch.index import Index

    index = Index(
        ndim=sim.dim,
        metric="ip",
        dtype=p.dtype,
        connectivity=p.connectivity,
        expansion_add=p.expansion_add,
        expansion_search=p.expansion_search,
    )
    n = sim.count
    for lo in range(0, n, BUILD_CHUNK):
        hi = min(lo + BUILD_CHUNK, n)
        index.add(np.arange(lo, hi, dtype=np.uint64), unit_rows(sim, lo, hi), threads=threads)
        if progress is not None:
            progress(hi, n)
    return index


def build_ivf(
    sim: SimilarityIndex, p: AnnParams, target: Path | None, threads: int, progress: Progress
) -> IvfIndex:
    """Build the IVF file at ``target`` and map it; without one, in a temporary directory
    removed once the file is mapped."""
    tmpdir = None
    if target is None:
        tmpdir = Path(tempfile.mkdtemp(prefix="vecserve-ivf-"))
        target = tmpdir / p.filename
    nlist = p.nlist or default_nlist(sim.count)
    try:
        IvfIndex.build_arrays(
            sim.vectors,
            target,
            nlist=nlist,
            norms=sim.norms,
            threads=threads,
            chunk=BUILD_CHUNK,
            dtype=p.dtype,
            progress=progress,
        )
        return IvfIndex.open(target)
    finally:
        if tmpdir is not None:  # the mapping outlives the file's name
            shutil.rmtree(tmpdir, ignore_errors=True)
