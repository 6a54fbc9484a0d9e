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
from typing import BinaryIO

import numpy as np

from .codec import get_codec
from .connect import open_store
from .errors import (
    InvalidSetting,
    LoadInterrupted,
    LoadRefused,
    StoreUnavailable,
    VecserveError,
    VectorFileError,
)
from .store import LoadSession, ModelInfo, Store, begin_load, validate_model_name
from .store.registry import gb

__all__ = ["estimate_bytes", "load_arrays", "load_file", "preflight", "retry_wait"]

log = logging.getLogger(__name__)

QUEUE_DEPTH = 4
DEFAULT_BATCH_BYTES = 2 << 20  # ~2 MB of float32 per batch: ~1,700 x 300-d vectors
# Server memory of a row beyond its value's bytes: the key's own bytes, then ~100 B of
# dict entry, object and allocation overhead, its vocabulary entry and hash (measured on
# valkey 9.1: 61-109 B beside 8-byte tokens, by codec and dim; BENCHMARKS.md).
PER_KEY_BYTES = 100
TOKEN_BYTES = 12  # a typical token's UTF-8 bytes (GoogleNews: ~11)


def estimate_bytes(count: int, dim: int, codec: str, *, ngram_rows: int = 0) -> int:
    """Server memory ``count`` words (and ``ngram_rows`` fastText n-gram rows) take.

    >>> estimate_bytes(3_000_000, 300, "f32") / 1e9
    3.936
    """
    value = get_codec(codec).nbytes(dim)
    return count * (value + PER_KEY_BYTES + TOKEN_BYTES) + ngram_rows * (value + PER_KEY_BYTES)


