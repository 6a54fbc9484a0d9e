"""One load's body, for a file and for arrays alike: :func:`write_load` takes an input
(:class:`FileInput`: an open vector file; :class:`ArrayInput`: tokens and a matrix)
through the pre-flight, the session, the writer thread (:class:`_Writer`: encode and send
each batch in one pipelined round trip, at most ``QUEUE_DEPTH`` in flight) and the
commit, with :class:`Progress` on the way. :mod:`vecserve.loader` is the public face."""

from __future__ import annotations

import contextlib
import logging
import queue
import sys
import threading
import time
from pathlib import Path

import numpy as np

from .errors import (
    LoadInterrupted,
    StoreUnavailable,
    VecserveError,
    VectorFileError,
)
from .loadplan import preflight
from .store import LoadSession, ModelInfo, Store, begin_load

__all__ = ["QUEUE_DEPTH", "ArrayInput", "FileInput", "Progress", "abort_load", "write_load"]

# the loader's one logger: its modules speak as "vecserve.loader"
log = logging.getLogger("vecserve.loader")

QUEUE_DEPTH = 4


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


class FileInput:
    """An open vector file as :func:`write_load` takes it: what the load records, its batches
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
        for b in self.reader:  # the tokens' bytes: a UTF-8 binary file's go to Redis undecoded
            yield b.raw, b.vectors, b.counts, _resume_dict(b.resume, self.duplicates)

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


class ArrayInput:
    """In-memory tokens and vectors (and fastText n-gram rows) as :func:`write_load` takes
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


def write_load(
    store: Store,
    name: str,
    src: FileInput | ArrayInput,
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
            abort_load(session, keep=False)
            raise
    total = None if src.declared is None else src.declared + ngrams
    prog = Progress(total=total, desc=f"{src.desc} {name}", enabled=progress)
    prog.done = prog.base = session.written
    try:
        _start(session, src, name)
        _send(session, src, prog, batch_size or batch_for(src.dim))
        info = src.commit(session, name)
    except VectorFileError:
        abort_load(session, keep=False)  # a bad file cannot be resumed: leave nothing behind
        raise
    except StoreUnavailable as exc:
        abort_load(session, keep=src.resumable)  # a stream, arrays: nothing to resume from
        stopped = src.interrupted(exc, name, session.written)
        if stopped is exc:
            raise
        raise stopped from exc
    except BaseException:
        abort_load(session, keep=src.resumable)
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


def abort_load(session: LoadSession, *, keep: bool) -> None:
    try:
        session.abort(keep=keep)
    except (VecserveError, OSError) as exc:  # Redis gone: the state stays as it was
        log.debug("could not clean up the load of %s: %s", session.state.name, exc)
