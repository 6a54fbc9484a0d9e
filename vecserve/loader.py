"""The bulk loader: a vector file (or arrays) into Redis, streaming, atomically.

The reader (``vecserve.readers``) parses the file in batches on the calling thread while
one writer thread encodes each batch and sends it in one pipelined round trip, so parsing
and network I/O overlap. At most ``QUEUE_DEPTH`` batches are in flight: memory stays
constant whatever the file size. The model is committed (its registry entry written, in
one ``HSET``) only after every vector is in; see :mod:`vecserve.store` for the layout.

What an interruption leaves behind:

- a corrupt or truncated file: nothing (the partial generation is dropped) and a
  :class:`~vecserve.errors.CorruptVectorFile` naming the file and position;
- Ctrl-C, a killed process, Redis going away: an *unfinished* load that ``vecserve
  models`` lists and that ``vecserve load ... --resume`` continues from the last batch
  (or ``vecserve models cleanup`` drops). The model itself is not visible either way;
  a previous generation of it stays visible and intact.

>>> info = load_file("GoogleNews-vectors-negative300.bin", name="GOOGLE_W2V")  # doctest: +SKIP
>>> info.count, info.dim                                                       # doctest: +SKIP
(3000000, 300)
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from .codec import get_codec
from .connect import open_store
from .errors import LoadInterrupted, StoreUnavailable, VecserveError, VectorFileError
from .store import LoadSession, ModelInfo, Store, begin_load, validate_model_name

__all__ = ["load_arrays", "load_file"]

log = logging.getLogger(__name__)

QUEUE_DEPTH = 4
DEFAULT_BATCH_BYTES = 2 << 20  # ~2 MB of float32 per batch: ~1,700 x 300-d vectors


class Progress:
    """A tqdm bar on a terminal, plain log lines every few seconds otherwise."""

    def __init__(self, *, total: int | None, desc: str, enabled: bool | None = None):
        self.total = total
        self.desc = desc
        self.done = 0
        self.start = time.monotonic()
        self._last_log = self.start
        tty = sys.stderr.isatty()
        self.enabled = True if enabled is None else enabled
        self._bar = None
        if self.enabled and tty:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total, desc=desc, unit="vec", unit_scale=True, dynamic_ncols=True
            )

    def update(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
            return
        now = time.monotonic()
        if self.enabled and now - self._last_log >= 5:
            self._last_log = now
            rate = self.done / max(now - self.start, 1e-9)
            pct = eta = ""
            if self.total:
                pct = f" ({100 * self.done / self.total:.0f}%)"
                eta = f", ETA {max(self.total - self.done, 0) / max(rate, 1e-9):.0f}s"
            total = f"/{self.total:,}" if self.total else ""
            log.info(
                "%s: %s%s vectors%s, %s vec/s%s",
                self.desc,
                f"{self.done:,}",
                total,
                pct,
                f"{rate:,.0f}",
                eta,
            )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    @property
    def rate(self) -> float:
        return self.done / max(time.monotonic() - self.start, 1e-9)


class _Writer:
    """One background thread that encodes and writes batches, in order."""

    def __init__(self, session: LoadSession, progress: Progress):
        self.session = session
        self.progress = progress
        self.codec = session.codec
        self.error: BaseException | None = None
        self._q: queue.Queue = queue.Queue(maxsize=QUEUE_DEPTH)
        self._thread = threading.Thread(target=self._run, name="vecserve-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            if self.error is not None:
                continue  # drain after a failure
            tokens, vectors, counts, resume = item
            try:
                encoded = self.codec.encode(vectors)
                if tokens is None:  # fastText n-gram bucket rows from number ``resume``
                    self.session.write_ngrams(resume, encoded)
                else:
                    self.session.write_encoded(tokens, encoded, counts=counts, resume=resume)
                self.progress.update(len(vectors))
            except BaseException as exc:
                self.error = exc

    def put(self, tokens, vectors, counts, resume) -> None:
        if self.error is not None:
            raise self.error
        self._q.put((tokens, vectors, counts, resume))

    def put_ngrams(self, first: int, vectors) -> None:
        """Queue n-gram bucket rows ``first, first + 1, ...`` (after every word)."""
        self.put(None, vectors, None, first)

    def finish(self) -> None:
        """Wait for every queued batch; re-raise the writer's error if it had one."""
        self._q.put(None)
        self._thread.join()
        if self.error is not None:
            raise self.error