def preflight(
    store: Store,
    name: str,
    *,
    count: int | None,
    dim: int,
    codec: str,
    ngram_rows: int = 0,
    allow_eviction: bool = False,
) -> None:
    """Refuse, before writing anything, a load the server cannot hold or may evict.

    Reads ``INFO memory`` (``maxmemory``, ``used_memory``, ``maxmemory_policy``; on a
    cluster every primary, each taking its share): a policy that evicts keys without a
    TTL (``allkeys-*``) raises :class:`LoadRefused` unless ``allow_eviction`` (then a
    warning); a model whose :func:`estimate_bytes` exceed the free memory raises it too
    (with ``allow_eviction``: only what exceeds ``maxmemory`` itself). Where INFO is
    refused, or the file does not say how many vectors it holds, the check is skipped
    with a log line; the verified writes still stop a load that runs out of memory.
    """
    facts = store.memory_facts()
    if facts is None:
        log.info(
            "pre-flight check skipped: the Redis user may not run INFO (grant +info, as "
            "`vecserve acl loader` does, to learn up front whether %s fits)",
            name,
        )
        return
    evicting = sorted({f.policy for f in facts if f.evicts})
    if evicting:
        if not allow_eviction:
            raise LoadRefused(
                f"Redis at {store.url} has maxmemory-policy {', '.join(evicting)}: it may "
                f"evict parts of {name!r} at any time (vecserve's keys have no TTL); set "
                "maxmemory-policy noeviction (or a volatile-* one), or pass "
                "--allow-eviction to load anyway"
            )
        log.warning(
            "loading %s into a server whose maxmemory-policy is %s (--allow-eviction): "
            "evicted vectors are reported as ModelDamaged; `vecserve models check %s` "
            "finds them",
            name,
            ", ".join(evicting),
            name,
        )
    if count is None:
        log.info("memory check skipped: the file does not say how many vectors it holds")
        return
    need = estimate_bytes(count, dim, codec, ngram_rows=ngram_rows)
    share = -(-need // len(facts))
    for f in facts:
        room = (f.maxmemory or None) if allow_eviction and f.evicts else f.free
        if room is None or share <= room:
            continue
        smaller = ", ".join(
            f"--codec {c} (~{gb(estimate_bytes(count, dim, c, ngram_rows=ngram_rows))})"
            for c in ("f16", "i8")
            if get_codec(c).nbytes(dim) < get_codec(codec).nbytes(dim)
        )
        where = f"each of its {len(facts)} primaries" if len(facts) > 1 else "it"
        raise LoadRefused(
            f"{name!r} needs about {gb(need)} in Redis ({count:,} vectors x {dim} {codec}"
            + (f" and {ngram_rows:,} n-gram rows" if ngram_rows else "")
            + f") but Redis at {store.url} has {gb(room)} free for {where} "
            f"({f.describe()}): raise maxmemory (CONFIG SET maxmemory), free memory"
            + (f", or load with {smaller}" if smaller else "")
        )


class Progress:
    """A tqdm bar on a terminal, plain log lines every few seconds otherwise."""

    def __init__(self, *, total: int | None, desc: str, enabled: bool | None = None):
        self.total = total
        self.desc = desc
        self.done = 0
        self.base = 0  # written before this run (a resumed load): not this run's rate
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
            rate = self.rate
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
        """Vectors per second written by this run (a resumed load's earlier ones left out)."""
        return (self.done - self.base) / max(time.monotonic() - self.start, 1e-9)


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
    path: str | os.PathLike | BinaryIO,
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
    allow_eviction: bool = False,
    retries: int = 0,
) -> ModelInfo:
    """Load a vector file into Redis as model ``name``; return the committed metadata.

    Parameters
    ----------
    path : path
        word2vec ``.bin``/``.txt`` (also ``.gz``/``.bz2``), GloVe, fastText ``.vec``,
        a native fastText ``.bin`` (its n-gram bucket rows are stored too, and its
        ``min_n``/``max_n``/``bucket`` go to the model's metadata) or a gensim
        ``KeyedVectors.save()`` file. ``"-"`` (or a binary stream) reads standard
        input once, in constant memory: text and word2vec binary formats, plain, gzip or
        bz2. A stream cannot be resumed (``resume`` is refused; an interrupted stream
        load is dropped, not kept).
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
    allow_eviction : bool
        Load even into a server whose ``maxmemory-policy`` may evict keys without a TTL
        (``allkeys-*``; refused otherwise, see :func:`preflight`).
    retries : int
        When Redis goes away mid-load (a failover, a restart), resume this many times,
        after 2, 4, 8... seconds (:func:`retry_wait`); each retry is a warning log line.
        A server unreachable from the start, a refusal no wait cures (OOM, READONLY) and a
        stream (nothing to resume from) are raised at once.

    Before writing, :func:`preflight` refuses a model that cannot fit; every batch's
    replies are checked, and every row is checked present before the commit.

    Examples
    --------
    >>> from gensim.test.utils import datapath
    >>> info = load_file(datapath("euclidean_vectors.bin"), name="EUC")  # doctest: +SKIP
    """
    from .readers import is_pipe
    from .readers._static import static_layout

    validate_model_name(name)  # fail on bad arguments before touching the file or Redis
    get_codec(codec)
    stream = is_pipe(path)  # read once: "-", a stream, a named pipe
    if not stream:
        path = Path(path)
        if static_layout(path) is not None:  # a static embedding model's directory
            return load_static(
                path,
                name=name,
                redis_url=redis_url,
                store=store,
                codec=codec,
                batch_size=batch_size,
                progress=progress,
                allow_eviction=allow_eviction,
            )
    for attempt in range(retries + 1):
        try:
            return _load_file_once(
                path,
                name=name,
                redis_url=redis_url,
                store=store,
                format=format,
                codec=codec,
                limit=limit,
                unicode_errors=unicode_errors,
                encoding=encoding,
                batch_size=batch_size,
                resume=resume,
                restart=restart,
                progress=progress,
                allow_eviction=allow_eviction,
            )
        except StoreUnavailable as exc:
            wait = retry_wait(exc, attempt, 0 if stream else retries)
            if wait is None:
                raise
            why = exc.reason if isinstance(exc, LoadInterrupted) else str(exc)
            log.warning("%s; resuming in %ss (retry %d of %d)", why, wait, attempt + 1, retries)
            time.sleep(wait)
            resume, restart = True, False  # what was written is kept (and checked)
    raise AssertionError("unreachable")  # the last attempt returned or raised


