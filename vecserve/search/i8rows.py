"""The int8 rows of exact batches as one file of a snapshot: packed once per generation,
memory-mapped read-only by every process (N workers share one page-cache copy).

:class:`~vecserve.search._exact.QuantizedRows` (the first pass of an exact batch: every
unit row as int8 codes with its proven error terms) takes ~5 s to pack at 1M x 300 and
~14 s at 3M, and is a quarter of the float32 matrix. Packed per process, every worker
paid both. Here the first process to need them packs them straight into a temporary file
beside the snapshot's arrays (under an ``flock`` on ``<file>.lock``: one packer per
generation, the others wait and map its file), renamed into place whole
(:func:`vecserve.fileio.atomic_path`); a new generation has a new snapshot directory,
so its own file.

Layout (``int8.rows``): a :data:`HEADER`-byte header, then ``codes`` (``npanels x groups
x 64`` bytes), then ``scale``, ``err`` and ``unorm`` (``npanels x PANEL`` float32 each),
as :func:`vecserve.search._exact.layout` sizes them. The header holds the format's magic
and version, the matrix's rows and dimensions, whether the rows are usable (no NaN or
infinity), and CRC-32s of: the snapshot's norms (the rows belong to these vectors), the
three per-row arrays (whole: 16 bytes a row), :data:`STRIPES` stripes of the codes spread
over them, and the header itself. Opening checks all of it and the file's exact size:
a few tens of ms at 3M rows, without reading the 900 MB of codes. A file that fails a
check is :class:`~vecserve.errors.SnapshotDamaged` (part ``"int8 rows"``) and is packed
again; damage to the codes between the checked stripes (bit rot, not a crash: the file
only ever appears whole) is not detected.

The odd rows of a matrix (:meth:`vecserve.search.exact.ExactScan.odd_rows`: the rows whose
``sgemv`` score depends on the BLAS's threading and unrolling, ~1 s of probing at 1M x
300) are kept beside it too, one small JSON file per BLAS configuration
(``odd-rows.<tag>.json``, :func:`blas_tag`: the library, its version, the CPU kernel it
chose and its threads), so a process only reuses what a BLAS like its own found.

>>> import tempfile, pathlib
>>> v = np.random.default_rng(0).standard_normal((100, 8)).astype(np.float32)
>>> norms = np.linalg.norm(v, axis=1)
>>> path = pathlib.Path(tempfile.mkdtemp()) / FILE
>>> qr = load(path, v, norms)
>>> qr.n, qr.usable, qr.codes.flags.writeable
(100, True, False)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import mmap
import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..errors import SnapshotDamaged
from ..fileio import atomic_path, atomic_write
from ._exact import PANEL, QuantizedRows, layout

__all__ = ["FILE", "HEADER", "STRIPES", "blas_tag", "load", "odd_rows", "open_rows", "write"]

#: The file's name in a snapshot directory.
FILE = "int8.rows"
#: Bytes before the codes (a page: every array starts 64-byte aligned).
HEADER = 4096
#: Stripes of the codes whose CRC-32 is checked on open, and their bytes.
STRIPES = 64
STRIPE_BYTES = 16 << 10

MAGIC = b"VSI8ROWS"
VERSION = 1
# magic, version, usable, rows, dims, CRC-32 of the norms, of the per-row arrays, of the
# codes' stripes; then the CRC-32 of these fields
_FIELDS = struct.Struct("<8sIIQQIII")
_CRC = struct.Struct("<I")
PART = "int8 rows"

log = logging.getLogger(__name__)


def _sizes(n: int, d: int) -> tuple[int, int]:
    """Bytes of the codes, and floats of each per-row array."""
    groups, npanels = layout(n, d)
    return npanels * groups * 64, npanels * PANEL


def _crc(*arrays) -> int:
    crc = 0
    for a in arrays:
        crc = zlib.crc32(memoryview(np.ascontiguousarray(a)).cast("B"), crc)
    return crc


def _stripes_crc(codes: np.ndarray) -> int:
    """CRC-32 of :data:`STRIPES` stripes spread over ``codes`` (all of a small file)."""
    size = len(codes)
    if size <= STRIPES * STRIPE_BYTES:
        return _crc(codes)
    starts = np.linspace(0, size - STRIPE_BYTES, STRIPES).astype(np.int64) // 64 * 64
    return _crc(*(codes[s : s + STRIPE_BYTES] for s in starts.tolist()))


def _arrays(buf, n: int, d: int) -> tuple[np.ndarray, ...]:
    """The four arrays of the file's buffer ``buf`` (past the header)."""
    nbytes, rows = _sizes(n, d)
    codes = np.frombuffer(buf, dtype=np.uint8, count=nbytes, offset=HEADER)
    floats = [
        np.frombuffer(buf, dtype="<f4", count=rows, offset=HEADER + nbytes + 4 * rows * i)
        for i in range(3)
    ]
    return (codes, *floats)


