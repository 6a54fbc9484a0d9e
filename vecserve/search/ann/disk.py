"""What the processes sharing a snapshot directory see of each other's indexes on disk:
a build's progress (``<index>.progress.json``, :class:`BuildProgress`), the one-builder
lock (``<index>.lock``, :class:`BuildLock`), and :func:`disk_status` (``ready``,
``building`` or ``absent``), which ``vecserve models info`` shows."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ...fileio import atomic_write
from ...procs import pid_alive
from .index import AnnIndex
from .meta import BuildMeta
from .params import AnnParams, kinds

__all__ = ["BuildLock", "BuildProgress", "disk_status", "open_or_drop", "progress_file"]

log = logging.getLogger(__name__)


@dataclass
class BuildProgress:
    """How far an index build is: rows added so far, of ``total``; logged every 10%."""

    total: int
    done: int = 0
    started: float = 0.0
    file: Path | None = None  # where other processes read it (next to the index)

    def __post_init__(self) -> None:
        self.started = time.monotonic()
        self._write()

    def update(self, done: int, total: int) -> None:
        step = max(total // 10, 1)
        if done // step != self.done // step or done == total:
            d = self.as_dict(done)
            log.info(
                "ANN index: %d%% (%s/%s vectors), %s vectors/s, ETA %ss",
                round(100 * d["share"]),
                f"{done:,}",
                f"{total:,}",
                f"{d['vectors_per_s']:,.0f}",
                d["eta_s"],
            )
        self.done = done
        self._write()

    def _write(self) -> None:
        if self.file is None:
            return
        data = dict(self.as_dict(), pid=os.getpid(), updated=time.time())
        # progress is informative: never fail a build
        with contextlib.suppress(OSError), atomic_write(self.file, "w", fsync=False) as f:
            f.write(json.dumps(data))

    def remove(self) -> None:
        if self.file is not None:
            with contextlib.suppress(OSError):
                self.file.unlink()

    def as_dict(self, done: int | None = None) -> dict:
        done = self.done if done is None else done
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = done / elapsed
        eta = (self.total - done) / rate if rate > 0 else None
        return {
            "share": round(done / max(self.total, 1), 4),
            "done": done,
            "total": self.total,
            "vectors_per_s": round(rate, 1),
            "eta_s": None if eta is None else round(eta, 1),
        }


def progress_file(path: Path) -> Path:
    """Where the builder of the index at ``path`` writes its progress."""
    return path.with_name(path.name + ".progress.json")


def disk_status(snapshot: str | os.PathLike, params: AnnParams | None = None) -> dict:
    """The ANN index of a snapshot directory as any process sees it on disk: ``ready``
    (with its build metadata and recall), ``building`` (with the builder's progress),
    or ``absent``. ``vecserve models info`` shows this.

    >>> disk_status("/nonexistent")["state"]
    'absent'
    """
    paths = [Path(snapshot) / p.filename for p in kinds(params or AnnParams())]
    if params is None:  # any index there, the default's first (other recall targets next)
        paths += sorted(
            set(Path(snapshot).glob("ann-*.ivf"))
            | set(Path(snapshot).glob("ann-*.usearch")) - set(paths)
        )
    for path in paths:
        if path.exists():
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                meta = BuildMeta.from_json(json.loads(path.with_suffix(".json").read_text()))
                state = "ready" if meta.usable else "exact-fallback"
                return {"state": state, "path": str(path), **meta.to_json()}
    for path in paths:
        with contextlib.suppress(OSError, ValueError):
            prog = json.loads(progress_file(path).read_text())
            if pid_alive(int(prog.get("pid", 0))):
                return {"state": "building", "path": str(path), "progress": prog}
    return {"state": "absent", "path": str(paths[0])}


class BuildLock:
    """An exclusive ``flock`` on ``<index>.lock``: one builder per index among all the
    processes (workers, restarts, ``vecserve load --ann``) sharing the cache dir; the
    kernel drops it if the builder dies."""

    def __init__(self, path: Path):
        self.path = path.with_name(path.name + ".lock")
        self.fd: int | None = None

    def acquire(self) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self.fd = fd
        return True

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the lock
            self.fd = None


def open_or_drop(path: Path) -> AnnIndex | None:
    """Open ``path``; a damaged index (and its metadata) is removed, to be rebuilt."""
    try:
        return AnnIndex.open(path)
    except ValueError as exc:
        log.warning("%s; rebuilding it", exc)
        for stale in (path, path.with_suffix(".json")):
            stale.unlink(missing_ok=True)
        return None