def retry_wait(exc: StoreUnavailable, attempt: int, retries: int) -> int | None:
    """Seconds to wait before retry ``attempt + 1`` of a load that ``exc`` stopped, or None
    when it is not retried: no retries left, a refusal no wait cures (``exc.transient``
    False: OOM, READONLY...), or a server unreachable from the start (said at once; a
    load already writing waits a failover out).

    >>> from vecserve.errors import LoadInterrupted
    >>> stop = LoadInterrupted("reset", model="M", path="m.bin", written=10)
    >>> [retry_wait(stop, attempt, 3) for attempt in range(4)]
    [2, 4, 8, None]
    """
    if attempt >= retries or not exc.transient:
        return None
    if attempt == 0 and not isinstance(exc, LoadInterrupted):
        return None
    return 2 ** (attempt + 1)


def _load_file_once(
    path: Path | BinaryIO | str,
    *,
    name: str,
    redis_url: str | None,
    store: Store | None,
    format: str,
    codec: str,
    limit: int | None,
    unicode_errors: str,
    encoding: str,
    batch_size: int | None,
    resume: bool,
    restart: bool,
    progress: bool | None,
    allow_eviction: bool,
) -> ModelInfo:
    """One attempt of :func:`load_file` (its arguments checked, ``path`` not a directory)."""
    from .readers import is_pipe, open_vectors

    stream = is_pipe(path)
    if store is None:
        with open_store(redis_url) as st:
            return _load_file_once(
                path,
                name=name,
                redis_url=None,
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
                allow_eviction=allow_eviction,
            )
    fingerprint = _fingerprint(path) if not stream and path.is_file() else ""
    options = {"limit": limit, "unicode_errors": unicode_errors, "encoding": encoding}
    # a file is opened twice (its metadata first, then from where a load resumes); a
    # stream once, its metadata read by the same reader that then reads its records
    first = open_vectors(path, format=format, batch_size=batch_size if stream else 1, **options)
    with contextlib.ExitStack() as closing:
        closing.callback(first.close)
        if stream and resume:
            raise VectorFileError(
                first.path,
                "a stream cannot be read again, so its load cannot be resumed (--resume): "
                "load from a file to resume, or pass --restart to drop the unfinished load "
                "and read the stream afresh",
            )
        dim, fmt, declared = first.dim, first.format, first.count
        sub = first.subwords
        ngrams = sub.bucket if sub is not None and sub.max_n > 0 else 0
        if not stream:
            closing.close()
        return _load(
            store,
            name,
            path,
            first if stream else None,
            open_reader=lambda **more: open_vectors(path, format=fmt, **options, **more),
            dim=dim,
            fmt=fmt,
            declared=declared,
            sub=sub,
            ngrams=ngrams,
            fingerprint=fingerprint,
            codec=codec,
            batch_size=batch_size,
            resume=resume,
            restart=restart,
            progress=progress,
            allow_eviction=allow_eviction,
        )


