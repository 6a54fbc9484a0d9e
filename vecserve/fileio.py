"""Files that appear whole or not at all: write to a temporary name beside the target,
flush, then rename over it (``os.replace`` is atomic within one filesystem).

A reader (another process mapping the file) sees the old file or the new one, never a
half-written one; a writer that fails or is killed leaves at most a temporary file whose
name starts with ``.`` and the target's name, and never a damaged target. A directory of
files (:func:`atomic_dir`) appears whole the same way, once: the first writer's stays.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> with atomic_write(d / "a.txt", "w") as f:
...     _ = f.write("whole")
>>> (d / "a.txt").read_text(), sorted(p.name for p in d.iterdir())
('whole', ['a.txt'])
>>> with atomic_path(d / "b.bin") as tmp:
...     _ = tmp.write_bytes(b"xy")
>>> (d / "b.bin").read_bytes()
b'xy'
>>> with atomic_dir(d / "snap") as tmp:
...     _ = (tmp / "x.npy").write_bytes(b"1")
>>> sorted(p.name for p in (d / "snap").iterdir())
['x.npy']
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_dir", "atomic_path", "atomic_write"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, fsync: bool = True) -> Iterator[Path]:
    """Yield a fresh temporary path beside ``path``; when the block ends without an
    exception, move it onto ``path`` (after an ``fsync`` of the file, unless ``fsync`` is
    False: for files that only report progress). On an exception, remove it.

    For writers that take a path (``np.save``, a library's ``save(path)``) or that map
    the file while filling it.
    """
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        if fsync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike, mode: str = "wb", *, fsync: bool = True, **open_kwargs: Any
) -> Iterator[IO]:
    """Open a temporary file beside ``path`` for writing (``mode`` ``"wb"`` or ``"w"``);
    when the block ends without an exception, flush it and move it onto ``path``."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write writes a new file: mode 'w' or 'wb', not {mode!r}")
    with atomic_path(path, fsync=False) as tmp, open(tmp, mode, **open_kwargs) as f:
        yield f
        f.flush()
        if fsync:
            os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a fresh temporary directory beside ``path``; when the block ends without an
    exception, rename it to ``path``. Where ``path`` already exists (another writer got
    there first), theirs is kept and ours removed: a directory is written once, never
    replaced while readers may map its files. On an exception, ours is removed."""
    path = Path(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        yield tmp
        try:
            os.rename(tmp, path)
        except OSError:
            if not path.exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
