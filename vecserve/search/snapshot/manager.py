"""IndexManager: each process's one :class:`SimilarityIndex` per model, of its current
generation, built (or opened from disk) once per generation, retried when a reload
replaced the generation while it was being snapshotted."""

from __future__ import annotations

import contextlib
import os
import threading

from ...errors import StoreUnavailable
from ...store import ModelInfo, Store
from .index import SimilarityIndex

__all__ = ["IndexManager"]


class IndexManager:
    """Thread-safe source of the :class:`SimilarityIndex` of each model's current generation.

    Parameters
    ----------
    store : Store
        Where the models live.
    cache_dir : path, optional
        Snapshot directory (default :func:`~vecserve.search.snapshot.files.default_cache_dir`).

    Examples
    --------
    >>> manager = IndexManager(store)                       # doctest: +SKIP
    >>> manager.get("GOOGLE_W2V").most_similar("king", topn=3)  # doctest: +SKIP
    """

    def __init__(self, store: Store, *, cache_dir: str | os.PathLike | None = None):
        self.store = store
        self.cache_dir = cache_dir
        self._lock = threading.Lock()
        self._building: dict[str, threading.Lock] = {}
        self._indexes: dict[str, SimilarityIndex] = {}

    def get(self, name: str, *, info: ModelInfo | None = None) -> SimilarityIndex:
        """The index of ``name``'s current generation (read from the registry unless
        ``info`` is given); built (or loaded from disk) on first use of a generation.
        ModelNotFound if the model does not exist."""
        if info is None:
            info = self.store.get_model(name)
        current = self._indexes.get(name)
        if current is not None and current.generation == info.generation:
            return current
        with self._lock:
            build_lock = self._building.setdefault(name, threading.Lock())
        with build_lock:
            current = self._indexes.get(name)
            if current is not None and current.generation == info.generation:
                return current
            for attempt in range(3):
                try:
                    index = SimilarityIndex.build(self.store, info, cache_dir=self.cache_dir)
                    break
                except StoreUnavailable:
                    newer = self.store.get_model(name)
                    if attempt == 2 or newer.generation == info.generation:
                        raise
                    info = newer
            self._indexes[name] = index
            return index

    def invalidate(self, name: str | None = None) -> None:
        """Forget the in-process index of ``name`` (all when None); disk snapshots stay."""
        with self._lock:
            if name is None:
                self._indexes.clear()
            else:
                self._indexes.pop(name, None)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.invalidate()
