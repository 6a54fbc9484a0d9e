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
    StoreUnavailable,
    VectorFileError,
)
from .loadbody import ArrayInput, FileInput, write_load
from .loadplan import estimate_bytes, preflight
from .store import ModelInfo, Store, validate_model_name

__all__ = ["estimate_bytes", "load_arrays", "load_file", "preflight", "retry_wait"]

log = logging.getLogger(__name__)


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
        info, prog = write_load(
            store, name, FileInput(reader, path, stream=stream), **write, **begin
        )
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
    arrays = ArrayInput(
        tokens,
        vectors,
        counts,
        source=source,
        source_format=source_format,
        text=text,
        subwords=None if subwords is None else (subwords[0], subwords[1], ngram_rows),
    )
    with _connected(store, redis_url) as st:
        info, _ = write_load(
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
