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
    read = {
        "format": format,
        "limit": limit,
        "unicode_errors": unicode_errors,
        "encoding": encoding,
    }
    write = {
        "codec": codec,
        "batch_size": batch_size,
        "progress": progress,
        "allow_eviction": allow_eviction,
    }
    stream = is_pipe(path)  # read once: "-", a stream, a named pipe
    if not stream:
        path = Path(path)
        if static_layout(path) is not None:  # a static embedding model's directory
            _refuse_for_static(path, read, resume=resume)
            return load_static(path, name=name, redis_url=redis_url, store=store, **write)
    for attempt in range(retries + 1):
        try:
            with _connected(store, redis_url) as st:
                return _load_file_once(path, name, st, read, write, resume=resume, restart=restart)
        except StoreUnavailable as exc:
            wait = retry_wait(exc, attempt, 0 if stream else retries)
            if wait is None:
                raise
            why = exc.reason if isinstance(exc, LoadInterrupted) else str(exc)
            log.warning("%s; resuming in %ss (retry %d of %d)", why, wait, attempt + 1, retries)
            time.sleep(wait)
            resume, restart = True, False  # what was written is kept (and checked)
    raise AssertionError("unreachable")  # the last attempt returned or raised


def _refuse_for_static(path: Path, read: dict, *, resume: bool) -> None:
    """Refuse, in one line each, the options of a vector file that a static embedding
    model's directory cannot honour (it is read whole, in its own layout)."""
    given = {
        "--format": read["format"] != "auto",
        "--limit": bool(read["limit"]),
        "--encoding": read["encoding"] != "utf-8",
        "--unicode-errors": read["unicode_errors"] != "strict",
        "--resume": resume,
    }
    why = {
        "--format": "it has its own layout",
        "--limit": "its rows are its tokenizer's ids, every one of them needed",
        "--encoding": "its tokens are in its tokenizer's JSON",
        "--unicode-errors": "its tokens are in its tokenizer's JSON",
        "--resume": "it is written whole, in one go: run the load again without it",
    }
    for flag, on in given.items():
        if on:
            raise InvalidSetting(
                f"{path}: {flag} does not apply to a static embedding model's directory "
                f"({why[flag]})"
            )


@contextlib.contextmanager
def _connected(store: Store | None, redis_url: str | None) -> Iterator[Store]:
    """``store``, or one opened on ``redis_url`` for the duration (closed after)."""
    if store is not None:
        yield store
        return
    with open_store(redis_url) as opened:
        yield opened


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
    path: Path | BinaryIO | str, name: str, store: Store, read: dict, write: dict, **begin
) -> ModelInfo:
    """One attempt of :func:`load_file`: the file opened once (its header read), then
    written from where an interrupted load of it stopped (``begin``: resume, restart)."""
    from .readers import is_pipe, open_vectors

    stream = is_pipe(path)
    with open_vectors(path, batch_size=write["batch_size"], **read) as reader:
        if stream and begin["resume"]:
            raise VectorFileError(
                reader.path,
                "a stream cannot be read again, so its load cannot be resumed (--resume): "
                "load from a file to resume, or pass --restart to drop the unfinished load "
                "and read the stream afresh",
            )
        info, prog = _write(store, name, _FileInput(reader, path, stream=stream), **write, **begin)
    log.info(
        "loaded %s: %s vectors x %d (%s) in %.1fs, %s vec/s%s",
        name,
        f"{info.count:,}",
        info.dim,
        info.codec,
        time.monotonic() - prog.start,
        f"{prog.rate:,.0f}",
        f" (resumed after {prog.base:,} vectors)" if prog.base else "",
    )
    return info


class _FileInput:
    """An open vector file as :func:`_write` takes it: what the load records, its batches
    from a resume point on, its commit (the file's checksum and count) and what an
    interruption becomes (resumable unless the file is a stream)."""

    desc = "loading"

    def __init__(self, reader, path, *, stream: bool):
        self.reader = reader
        self.label = reader.path if stream else str(path)  # the input, as messages name it
        kept = not stream and path.exists()
        self.source = str(path.resolve()) if kept else self.label
        self.format, self.dim, self.declared = reader.format, reader.dim, reader.count
        self.fingerprint = _fingerprint(path) if not stream and path.is_file() else ""
        sub = reader.subwords
        self.subwords = (sub.min_n, sub.max_n, sub.bucket) if sub and sub.max_n > 0 else None
        self.resumable = not stream
        self._skipped = 0  # duplicates the load dropped before this run

    def start(self, point: dict, seen) -> None:
        from .readers import ResumePoint

        if point:
            self._skipped = int(point.get("duplicates", 0))
            point = ResumePoint(offset=point["offset"], records=point["records"])
        self.reader.resume_from(point or None, seen)

    def batches(self, batch: int):
        for b in self.reader:
            yield b.tokens, b.vectors, b.counts, _resume_dict(b.resume, self.duplicates)

    def ngram_batches(self, batch: int):
        return self.reader.subwords.batches(batch) if self.subwords else ()

    @property
    def duplicates(self) -> int:
        return self._skipped + self.reader.duplicates

    def commit(self, session: LoadSession, name: str) -> ModelInfo:
        if session.written == 0:
            raise VectorFileError(self.label, "the file holds no vectors")
        _record_word_rule(session, session.seen_tokens(), session.written_counts())
        count = self.reader.count
        return session.commit(
            sha256=self.reader.sha256(),
            duplicates=self.duplicates,
            # the file's own count of words: what the commit must prove it wrote
            words=None if count is None else count - self.duplicates,
            progress=_checking(name),
        )

    def interrupted(self, exc: StoreUnavailable, name: str, written: int) -> StoreUnavailable:
        stopped = LoadInterrupted(
            str(exc), model=name, path=self.label, written=written, resumable=self.resumable
        )
        stopped.transient = exc.transient  # OOM, READONLY...: a retry would not help
        return stopped