def write(
    path: str | os.PathLike, vectors: np.ndarray, norms: np.ndarray, *, map: Callable = map
) -> None:
    """Pack ``vectors`` (with their ``norms``) into the file ``path``, which appears whole
    or not at all. ``map`` runs the packing of chunks of rows (a thread pool's, in
    parallel)."""
    path = Path(path)
    n, d = vectors.shape
    nbytes, rows = _sizes(n, d)
    with atomic_path(path) as tmp, open(tmp, "r+b") as f:
        f.truncate(HEADER + nbytes + 12 * rows)
        with mmap.mmap(f.fileno(), 0) as buf:
            arrays = _arrays(buf, n, d)
            qr = QuantizedRows(vectors, norms, map=map, out=arrays)
            fields = _FIELDS.pack(
                MAGIC,
                VERSION,
                int(qr.usable),
                n,
                d,
                _crc(np.asarray(norms, dtype=np.float32)),
                _crc(*arrays[1:]),
                _stripes_crc(arrays[0]),
            )
            del qr, arrays  # no view of the map outlives it
            buf[: _FIELDS.size] = fields
            buf[_FIELDS.size : _FIELDS.size + _CRC.size] = _CRC.pack(zlib.crc32(fields))
            buf.flush()


def open_rows(path: str | os.PathLike, norms: np.ndarray) -> QuantizedRows:
    """Map the file ``path`` read-only, checked against the snapshot's ``norms`` (see the
    module docstring). FileNotFoundError if there is none; SnapshotDamaged if it fails a
    check."""
    path = Path(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < HEADER:
            raise SnapshotDamaged(path, PART, f"{size} bytes, less than its header")
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    head = bytes(buf[: _FIELDS.size + _CRC.size])
    fields = head[: _FIELDS.size]
    magic, version, usable, n, d, norms_crc, rows_crc, codes_crc = _FIELDS.unpack(fields)
    if magic != MAGIC or _CRC.unpack(head[_FIELDS.size :])[0] != zlib.crc32(fields):
        raise SnapshotDamaged(path, PART, "no int8 rows header, or a damaged one")
    if version != VERSION:
        raise SnapshotDamaged(path, PART, f"format version {version}, not {VERSION}")
    if n != len(norms) or d <= 0:
        raise SnapshotDamaged(path, PART, f"{n} x {d} rows for a snapshot of {len(norms)}")
    nbytes, rows = _sizes(n, d)
    if size != HEADER + nbytes + 12 * rows:
        raise SnapshotDamaged(path, PART, f"{size} bytes, not {HEADER + nbytes + 12 * rows}")
    arrays = _arrays(buf, n, d)
    if _crc(np.asarray(norms, dtype=np.float32)) != norms_crc:
        raise SnapshotDamaged(path, PART, "packed from other vectors than the snapshot's")
    if _crc(*arrays[1:]) != rows_crc or _stripes_crc(arrays[0]) != codes_crc:
        raise SnapshotDamaged(path, PART, "checksum mismatch")
    return QuantizedRows.mapped(*arrays, n, d, bool(usable))


@contextlib.contextmanager
def _packer_lock(path: Path):
    """An exclusive ``flock`` on ``<path>.lock``, waited for: one packer among the
    processes sharing the snapshot (the kernel drops it if the packer dies)."""
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def load(
    path: str | os.PathLike, vectors: np.ndarray, norms: np.ndarray, *, map: Callable = map
) -> QuantizedRows:
    """The int8 rows of ``vectors`` from the file ``path``: mapped if it is there and
    whole, else packed into it first (one packer among all processes; a damaged file is
    logged and packed again). Where the file cannot be written (a read-only or full
    disk), the rows are packed in this process's memory, with a warning."""
    path = Path(path)
    with contextlib.suppress(OSError, SnapshotDamaged):
        return open_rows(path, norms)  # the common case: packed before, no lock
    try:
        with _packer_lock(path):
            try:  # packed by another process while this one waited?
                return open_rows(path, norms)
            except FileNotFoundError:
                pass
            except SnapshotDamaged as exc:
                log.warning("%s; packing them again", exc)
            write(path, vectors, norms, map=map)
    except OSError as exc:
        log.warning("int8 rows not written to %s (%s): packed in memory", path, exc)
        return QuantizedRows(vectors, norms, map=map)
    return open_rows(path, norms)


def blas_tag() -> str:
    """A short hash of numpy's BLAS as this process runs it (library file, version, CPU
    kernel, threading layer, threads): processes with equal tags score every row alike."""
    from threadpoolctl import threadpool_info

    blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    mine = [i for i in blas if "numpy" in str(i.get("filepath", ""))] or blas
    keys = ("filepath", "version", "architecture", "threading_layer", "num_threads")
    text = json.dumps([[i.get(k) for k in keys] for i in mine], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def odd_rows(path: str | os.PathLike, n: int, find: Callable[[], np.ndarray]) -> np.ndarray:
    """The odd rows of the ``n``-row matrix whose int8 rows are the file ``path``: read
    from the file of this process's :func:`blas_tag` beside it, else ``find()`` and kept
    there (best effort: a file that cannot be written or read is found again)."""
    tag = blas_tag()
    file = Path(path).with_name(f"odd-rows.{tag}.json")
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        data = json.loads(file.read_text())
        rows = np.asarray(data["rows"], dtype=np.int64)
        crc = zlib.crc32(json.dumps([tag, n, data["rows"]]).encode())
        if (
            data["crc"] == crc
            and rows.ndim == 1
            and np.all((rows >= 0) & (rows < n))
            and np.all(np.diff(rows) > 0)
        ):
            return rows
        log.warning("%s: damaged odd-rows file; finding them again", file)
    rows = np.asarray(find(), dtype=np.int64)
    listed = rows.tolist()
    crc = zlib.crc32(json.dumps([tag, n, listed]).encode())
    with contextlib.suppress(OSError), atomic_write(file, "w") as f:
        json.dump({"rows": listed, "crc": crc}, f)
    return rows