def _load(
    store: Store,
    name: str,
    path,
    reader,
    *,
    open_reader,
    dim: int,
    fmt: str,
    declared: int | None,
    sub,
    ngrams: int,
    fingerprint: str,
    codec: str,
    batch_size: int | None,
    resume: bool,
    restart: bool,
    progress: bool | None,
    allow_eviction: bool,
) -> ModelInfo:
    """`load_file` once its input is open: ``reader`` for a stream (read once), else
    None and ``open_reader(batch_size=, resume=, seen_tokens=)`` opens the file."""
    from .readers import ResumePoint, batch_for

    stream = reader is not None
    label = reader.path if stream else str(path)  # the input, as messages name it
    done = store.get_load(name) if resume else None
    preflight(
        store,
        name,
        dim=dim,
        codec=codec,
        allow_eviction=allow_eviction,
        count=None if declared is None else max(0, declared - (done.written if done else 0)),
        ngram_rows=ngrams,
    )
    session = begin_load(
        store,
        name,
        dim=dim,
        codec=codec,
        source=label if stream else str(path.resolve()) if path.exists() else label,
        source_format=fmt,
        fingerprint=fingerprint,
        declared_count=declared,
        resume=resume,
        restart=restart,
    )
    if ngrams and not session.state.ngram_buckets:
        try:
            session.declare_ngrams(min_n=sub.min_n, max_n=sub.max_n, bucket=ngrams)
        except BaseException:
            _abort(session, keep=False)
            raise
    resume_at = None
    seen: Sequence[str] | Iterator[str] = ()
    skipped = 0  # duplicates the load dropped before this run
    if session.written and session.resume_point:
        point = session.resume_point
        resume_at = ResumePoint(offset=point["offset"], records=point["records"])
        skipped = int(point.get("duplicates", 0))
        seen = session.seen_tokens()
        log.info("resuming the load of %s after %s vectors", name, f"{session.written:,}")
    batch = batch_size or batch_for(dim)
    total = None if declared is None else declared + ngrams
    prog = Progress(total=total, desc=f"loading {name}", enabled=progress)
    prog.done = prog.base = session.written
    try:
        if reader is None:
            reader = open_reader(batch_size=batch, resume=resume_at, seen_tokens=seen)
        with reader:
            writer = _Writer(session, prog)
            try:
                for b in reader:
                    where = _resume_dict(b.resume, skipped + reader.duplicates)
                    writer.put(b.tokens, b.vectors, b.counts, where)
                if ngrams:  # fastText: the n-gram bucket rows, after the words
                    for first, rows in reader.subwords.batches(batch):
                        writer.put_ngrams(first, rows)
            except BaseException:
                with contextlib.suppress(BaseException):
                    writer.finish()
                raise
            writer.finish()
            if session.written == 0:
                raise VectorFileError(label, "the file holds no vectors")
            _record_word_rule(session, session.seen_tokens(), session.written_counts())
            duplicates = skipped + reader.duplicates
            info = session.commit(
                sha256=reader.sha256(),
                duplicates=duplicates,
                # the file's own count of words: what the commit must prove it wrote
                words=None if reader.count is None else reader.count - duplicates,
                progress=_checking(name),
            )
    except VectorFileError:
        _abort(session, keep=False)  # a bad file cannot be resumed: leave nothing behind
        raise
    except StoreUnavailable as exc:
        # a stream has nothing to resume from: drop what was written, if Redis lets us
        _abort(session, keep=not stream)
        stopped = LoadInterrupted(
            str(exc), model=name, path=label, written=session.written, resumable=not stream
        )
        stopped.transient = exc.transient  # OOM, READONLY...: a retry would not help
        raise stopped from exc
    except BaseException:
        _abort(session, keep=not stream)
        raise
    finally:
        prog.close()
    took = time.monotonic() - prog.start
    log.info(
        "loaded %s: %s vectors x %d (%s) in %.1fs, %s vec/s%s",
        name,
        f"{info.count:,}",
        info.dim,
        info.codec,
        took,
        f"{prog.rate:,.0f}",
        f" (resumed after {prog.base:,} vectors)" if prog.base else "",
    )
    return info


def _record_word_rule(session: LoadSession, tokens, counts=None) -> None:
    """Record the word rule that fits the vocabulary (:func:`vecserve.text.tokenize.fit_words`):
    case, phrases and, with counts, word frequencies (the blob); ``embed`` cuts text with it."""
    from .text.tokenize import fit_words

    spec, blob = fit_words(tokens, counts=counts)
    session.set_text(spec.to_json(), blob)


def load_static(
    path: str | os.PathLike,
    *,
    name: str,
    redis_url: str | None = None,
    store: Store | None = None,
    codec: str = "f32",
    batch_size: int | None = None,
    progress: bool | None = None,
    allow_eviction: bool = False,
) -> ModelInfo:
    """Load a static embedding model directory (Model2Vec, a sentence-transformers
    ``StaticEmbedding``, WordLlama: :mod:`vecserve.readers._static`) as model ``name``:
    its token rows keyed by token string, its tokenizer and text rule with them in Redis.

    >>> info = load_static("potion-base-8M", name="POTION")   # doctest: +SKIP
    """
    from .readers._static import read_static

    model = read_static(path)
    return load_arrays(
        model.tokens,
        model.vectors,
        name=name,
        redis_url=redis_url,
        store=store,
        codec=codec,
        source=str(Path(path).resolve()),
        source_format=model.source_format,
        text=(model.spec.to_json(), model.tokenizer),
        batch_size=batch_size,
        progress=progress,
        allow_eviction=allow_eviction,
    )