class _ArrayInput:
    """In-memory tokens and vectors (and fastText n-gram rows) as :func:`_write` takes
    them: written from the start, never resumed."""

    desc = "writing"
    fingerprint = ""
    resumable = False

    def __init__(self, tokens, vectors, counts, *, source, source_format, text, subwords):
        self.tokens, self.vectors, self.counts, self.text = tokens, vectors, counts, text
        self.label = self.source = source
        self.format, self.dim, self.declared = source_format, vectors.shape[1], len(tokens)
        self.rows = None if subwords is None else subwords[2]
        self.subwords = None if subwords is None else (subwords[0], subwords[1], len(self.rows))

    def start(self, point: dict, seen) -> None:
        pass  # begun afresh (restart) every time

    def batches(self, batch: int):
        counts = self.counts
        for lo in range(0, len(self.tokens), batch):
            part = None if counts is None else np.asarray(counts[lo : lo + batch], dtype=np.int64)
            yield list(self.tokens[lo : lo + batch]), self.vectors[lo : lo + batch], part, {}

    def ngram_batches(self, batch: int):
        n = 0 if self.rows is None else len(self.rows)
        return ((lo, self.rows[lo : lo + batch]) for lo in range(0, n, batch))

    def commit(self, session: LoadSession, name: str) -> ModelInfo:
        if self.text is None:
            _record_word_rule(session, self.tokens, self.counts)
        else:
            session.set_text(*self.text)
        return session.commit(words=len(self.tokens))

    def interrupted(self, exc: StoreUnavailable, name: str, written: int) -> StoreUnavailable:
        return exc


def _write(
    store: Store,
    name: str,
    src: _FileInput | _ArrayInput,
    *,
    codec: str,
    batch_size: int | None,
    progress: bool | None,
    allow_eviction: bool,
    resume: bool = False,
    restart: bool = False,
) -> tuple[ModelInfo, Progress]:
    """The one load body, for files and arrays: :func:`preflight`, the session, the rows
    (the words, then any n-gram rows) through the writer thread, the commit; on a failure
    what was written is kept to resume from (``src.resumable``) or dropped."""
    from .readers import batch_for

    ngrams = src.subwords[2] if src.subwords else 0
    done = store.get_load(name) if resume else None
    left = None if src.declared is None else max(0, src.declared - (done.written if done else 0))
    preflight(
        store,
        name,
        dim=src.dim,
        codec=codec,
        allow_eviction=allow_eviction,
        count=left,
        ngram_rows=ngrams,
    )
    session = begin_load(
        store,
        name,
        dim=src.dim,
        codec=codec,
        source=src.source,
        source_format=src.format,
        fingerprint=src.fingerprint,
        declared_count=src.declared,
        resume=resume,
        restart=restart,
    )
    if ngrams and not session.state.ngram_buckets:
        try:
            session.declare_ngrams(min_n=src.subwords[0], max_n=src.subwords[1], bucket=ngrams)
        except BaseException:
            _abort(session, keep=False)
            raise
    total = None if src.declared is None else src.declared + ngrams
    prog = Progress(total=total, desc=f"{src.desc} {name}", enabled=progress)
    prog.done = prog.base = session.written
    try:
        _start(session, src, name)
        _send(session, src, prog, batch_size or batch_for(src.dim))
        info = src.commit(session, name)
    except VectorFileError:
        _abort(session, keep=False)  # a bad file cannot be resumed: leave nothing behind
        raise
    except StoreUnavailable as exc:
        _abort(session, keep=src.resumable)  # a stream, arrays: nothing to resume from
        stopped = src.interrupted(exc, name, session.written)
        if stopped is exc:
            raise
        raise stopped from exc
    except BaseException:
        _abort(session, keep=src.resumable)
        raise
    finally:
        prog.close()
    return info, prog


def _start(session: LoadSession, src, name: str) -> None:
    """Point ``src`` where the session's written part ends (the start, unless resumed)."""
    point, seen = {}, ()
    if session.written and session.resume_point:
        point, seen = session.resume_point, session.seen_tokens()
        log.info("resuming the load of %s after %s vectors", name, f"{session.written:,}")
    src.start(point, seen)


def _send(session: LoadSession, src, prog: Progress, batch: int) -> None:
    """Every batch of ``src`` through one writer thread, words first, then n-gram rows."""
    writer = _Writer(session, prog)
    try:
        for tokens, vectors, counts, where in src.batches(batch):
            writer.put(tokens, vectors, counts, where)
        for first, rows in src.ngram_batches(batch):  # fastText: the n-gram rows, after the words
            writer.put_ngrams(first, rows)
    except BaseException:
        with contextlib.suppress(BaseException):
            writer.finish()
        raise
    writer.finish()


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
    ngram_rows = None if subwords is None else np.asarray(subwords[2], dtype=np.float32)
    dim = vectors.shape[1]
    if ngram_rows is not None and (ngram_rows.ndim != 2 or ngram_rows.shape[1] != dim):
        raise InvalidSetting(f"n-gram rows must be (bucket, {dim}), got {ngram_rows.shape}")
    arrays = _ArrayInput(
        tokens,
        vectors,
        counts,
        source=source,
        source_format=source_format,
        text=text,
        subwords=None if subwords is None else (subwords[0], subwords[1], ngram_rows),
    )
    with _connected(store, redis_url) as st:
        info, _ = _write(
            st,
            name,
            arrays,
            codec=codec,
            batch_size=batch_size,
            progress=progress,
            allow_eviction=allow_eviction,
            restart=True,
        )
    return info
