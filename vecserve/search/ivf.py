"""An inverted-file (IVF) index of unit rows in NumPy and BLAS, one memory-mappable file.

How it is built (:meth:`IvfIndex.build_arrays`): spherical k-means on a seeded sample of
the rows gives ``nlist`` unit centroids (``sample_per_list`` rows per centroid,
``iters`` Lloyd rounds, each one ``sgemm``); one pass over all rows in chunks assigns
each row to its nearest centroid (inner product); the rows are then written *grouped by
list* (a list-ordered copy of the unit rows: int8 codes with one float32 scale a row by
default, float16 or float32 on request) with their row numbers, so a list is one
contiguous block of the file.

How a query runs (:meth:`IvfIndex.candidates`): the query scores the centroids, and the
``nprobe`` best lists are scanned straight from the memory map in one C pass that keeps
the ``k`` best rows in a heap. A batch is one C call without the GIL
(:meth:`vecserve.search._ivfscan.Searcher.search`; a large one split by queries between two
threads): the centroid scores of four queries at a time, each query's lists, then each
list read once for all the queries that probe it (int8 rows eight at a time, each
query's eight scores from integer products; a large list read as four streams; a lone
query's lists best first); a query's scores are the same floats alone or in a batch. A
large scan is bound by memory bandwidth, so the fewer bytes a row the faster: int8 rows
are a quarter of float32's bytes, float16 half. An int8 row is its unit row ``u`` as
codes ``c`` (``round(u / s)``, ``s = max|u| / 127``) and the scale ``s``; its score is
``s (c . t c_q)``, the query ``q`` as int16 codes ``c_q`` and a power-of-two scale ``t``
(the sum in exact integers), within ``|u - s c| + (1 + |u - s c|) |q - t c_q|`` of
``u . q`` for a unit query (Cauchy-Schwarz); the file records the largest ``|u - s c|`` of its
rows (:attr:`IvfIndex.score_bound`, :meth:`IvfIndex.query_bound`); float16 rounding
moves a score by under 1e-3. These scores only decide which rows become candidates:
callers re-score candidates exactly (:meth:`vecserve.search.ann.AnnIndex.most_similar`).
The other approximation is which lists are scanned.

The file: ``VSIVF001``, a little-endian ``uint64`` header length, a JSON header (dim,
count, nlist, and each array's offset, dtype and shape), then the arrays, each aligned
to 64 bytes: ``centroids`` (nlist x dim f32), ``offsets`` (nlist + 1 int64: list ``l``
is ``rows[offsets[l]:offsets[l + 1]]``), ``ids`` (count int64), ``rows`` (count x dim
i8, f16 or f32: the header says which) and, for int8 rows, ``scales`` (count f32; the
header's ``score_bound`` covers their error). :meth:`IvfIndex.open` maps it read-only (shared by
every process through the page cache) and checks that it is whole: a damaged file raises
``ValueError`` naming what is wrong. This module knows nothing of models or snapshots.

>>> import tempfile
>>> rng = np.random.default_rng(0)
>>> x = rng.standard_normal((2000, 8)).astype(np.float32)
>>> with tempfile.TemporaryDirectory() as tmp:
...     IvfIndex.build_arrays(x, f"{tmp}/a.ivf", nlist=16)
...     index = IvfIndex.open(f"{tmp}/a.ivf")
...     index.nprobe = 16  # every list: exact
...     best = index.candidates(x[:1] / np.linalg.norm(x[0]), 1)[0]
...     int(best[0]), index.nlist, index.count
(0, 16, 2000)
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..errors import InvalidSetting
from ..fileio import atomic_path
from ._ivfscan import Searcher, pack_centroids, query_codes, top_rows
from .exact import scan_pool

__all__ = ["IvfIndex", "default_nlist"]

MAGIC = b"VSIVF001"
ALIGN = 64
#: Rows a chunk of the assignment pass (a chunk x nlist float32 score matrix).
CHUNK = 8192
#: What writing a row costs, as a share of assigning it (for the progress reported).
WRITE_COST = 0.5
#: A batch's scan is split between threads from this much work on (rows read, plus a
#: row's dot product per query probing its list): less is done before a thread starts.
PARALLEL_WORK = 32768


def default_nlist(count: int) -> int:
    """Lists for ``count`` rows: about one per 512 rows, 1 to 4096.

    >>> default_nlist(3_000_000), default_nlist(20_000), default_nlist(10)
    (4096, 39, 1)
    """
    return int(min(4096, max(1, count // 512)))


def _unit(block: np.ndarray, norms: np.ndarray | None) -> np.ndarray:
    block = np.asarray(block, dtype=np.float32)
    n = (np.linalg.norm(block, axis=1) if norms is None else np.asarray(norms, dtype=np.float32))[
        :, None
    ]
    return np.divide(block, n, out=np.zeros_like(block), where=n > 0)


def _assign(rows: np.ndarray, centroids: np.ndarray, buf: np.ndarray) -> np.ndarray:
    """The nearest centroid (largest inner product) of each row, ``CHUNK`` rows a time."""
    out = np.empty(len(rows), dtype=np.int32)
    for lo in range(0, len(rows), len(buf)):
        hi = min(lo + len(buf), len(rows))
        scores = np.matmul(rows[lo:hi], centroids.T, out=buf[: hi - lo])
        out[lo:hi] = scores.argmax(axis=1)
    return out


def _kmeans(sample: np.ndarray, nlist: int, iters: int, rng, after=None) -> np.ndarray:
    """Spherical k-means: unit centroids; an emptied list is re-seeded with a random row.
    ``after(i)`` is called after round ``i`` (1-based)."""
    centroids = sample[rng.choice(len(sample), nlist, replace=False)].copy()
    buf = np.empty((min(CHUNK, len(sample)), nlist), dtype=np.float32)
    for round_ in range(iters):
        assign = _assign(sample, centroids, buf)
        counts = np.bincount(assign, minlength=nlist)
        order = np.argsort(assign, kind="stable")
        full = counts > 0
        starts = (np.cumsum(counts) - counts)[full]
        sums = np.zeros_like(centroids)
        sums[full] = np.add.reduceat(sample[order], starts, axis=0)
        empty = np.flatnonzero(~full)
        sums[empty] = sample[rng.choice(len(sample), len(empty), replace=False)]
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        centroids = np.divide(sums, norms, out=np.zeros_like(sums), where=norms > 0)
        if after is not None:
            after(round_ + 1)
    return centroids


#: The rows' storage types a file may hold, by the name callers use.
ROW_DTYPES = {"i8": "|i1", "f16": "<f2", "f32": "<f4"}
#: How far a float row's score may be from its cosine (unit row, unit query): float16's
#: rounding of each coordinate (2**-11 relative, Cauchy-Schwarz: 4.9e-4 in all) and the
#: float32 sums, with a margin of 2.
FLOAT_SCORE_BOUND = 1e-3
#: Added to an int8 file's largest row error: the float32 arithmetic of a score.
I8_SLACK = 1e-5


def _layout(
    nlist: int, count: int, dim: int, rows: str = "<f2", score_bound: float | None = None
) -> tuple[dict, int]:
    """The header (array offsets, dtypes, shapes; int8 rows: their scales and score bound)
    and the file size."""
    if rows not in ROW_DTYPES.values():
        raise ValueError(f"rows stored as {rows!r}: not one of {sorted(ROW_DTYPES.values())}")
    arrays, pos = {}, 0
    scaled = rows == ROW_DTYPES["i8"]
    for name, dtype, shape in (
        ("centroids", "<f4", [nlist, dim]),
        ("offsets", "<i8", [nlist + 1]),
        ("ids", "<i8", [count]),
        ("rows", rows, [count, dim]),
        *([("scales", "<f4", [count])] if scaled else []),
    ):
        arrays[name] = {"offset": pos, "dtype": dtype, "shape": shape}
        pos += -(-int(np.prod(shape)) * np.dtype(dtype).itemsize // ALIGN) * ALIGN
    header = {"format": 1, "nlist": nlist, "count": count, "dim": dim, "arrays": arrays}
    if scaled:
        header["score_bound"] = score_bound
    return header, pos


def quantize(unit: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Unit rows as int8 codes and one float32 scale a row (``max|u| / 127``): ``(codes,
    scales, largest |u - scale x codes|)``. A zero row is all-zero codes of scale 0.

    >>> codes, scales, err = quantize(np.array([[0.6, -0.8], [0, 0]], dtype=np.float32))
    >>> codes.tolist(), [round(float(s), 5) for s in scales], err < 0.004
    ([[95, -127], [0, 0]], [0.0063, 0.0], True)
    """
    scales = (np.abs(unit).max(axis=1, initial=0.0) / 127).astype(np.float32)
    inv = np.divide(1, scales, out=np.zeros_like(scales), where=scales > 0)
    codes = np.rint(unit * inv[:, None]).clip(-127, 127).astype(np.int8)
    err = np.linalg.norm(unit - codes * scales[:, None], axis=1)
    return codes, scales, float(err.max(initial=0.0))


