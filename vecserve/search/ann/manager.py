"""The per-process source of approximate indexes, :class:`AnnManager`: opens them from
disk, or builds them in a background thread, one builder per index among every process
sharing the snapshot directory (:mod:`.disk`)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..snapshot import SimilarityIndex
from .disk import BuildLock, BuildProgress, disk_status, open_or_drop, progress_file
from .index import AnnIndex
from .params import AnnParams

__all__ = ["WAIT_POLL", "AnnManager"]

log = logging.getLogger(__name__)

#: Seconds between looks at an index another process is building.
WAIT_POLL = 1.0


class AnnManager:
    """Per-process source of ANN indexes: opens them from disk, builds them in the background.

    Parameters
    ----------
    enabled : bool
        When False, :meth:`get` only opens indexes that already exist on disk.
    params : AnnParams, optional
    on_ready : callable, optional
        Called as ``on_ready(model_name, index)`` when an index is opened or built (the
        service sets its recall gauge from it; this module knows nothing of metrics).
    """

    def __init__(
        self,
        *,
        enabled: bool = False,
        params: AnnParams | None = None,
        on_ready: Callable[[str, AnnIndex], None] | None = None,
    ):
        self.enabled = enabled
        self.params = params or AnnParams()
        self.on_ready = on_ready
        self._lock = threading.Lock()
        self._ready: dict[tuple[str, int], AnnIndex] = {}
        self._building: dict[tuple[str, int], threading.Thread] = {}
        self._progress: dict[tuple[str, int], BuildProgress] = {}
        self._failed: dict[tuple[str, int], str] = {}
        self._waiting: dict[tuple[str, int], Path] = {}  # built by another process

    def path_for(self, sim: SimilarityIndex) -> Path | None:
        if sim.path is None:
            return None
        return Path(sim.path) / self.params.resolved(sim.count).filename

    def ready_index(self, sim: SimilarityIndex) -> AnnIndex | None:
        """The index of ``sim`` if it is open and ready; never starts a build."""
        return self._ready.get((sim.name, sim.generation))

    def ready(self, sim: SimilarityIndex) -> bool:
        """Whether approximate queries of ``sim`` are answered now: its index is open and
        met its recall target."""
        ann = self.ready_index(sim)
        return ann is not None and ann.usable

    def approximate(self, sim: SimilarityIndex) -> AnnIndex | None:
        """:meth:`get`, if the index met its recall target (else exact answers)."""
        ann = self.get(sim)
        return ann if ann is not None and ann.usable else None

    def get(self, sim: SimilarityIndex, *, wait: bool = False) -> AnnIndex | None:
        """The ANN index of ``sim``: open from disk, or (if enabled) start building it.

        Returns None while it is being built unless ``wait``; callers then answer exactly.
        """
        key = (sim.name, sim.generation)
        ann = self._ready.get(key)
        if ann is not None:
            return ann
        path = self.path_for(sim)
        with self._lock:
            if key in self._ready:
                return self._ready[key]
            try:
                ann = AnnIndex.open(path) if path is not None else None
            except ValueError as exc:  # damaged: the builder thread replaces it
                ann = None
                if not self.enabled and key not in self._failed:
                    log.error("%s; not used (the ANN index is disabled here)", exc)
                    self._failed[key] = str(exc)
            if ann is not None and self.enabled and self._untargeted(ann):
                log.info(
                    "%s was built to a fixed setting, before recall targets; "
                    "rebuilding it to recall@10 %s",
                    path,
                    self.params.recall,
                )
                for stale in (path, path.with_suffix(".json")):
                    stale.unlink(missing_ok=True)
                ann = None
            if ann is not None:
                return self._keep(key, ann)
            if not self.enabled or key in self._failed:
                return None
            thread = self._building.get(key)
            if thread is None:
                thread = threading.Thread(
                    target=self._build, args=(sim, key, path), daemon=True, name="vecserve-ann"
                )
                self._building[key] = thread
                thread.start()
        if wait:
            thread.join()
            return self._ready.get(key)
        return None

    def _untargeted(self, ann: AnnIndex) -> bool:
        """Whether ``ann`` has no recall target where this manager sets one (an index
        built before targets existed: its fixed ``nprobe`` may miss any target)."""
        return self.params.recall is not None and ann.meta.target is None

    def _keep(self, key, ann: AnnIndex) -> AnnIndex:
        self._ready = {k: v for k, v in self._ready.items() if k[0] != key[0]}
        self._ready[key] = ann
        if self.on_ready is not None:
            self.on_ready(key[0], ann)
        return ann

    def _build(self, sim: SimilarityIndex, key, path: Path | None) -> None:
        lock = BuildLock(path) if path is not None else None
        try:
            while lock is not None and not lock.acquire():
                # another process builds this index: wait for it (or for its lock to go)
                self._waiting[key] = path
                time.sleep(WAIT_POLL)
                ann = None
                with contextlib.suppress(ValueError):  # a damaged one: wait for the lock
                    ann = AnnIndex.open(path)
                if ann is not None:
                    with self._lock:
                        self._keep(key, ann)
                    return
            self._waiting.pop(key, None)
            if path is not None and (ann := open_or_drop(path)) is not None:
                with self._lock:  # built by the process we waited for
                    self._keep(key, ann)
                return
            log.info("building the ANN index of %s generation %s", *key)
            prog = self._progress[key] = BuildProgress(
                total=sim.count, file=progress_file(path) if path is not None else None
            )
            try:
                ann = AnnIndex.build(sim, path=path, params=self.params, progress=prog.update)
            finally:
                prog.remove()
            with self._lock:
                self._keep(key, ann)
            log.info("ANN index of %s: recall@10 %.3f", key[0], ann.recall_at_10)
        except Exception as exc:
            log.error("building the ANN index of %s failed: %s", key[0], exc)
            self._failed[key] = str(exc)
        finally:
            if lock is not None:
                lock.release()
            self._waiting.pop(key, None)
            self._building.pop(key, None)
            self._progress.pop(key, None)

    def status(self, sim: SimilarityIndex | None) -> dict:
        """What ``GET /models/{name}`` shows under ``ann``."""
        out: dict = {"enabled": self.enabled, "library": self.params.library}
        if sim is None:
            out["state"] = "exact index not loaded in this process"
            return out
        out["library"] = self.params.resolved(sim.count).library
        key = (sim.name, sim.generation)
        ann = self._ready.get(key)
        if ann is None:
            with contextlib.suppress(Exception):
                ann = self.get(sim)
        if ann is not None:
            state = "ready" if ann.usable else "exact-fallback"
            out.update(state=state, **{k: v for k, v in ann.meta.to_json().items() if k != "name"})
        elif key in self._building:
            out["state"] = "building"
            prog = self._progress.get(key)
            if prog is not None:
                out["progress"] = prog.as_dict()
            elif key in self._waiting:  # another process builds it: its progress file
                theirs = disk_status(self._waiting[key].parent, self.params)
                if "progress" in theirs:
                    out["progress"] = theirs["progress"]
                out["builder"] = "another process"
        elif key in self._failed:
            out.update(state="failed", error=self._failed[key])
        else:
            out["state"] = "absent"
        return out

    def pending(self, sim: SimilarityIndex) -> str:
        """Why ``sim`` has no approximate index to answer with (its ``status`` state)."""
        if not self.enabled and self.get(sim) is None:
            return "disabled"
        status = self.status(sim)
        if status["state"] == "exact-fallback":
            return f"exact-fallback: {status['target']['reason']}"
        return status["state"]

    def close(self) -> None:
        self._ready.clear()