def _checking(name: str):
    """``progress(done, total)`` of the completeness check: a log line every 5 s."""
    start = last = time.monotonic()

    def report(done: int, total: int) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= 5:
            last = now
            log.info(
                "checking %s: %s/%s rows present (%.0fs)",
                name,
                f"{done:,}",
                f"{total:,}",
                now - start,
            )

    return report


def _resume_dict(point, duplicates: int) -> dict:
    """Where to resume after a batch, and how many duplicates the load dropped until then."""
    if not point:
        return {}
    return {"offset": int(point.offset), "records": int(point.records), "duplicates": duplicates}


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
    allow_eviction: bool = False,
    source_format: str = "arrays",
    text: tuple[str, bytes] | None = None,
    subwords: tuple[int, int, np.ndarray] | None = None,
) -> ModelInfo:
    """Commit in-memory vectors (e.g. a freshly trained model) as model ``name``.

    The same checks as :func:`load_file`: :func:`preflight`, verified writes, every row
    checked present before the commit. ``subwords=(min_n, max_n, rows)`` makes it a
    fastText model, as a native fastText ``.bin`` loads: ``vectors`` are then the words'
    composed vectors and ``rows`` the n-gram bucket rows, stored after the words.

    >>> import numpy as np
    >>> info = load_arrays(["a", "b"], np.eye(2, dtype=np.float32), name="TINY")  # doctest: +SKIP
    """
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(tokens):
        raise InvalidSetting(
            f"vectors must be (len(tokens), dim) = ({len(tokens)}, dim), got {vectors.shape}"
        )
    if len(set(tokens)) != len(tokens):
        raise InvalidSetting("tokens must be unique")
    if counts is not None and len(counts) != len(tokens):
        raise InvalidSetting(f"counts has {len(counts)} entries for {len(tokens)} tokens")
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
                allow_eviction=allow_eviction,
                source_format=source_format,
                text=text,
                subwords=subwords,
            )
    dim = vectors.shape[1]
    ngram_rows = None if subwords is None else np.asarray(subwords[2], dtype=np.float32)
    if ngram_rows is not None and (ngram_rows.ndim != 2 or ngram_rows.shape[1] != dim):
        raise InvalidSetting(f"n-gram rows must be (bucket, {dim}), got {ngram_rows.shape}")
    n_ngrams = 0 if ngram_rows is None else len(ngram_rows)
    preflight(
        store,
        name,
        count=len(tokens),
        dim=dim,
        codec=codec,
        allow_eviction=allow_eviction,
        ngram_rows=n_ngrams,
    )
    session = begin_load(
        store,
        name,
        dim=dim,
        codec=codec,
        source=source,
        source_format=source_format,
        declared_count=len(tokens),
        restart=True,
    )
    batch = batch_size or max(64, DEFAULT_BATCH_BYTES // (4 * max(dim, 1)))
    prog = Progress(total=len(tokens) + n_ngrams, desc=f"writing {name}", enabled=progress)
    try:
        if subwords is not None:
            session.declare_ngrams(min_n=subwords[0], max_n=subwords[1], bucket=n_ngrams)
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
            for lo in range(0, n_ngrams, batch):  # fastText: the n-gram rows, after the words
                writer.put_ngrams(lo, ngram_rows[lo : lo + batch])  # type: ignore[index]
        finally:
            writer.finish()
        if text is None:
            _record_word_rule(session, tokens, counts)
        else:
            session.set_text(*text)
        return session.commit(words=len(tokens))
    except BaseException:
        _abort(session, keep=False)
        raise
    finally:
        prog.close()