def _header_bytes(header: dict) -> bytes:
    """The file's lead: magic, length, JSON header, padding. An int8 file's ``score_bound``
    is written as a number of fixed width (``1.234567890e-02``): the build writes the header
    before its rows, and rewrites it in place once the rows' largest error is known."""
    bound = header.get("score_bound")
    if bound is None:
        raw = json.dumps(header).encode()
    else:
        marked = json.dumps({**header, "score_bound": "@bound@"})
        raw = marked.replace('"@bound@"', f"{float(bound):.9e}").encode()
    start = len(MAGIC) + 8 + len(raw)
    pad = -start % ALIGN
    return MAGIC + (len(raw) + pad).to_bytes(8, "little") + raw + b" " * pad


class IvfIndex:
    """A memory-mapped IVF index (see the module docstring); ``nprobe`` lists a query."""

    def __init__(self, path: Path, header: dict, arrays: dict[str, np.ndarray]):
        self.path = path
        self.header = header
        self.centroids = arrays["centroids"]
        self.offsets = arrays["offsets"]
        self.ids = arrays["ids"]
        self.rows = arrays["rows"]
        self.scales = arrays.get("scales")  #: int8 rows' scales (else None)
        self.nprobe = 16
        self.nbytes = os.path.getsize(path)  #: the file's size

    @property
    def nlist(self) -> int:
        return int(self.header["nlist"])

    @property
    def count(self) -> int:
        return int(self.header["count"])

    @property
    def dim(self) -> int:
        return int(self.header["dim"])

    @property
    def score_bound(self) -> float:
        """How far a stored row's score may be from its cosine with a unit query, as far
        as the rows' rounding goes (int8 rows: the file's largest ``|u - s c|``)."""
        bound = self.header.get("score_bound")
        return FLOAT_SCORE_BOUND if bound is None else float(bound)

    def query_bound(self, query: np.ndarray) -> float:
        """How far a stored row's score for this unit ``query`` may be from its cosine.
        int8 rows are multiplied by the query's int16 codes ``t c_q``
        (:func:`~vecserve.search._ivfscan.query_codes`), so to the rows' bound ``b`` adds
        ``|s c| |q - t c_q| <= (1 + b) |q - t c_q|`` (Cauchy-Schwarz); float rows: the
        rows' bound. A query with no codes (NaN, infinity) has no bound (``inf``)."""
        bound = self.score_bound
        if self.scales is None:
            return bound
        coded = query_codes(np.ascontiguousarray(query, dtype=np.float32))
        if coded is None:
            return float("inf")
        codes, t = coded
        err = float(np.linalg.norm(query.astype(np.float64) - codes * np.float64(t)))
        return bound + (1 + bound) * err

    @classmethod
    def build_arrays(
        cls,
        rows,
        path: str | os.PathLike,
        *,
        nlist: int,
        norms=None,
        sample_per_list: int = 32,
        iters: int = 8,
        seed: int = 0,
        threads: int = 0,
        chunk: int = CHUNK * 8,
        dtype: str = "i8",
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """Build over ``rows`` (count x dim, any float array, memory maps welcome; divided
        by ``norms`` or their own norms) and write ``path`` atomically.

        ``progress(done, count)`` is called after each k-means round and each ``chunk`` rows
        of the assignment pass and of the write, ``done`` being the rows' worth of work
        done so far (k-means counted as the rows it assigns); ``threads`` > 0 caps BLAS's
        threads meanwhile. ``dtype``: the stored rows' type, ``"i8"`` (the default), ``"f16"``
        or ``"f32"``.
        """
        if dtype not in ROW_DTYPES:
            raise InvalidSetting(f"IVF rows as {dtype!r}: choose one of {', '.join(ROW_DTYPES)}")
        limit = contextlib.nullcontext()
        if threads > 0:
            from threadpoolctl import threadpool_limits

            limit = threadpool_limits(threads)
        with limit:
            cls._build(
                rows,
                Path(path),
                nlist,
                norms,
                sample_per_list,
                iters,
                seed,
                chunk,
                ROW_DTYPES[dtype],
                progress,
            )

    @classmethod
    def _build(cls, rows, path, nlist, norms, sample_per_list, iters, seed, step, stored, progress):
        count, dim = rows.shape
        nlist = int(max(1, min(nlist, count)))
        rng = np.random.default_rng(seed)
        pick = np.sort(rng.choice(count, min(count, nlist * sample_per_list), replace=False))
        sample = _unit(rows[pick], None if norms is None else norms[pick])
        # progress in rows' worth of work: a k-means round costs its sample's rows, the
        # assignment pass one unit a row, the write (a gather and a copy) WRITE_COST a row
        work = [iters * len(sample), count, WRITE_COST * count]
        total = sum(work)

        def report(done_units: float) -> None:
            if progress is not None:
                progress(min(count, round(count * done_units / total)), count)

        per_round = len(sample)
        centroids = _kmeans(sample, nlist, iters, rng, lambda i: report(i * per_round))
        del sample
        assign = np.empty(count, dtype=np.int32)
        buf = np.empty((CHUNK, nlist), dtype=np.float32)
        for lo in range(0, count, step):
            hi = min(lo + step, count)
            block = _unit(rows[lo:hi], None if norms is None else norms[lo:hi])
            assign[lo:hi] = _assign(block, centroids, buf)
            report(work[0] + hi)
        del buf
        counts = np.bincount(assign, minlength=nlist)
        order = np.argsort(assign, kind="stable")
        del assign
        scaled = stored == ROW_DTYPES["i8"]
        largest = 0.0  # int8 rows: the largest row error, into the header once known
        header, size = _layout(nlist, count, dim, stored, largest if scaled else None)
        head = _header_bytes(header)
        with atomic_path(path, fsync=False) as tmp:  # a cache: rebuilt if damaged
            with open(tmp, "wb") as f:
                f.write(head)
                f.truncate(len(head) + size)
            mapped = np.memmap(tmp, dtype=np.uint8, mode="r+")
            arrays = _views(mapped, header, len(head))
            arrays["centroids"][:] = centroids
            arrays["offsets"][0] = 0
            np.cumsum(counts, out=arrays["offsets"][1:])
            arrays["ids"][:] = order
            out = arrays["rows"]
            for lo in range(0, count, step):  # rows in list order (gathered, then unit)
                hi = min(lo + step, count)
                take = order[lo:hi]
                unit = _unit(rows[take], None if norms is None else norms[take])
                if scaled:
                    out[lo:hi], arrays["scales"][lo:hi], err = quantize(unit)
                    largest = max(largest, err)
                else:
                    out[lo:hi] = unit
                report(work[0] + work[1] + WRITE_COST * hi)
            if scaled:  # the bound's fixed width: the same header length, rewritten in place
                header["score_bound"] = largest + I8_SLACK
                final = _header_bytes(header)
                assert len(final) == len(head)
                mapped[: len(final)] = np.frombuffer(final, dtype=np.uint8)
            mapped.flush()
            del arrays, out, mapped

    @classmethod
    def open(cls, path: str | os.PathLike) -> IvfIndex:
        """Map ``path`` read-only. Raises ``FileNotFoundError`` if absent and ``ValueError``
        (saying what is wrong) if it is not a whole IVF index file."""
        path = Path(path)
        with open(path, "rb") as f:
            lead = f.read(len(MAGIC) + 8)
            if len(lead) < len(MAGIC) + 8 or lead[: len(MAGIC)] != MAGIC:
                raise ValueError(f"{path} is not a vecserve IVF index (bad magic bytes)")
            length = int.from_bytes(lead[len(MAGIC) :], "little")
            try:
                header = json.loads(f.read(length))
                stored = header["arrays"]["rows"]["dtype"]
                bound = header.get("score_bound")
                want = _layout(header["nlist"], header["count"], header["dim"], stored, bound)
                scaled = stored == ROW_DTYPES["i8"]
                if scaled and not (isinstance(bound, float | int) and 0 <= bound < 2):
                    raise ValueError(f"score bound {bound!r}")
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}: damaged IVF header ({exc})") from None
        start = len(lead) + length
        if want[0] != header or os.path.getsize(path) != start + want[1]:
            raise ValueError(
                f"{path}: truncated or damaged IVF index ({os.path.getsize(path):,} bytes, "
                f"expected {start + want[1]:,})"
            )
        arrays = _views(np.memmap(path, dtype=np.uint8, mode="r"), header, start)
        offsets = arrays["offsets"]
        if offsets[0] != 0 or offsets[-1] != header["count"] or np.any(np.diff(offsets) < 0):
            raise ValueError(f"{path}: damaged IVF index (list offsets do not add up)")
        return cls(path, header, arrays)

    @property
    def searcher(self) -> Searcher:
        """The C search of this file's arrays (:class:`~._ivfscan.Searcher`: the centroids
        packed as it reads them, the arrays checked once), made on first use."""
        searcher = self.__dict__.get("_searcher")
        if searcher is None:
            packed = pack_centroids(self.centroids)
            args = (packed, self.nlist, self.rows, self.offsets, self.ids, self.scales)
            searcher = self.__dict__["_searcher"] = Searcher(*args)
        return searcher

    def _search(self, queries: np.ndarray, nprobe: int, k: int, threads: int) -> tuple:
        """:meth:`~._ivfscan.Searcher.search` of the unit query rows: ``(found, near)``. A
        large batch is split by queries between ``threads`` (the C call releases the
        GIL; a query's answer does not depend on its company)."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        m = len(queries)
        search = self.searcher.search
        parts = 1
        if m > 1:
            rows_a_probe = self.count / max(self.nlist, 1)
            work = m * (self.nlist + (nprobe * rows_a_probe if k else 0))
            parts = max(1, min(threads, m, int(work // PARALLEL_WORK)))
        if parts == 1:
            return search(queries, nprobe, k)
        edges = np.linspace(0, m, parts + 1).astype(np.int64)

        def part(i: int) -> tuple:
            return search(queries[edges[i] : edges[i + 1]], nprobe, k)

        # the calling thread searches the last part itself: one hand-off fewer to wait for
        others = [scan_pool().submit(part, i) for i in range(parts - 1)]
        last = part(parts - 1)
        got = [f.result() for f in others] + [last]
        return np.concatenate([g[0] for g in got]), np.concatenate([g[1] for g in got])

    def nearest_lists(self, queries: np.ndarray, nprobe: int, threads: int = 2) -> np.ndarray:
        """Each unit query row's ``nprobe`` nearest lists (largest inner product with their
        centroids), best first: ``len(queries) x nprobe`` int64, -1 where a query has
        fewer (NaN scores).

        The centroids are scored by a C loop (one multiply-add chain a score, in the same
        order whatever the batch), not by a BLAS product: a query's centroid scores are
        then the same floats alone or in a batch (so it probes the same lists), and no BLAS
        threads are woken for a small product (on a busy 2-core box their waiting cost
        1-15 ms where the product takes 0.1 ms)."""
        return self._search(queries, min(int(nprobe), self.nlist), 0, threads)[1]

    def candidates(self, queries: np.ndarray, k: int, threads: int = 2) -> np.ndarray:
        """For each unit query row, the row numbers of the ``k`` best rows (by inner
        product, of the stored rows) in its ``nprobe`` nearest lists, best first:
        ``len(queries) x k`` int64, padded with -1 where the lists hold fewer.

        One C call (:meth:`~vecserve.search._ivfscan.Searcher.search`, without the GIL)
        scores the centroids, picks each query's lists and reads each list once for all
        the queries of the call that probe it, in the file's order; a large batch is split
        by queries between ``threads``."""
        m, k = len(queries), max(0, int(k))
        if m == 0 or k == 0:
            return np.full((m, k), -1, dtype=np.int64)
        return self._search(queries, min(self.nprobe, self.nlist), k, threads)[0]

    def scan_all(self, query: np.ndarray, k: int, threads: int = 2) -> tuple:
        """The ``k`` best rows of the whole file for one unit ``query`` (by inner product
        with the stored rows): ``(row numbers, scores)``, best first, ties to the earlier
        stored row. Every row is read, in ``threads`` contiguous parts at once (the C
        pass releases the GIL)."""
        query = np.ascontiguousarray(query, dtype=np.float32)
        parts = max(1, min(threads, self.count // 65536))
        edges = np.linspace(0, self.count, parts + 1).astype(np.int64)

        def part(i: int) -> tuple:
            return top_rows(
                self.rows, edges[i : i + 1], edges[i + 1 : i + 2], query, k, self.scales
            )

        if parts == 1:
            pos, scores = part(0)
        else:
            got = list(scan_pool().map(part, range(parts)))
            pos = np.concatenate([g[0] for g in got])
            scores = np.concatenate([g[1] for g in got])
            best = np.lexsort((pos, -scores))[:k]  # score, then stored position
            pos, scores = pos[best], scores[best]
        return np.asarray(self.ids[pos], dtype=np.int64), scores


def _views(buf: np.memmap, header: dict, start: int) -> dict[str, np.ndarray]:
    out = {}
    for name, a in header["arrays"].items():
        dtype = np.dtype(a["dtype"])
        n = int(np.prod(a["shape"]))
        lo = start + a["offset"]
        view = buf[lo : lo + n * dtype.itemsize].view(dtype).reshape(a["shape"])
        out[name] = view.view(np.ndarray)  # plain arrays: no memmap overhead per operation
    return out