def _fingerprint(path: Path) -> str:
    st = path.stat()
    return f"{st.st_size}:{st.st_mtime_ns}"


def load_file(
    path: str | os.PathLike,
    *,
    name: str,
    redis_url: str | None = None,
    store: Store | None = None,
    format: str = "auto",
    codec: str = "f32",
    limit: int | None = None,
    unicode_errors: str = "strict",
    encoding: str = "utf-8",
    batch_size: int | None = None,
    resume: bool = False,
    restart: bool = False,
    progress: bool | None = None,
) -> ModelInfo:
    """Load a vector file into Redis as model ``name``; return the committed metadata.

    Parameters
    ----------
    path : path
        word2vec ``.bin``/``.txt`` (also ``.gz``/``.bz2``), GloVe, fastText ``.vec``,
        a native fastText ``.bin`` (its n-gram bucket rows are stored too, and its
        ``min_n``/``max_n``/``bucket`` go to the model's metadata) or a gensim
        ``KeyedVectors.save()`` file.
    name : str
        Model name: the key prefix (``NAME:token``) and the registry entry.
    redis_url, store
        Where to write; neither means ``$VECSERVE_REDIS_URL`` or the embedded server.
    format : {"auto", "w2v-bin", "w2v-text", "glove", "fasttext", "fasttext-bin", "gensim"}
    codec : {"f32", "f16", "i8"}
    limit : int, optional
        Read at most this many vectors (gensim's ``limit=``).
    unicode_errors : {"strict", "ignore", "replace"}
        How to treat token bytes that are not valid ``encoding`` (as gensim).
    resume, restart : bool
        What to do with an interrupted load of the same name: continue it, or drop it.
    progress : bool, optional
        Report progress: a bar on a terminal, an INFO log line every 5 s otherwise
        (default on; False silences it).

    Examples
    --------
    >>> from gensim.test.utils import datapath
    >>> info = load_file(datapath("euclidean_vectors.bin"), name="EUC")  # doctest: +SKIP
    """
    from .readers import ResumePoint, open_vectors

    validate_model_name(name)  # fail on bad arguments before touching the file or Redis
    get_codec(codec)
    path = Path(path)
    if store is None:
        with open_store(redis_url) as st:
            return load_file(
                path,
                name=name,
                store=st,
                format=format,
                codec=codec,
                limit=limit,
                unicode_errors=unicode_errors,
                encoding=encoding,
                batch_size=batch_size,
                resume=resume,
                restart=restart,
                progress=progress,
            )
    fingerprint = _fingerprint(path) if path.is_file() else ""
    with open_vectors(
        path,
        format=format,
        limit=limit,
        unicode_errors=unicode_errors,
        encoding=encoding,
        batch_size=1,
    ) as probe:
        dim, fmt, declared = probe.dim, probe.format, probe.count
        sub = probe.subwords
        ngrams = sub.bucket if sub is not None and sub.max_n > 0 else 0
    session = begin_load(
        store,
        name,
        dim=dim,
        codec=codec,
        source=str(path.resolve()) if path.exists() else str(path),
        source_format=fmt,
        fingerprint=fingerprint,
        declared_count=declared,
        resume=resume,
        restart=restart,
    )
    if ngrams and not session.state.ngram_buckets:
        try:
            session.declare_ngrams(min_n=sub.min_n, max_n=sub.max_n, bucket=ngrams)  # type: ignore[union-attr]
        except BaseException:
            _abort(session, keep=False)
            raise
    resume_at = None
    seen: Sequence[str] | Iterator[str] = ()
    if session.written and session.resume_point:
        resume_at = ResumePoint(**session.resume_point)
        seen = session.seen_tokens()
        log.info("resuming the load of %s after %s vectors", name, f"{session.written:,}")
    batch = batch_size or max(64, DEFAULT_BATCH_BYTES // (4 * dim))
    total = None if declared is None else declared + ngrams
    prog = Progress(total=total, desc=f"loading {name}", enabled=progress)
    prog.done = session.written
    try:
        with open_vectors(
            path,
            format=fmt,
            limit=limit,
            unicode_errors=unicode_errors,
            encoding=encoding,
            batch_size=batch,
            resume=resume_at,
            seen_tokens=seen,
        ) as reader:
            writer = _Writer(session, prog)
            try:
                for b in reader:
                    writer.put(b.tokens, b.vectors, b.counts, _resume_dict(b.resume))
                if ngrams:  # fastText: the n-gram bucket rows, after the words
                    for first, rows in reader.subwords.batches(batch):  # type: ignore[union-attr]
                        writer.put_ngrams(first, rows)
            except BaseException:
                with contextlib.suppress(BaseException):
                    writer.finish()
                raise
            writer.finish()
            if session.written == 0:
                raise VectorFileError(str(path), "the file holds no vectors")
            info = session.commit(sha256=reader.sha256(), duplicates=reader.duplicates)
    except VectorFileError:
        _abort(session, keep=False)  # a bad file cannot be resumed: leave nothing behind
        raise
    except StoreUnavailable as exc:
        _abort(session, keep=True)
        raise LoadInterrupted(
            str(exc), model=name, path=str(path), written=session.written
        ) from exc
    except BaseException:
        _abort(session, keep=True)
        raise
    finally:
        prog.close()
    log.info(
        "loaded %s: %s vectors x %d (%s) in %.1fs, %s vec/s",
        name,
        f"{info.count:,}",
        info.dim,
        info.codec,
        info.load_seconds,
        f"{prog.rate:,.0f}",
    )
    return info


def _resume_dict(point) -> dict:
    return {"offset": int(point.offset), "records": int(point.records)} if point else {}


def _abort(session: LoadSession, *, keep: bool) -> None:
    try:
        session.abort(keep=keep)
    except (VecserveError, OSError) as exc:  # Redis gone: the state stays as it was
        log.debug("could not clean up the load of %s: %s", session.state.name, exc)


def load_arrays(
    tokens: Sequence[str],
    vectors: np.ndarray,
    *,
    name: str,
    redis_url: str | None = None,
    store: Store | None = None,
    codec: str = "f32",
    counts: np.ndarray | None = None,
    source: str = "",
    batch_size: int | None = None,
    progress: bool | None = None,
) -> ModelInfo:
    """Commit in-memory vectors (e.g. a freshly trained model) as model ``name``.

    >>> import numpy as np
    >>> info = load_arrays(["a", "b"], np.eye(2, dtype=np.float32), name="TINY")  # doctest: +SKIP
    """
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(tokens):
        raise ValueError(
            f"vectors must be (len(tokens), dim) = ({len(tokens)}, dim), got {vectors.shape}"
        )
    if len(set(tokens)) != len(tokens):
        raise ValueError("tokens must be unique")
    if counts is not None and len(counts) != len(tokens):
        raise ValueError(f"counts has {len(counts)} entries for {len(tokens)} tokens")
    if store is None:
        with open_store(redis_url) as st:
            return load_arrays(
                tokens,
                vectors,
                name=name,
                store=st,
                codec=codec,
                counts=counts,
                source=source,
                batch_size=batch_size,
                progress=progress,
            )
    dim = vectors.shape[1]
    session = begin_load(
        store,
        name,
        dim=dim,
        codec=codec,
        source=source,
        source_format="arrays",
        declared_count=len(tokens),
        restart=True,
    )
    batch = batch_size or max(64, DEFAULT_BATCH_BYTES // (4 * max(dim, 1)))
    prog = Progress(total=len(tokens), desc=f"writing {name}", enabled=progress)
    try:
        writer = _Writer(session, prog)
        try:
            for lo in range(0, len(tokens), batch):
                hi = lo + batch
                writer.put(
                    list(tokens[lo:hi]),
                    vectors[lo:hi],
                    None if counts is None else np.asarray(counts[lo:hi], dtype=np.int64),
                    {},
                )
        finally:
            writer.finish()
        return session.commit()
    except BaseException:
        _abort(session, keep=False)
        raise
    finally:
        prog.close()
