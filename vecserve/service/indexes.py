"""The service's whole-matrix search state in one process: each model's snapshot (built
or mapped once per generation), its approximate index, and preloading them at start-up.

:class:`~vecserve.service.deps.AppContext` holds one :class:`SearchState` as
``ctx.search``; the API's similarity routes ask it for the snapshot of a generation and
hand that to :mod:`vecserve.search.planner`. It reads no vectors itself: the snapshot is
built by :class:`~vecserve.search.snapshot.IndexManager` from the store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..search.ann import AnnManager, build_for
from ..search.snapshot import IndexManager, SimilarityIndex
from ..store import ModelInfo, Store
from .coalesce import Coalescer
from .metrics import Metrics

__all__ = ["SearchState"]

log = logging.getLogger(__name__)


class SearchState:
    """Snapshots and approximate indexes of this process, with their metrics.

    ``store``: returns the connected :class:`Store` (it may raise StoreUnavailable);
    ``ann``: the :class:`AnnManager` (None: no approximate search at all);
    ``coalescer``: the :class:`~vecserve.service.coalesce.Coalescer` that batches single
    queries arriving together (None: each answered alone).
    """

    def __init__(
        self,
        store: Callable[[], Store],
        *,
        metrics: Metrics,
        cache_dir=None,
        ann: AnnManager | None = None,
        coalescer: Coalescer | None = None,
    ):
        self._store = store
        self.coalescer = coalescer
        self.metrics = metrics
        self.cache_dir = cache_dir
        self.ann = ann
        self._indexes: IndexManager | None = None
        self._seen: dict[str, SimilarityIndex] = {}
        self._lock = threading.Lock()

    @property
    def indexes(self) -> IndexManager:
        """The process's :class:`IndexManager` (created once the store is reachable)."""
        if self._indexes is None:
            store = self._store()
            with self._lock:
                if self._indexes is None:
                    self._indexes = IndexManager(store, cache_dir=self.cache_dir)
        return self._indexes

    def index(self, info: ModelInfo) -> SimilarityIndex:
        """The snapshot of generation ``info`` (built or mapped on first use)."""
        start = time.perf_counter()
        index = self.indexes.get(info.name, info=info)
        if self._seen.get(info.name) is index:
            self.metrics.inc("vecserve_cache_hits_total", cache="index")
            return index
        self.metrics.inc("vecserve_cache_misses_total", cache="index")
        self.metrics.set(
            "vecserve_index_build_seconds", time.perf_counter() - start, model=info.name
        )
        self.metrics.set("vecserve_index_rows", index.count, model=info.name)
        self._seen[info.name] = index
        return index

    def loaded_index(self, info: ModelInfo) -> SimilarityIndex | None:
        """The snapshot of generation ``info`` if this process has it open, else None."""
        index = self._seen.get(info.name)
        return index if index is not None and index.generation == info.generation else None

    def index_status(self, info: ModelInfo) -> dict:
        index = self.loaded_index(info)
        if index is None:
            return {"loaded": False}
        return {
            "loaded": True,
            "rows": index.count,
            "path": str(index.path) if index.path is not None else None,
            "build_seconds": round(
                self.metrics.value("vecserve_index_build_seconds", model=info.name), 6
            ),
        }

    def ann_status(self, info: ModelInfo) -> dict | None:
        """What ``GET /models/{name}`` shows under ``ann``."""
        return self.ann.status(self.loaded_index(info)) if self.ann is not None else None

    def preload(self, name: str, model: Callable[[str], ModelInfo]) -> threading.Thread:
        """Build (or map) ``name``'s snapshot, the int8 rows of its exact batches and its
        approximate index if enabled, in the background; ``model(name)`` reads its
        registry entry."""

        def run() -> None:
            try:
                build_for(self.index(model(name)), self.ann)  # as `vecserve load --ann`
            except Exception as exc:  # logged; /readyz keeps saying not ready
                log.error("preloading %s failed: %s", name, exc)

        thread = threading.Thread(target=run, name=f"vecserve-preload-{name}", daemon=True)
        thread.start()
        return thread

    def preloaded(self, info: ModelInfo) -> bool:
        """Ready as soon as exact search is: the approximate index builds on, and
        approximate queries are answered exactly (and say so) until it is done."""
        return self.loaded_index(info) is not None

    def close(self) -> None:
        if self.ann is not None:
            self.ann.close()
        if self._indexes is not None:
            self._indexes.close()
