"""The on-disk file as a decompressed byte stream, hashed and counted as it is read.

gzip and bz2 are recognised by their magic bytes (a ``.gz``/``.bz2`` name without them
is an error). Once `Source.start_readahead` is called, a thread reads, hashes (sha256)
and decompresses the next chunks while the caller parses; ``hashlib``, ``zlib``, ``bz2``
and file reads release the GIL, so this takes the checksum (~1 GB/s, as much time as
parsing) off the parsing thread. At most ``_AHEAD`` chunks wait in its queue.

This module is the one boundary where ``OSError`` and decompressor errors become
`vecserve.errors` classes; an error in the thread surfaces at the ``read`` that reaches it.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import os
import queue
import threading
import weakref
import zlib
from collections.abc import Callable, Iterable
from typing import BinaryIO

from ..errors import CorruptVectorFile, VectorFileError

__all__ = ["CHUNK", "SNIFF", "STDIN", "Source"]

CHUNK = 4 << 20  # decompressed bytes read (and parsed) at a time
SNIFF = 1 << 20  # at most this much is looked at to recognise a format
_AHEAD = 2  # chunks the read-ahead thread may have waiting


class _HashingFile:
    """The on-disk file: every byte read through it is hashed and counted, under a lock."""

    def __init__(self, f: BinaryIO):
        self._f = f
        self.lock = threading.Lock()
        self.sha = hashlib.sha256()
        self.bytes_read = 0

    def read(self, n: int = -1) -> bytes:
        with self.lock:
            data = self._f.read(n)
            self.sha.update(data)
            self.bytes_read += len(data)
        return data


def _compression_of(magic: bytes) -> str | None:
    if magic[:2] == b"\x1f\x8b":
        return "gzip"
    if magic[:3] == b"BZh" and magic[3:4].isdigit() and magic[4:10] in (b"1AY&SY", b"\x17rE8P\x90"):
        return "bz2"
    return None


def _stream_reader(
    stream: BinaryIO | _HashingFile, compression: str | None, path: str
) -> Callable[[int], bytes]:
    """``read(n)`` on the decompressed stream, with errors translated to ours.

    Bytes decompressed before an error are returned first; the error comes with the
    next call (``GzipFile.read`` would drop them: it reads through a ``BufferedReader``).
    """
    read1 = getattr(stream, "read1", stream.read)
    produced = 0
    pending: VectorFileError | None = None

    def read(n: int) -> bytes:
        nonlocal produced, pending
        if pending is not None:
            raise pending
        parts: list[bytes] = []
        got = 0
        try:
            while got < n and (data := read1(n - got)):
                parts.append(data)
                got += len(data)
        except (OSError, EOFError, zlib.error) as exc:
            if compression:
                error: VectorFileError = CorruptVectorFile(
                    path, f"corrupt {compression} data: {exc}", offset=produced + got
                )
            else:
                error = VectorFileError(path, f"read failed: {exc}")
            error.__cause__ = exc
            if not parts:
                raise error from exc
            pending = error
        produced += got
        return parts[0] if len(parts) == 1 else b"".join(parts)

    return read


def _readahead(
    read: Callable[[int], bytes],
    size: int,
    q: queue.Queue[bytes | BaseException],
    stop: threading.Event,
) -> None:
    """The read-ahead thread: chunks into ``q`` until the end, an error, or ``stop``."""
    item: bytes | BaseException = b"?"
    while item and not isinstance(item, BaseException) and not stop.is_set():
        try:
            item = read(size)
        except BaseException as exc:  # handed over to the reading thread, raised there
            item = exc
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                break
            except queue.Full:
                continue


class _Prefixed:
    """A stream whose first bytes were read already (to recognise its compression)."""

    def __init__(self, head: bytes, stream: BinaryIO):
        self._head = head
        self._stream = stream

    def read(self, n: int = -1) -> bytes:
        if not self._head:
            return self._stream.read(n)
        if n < 0:
            data, self._head = self._head + self._stream.read(), b""
        else:
            data, self._head = self._head[:n], self._head[n:]
        return data


#: The name standard input goes by in messages and as a model's source.
STDIN = "<stdin>"


def _open(path: str) -> tuple[BinaryIO, int, bytes]:
    """The open file, its size and its first 10 bytes; errors translated to ours."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 - closed by Source.close()
    except FileNotFoundError as exc:
        raise VectorFileError(path, "no such file") from exc
    except IsADirectoryError as exc:
        raise VectorFileError(
            path,
            "is a directory, not a vector file nor a static model's (Model2Vec, "
            "StaticEmbedding or WordLlama: a config and safetensors beside tokenizer.json)",
        ) from exc
    except OSError as exc:
        raise VectorFileError(path, f"cannot open: {exc.strerror or exc}") from exc
    try:
        return raw, os.fstat(raw.fileno()).st_size, os.pread(raw.fileno(), 10, 0)
    except OSError as exc:
        raw.close()
        raise VectorFileError(path, f"cannot read: {exc.strerror or exc}") from exc


class Source:
    """A vector file as a decompressed byte stream with a position and a push-back buffer.

    ``stream``: read this binary stream (standard input) instead of opening ``path``,
    which then only names it (``owned``: close it too). A stream is read once, front to
    back: ``size_bytes`` is None, and `sha256` covers the bytes read (the whole stream
    unless a limit stopped the reading early: a stream is not drained only to be hashed).
    """

    def __init__(self, path: str, stream: BinaryIO | None = None, *, owned: bool = False):
        self.path = path
        self.is_stream = stream is not None
        self._owned = owned  # a stream opened for us (a named pipe): ours to close
        self.size_bytes: int | None = None
        if stream is None:
            self._raw, self.size_bytes, magic = _open(path)
            suffix = os.path.splitext(path)[1].lower()
            expected = {".gz": "gzip", ".bz2": "bz2"}.get(suffix)
            if expected and _compression_of(magic) != expected:
                self._raw.close()
                raise CorruptVectorFile(
                    path, f"named {suffix} but is not {expected} data", offset=0
                )
            self._file = _HashingFile(self._raw)
        else:
            self._raw = stream
            try:
                magic = stream.read(10)
                while 0 < len(magic) < 10 and (more := stream.read(10 - len(magic))):
                    magic += more
            except OSError as exc:
                raise VectorFileError(path, f"cannot read: {exc.strerror or exc}") from exc
            self._file = _HashingFile(_Prefixed(magic, stream))  # type: ignore[arg-type]
        self.compression = _compression_of(magic)
        self._stream: BinaryIO | _HashingFile
        if self.compression == "gzip":
            self._stream = gzip.GzipFile(fileobj=self._file, mode="rb")  # type: ignore[arg-type]
        elif self.compression == "bz2":
            self._stream = bz2.BZ2File(self._file, mode="rb")  # type: ignore[arg-type]
        else:
            self._stream = self._file
        self.offset = 0  # decompressed bytes handed out so far
        self.chunk_size = CHUNK  # (tests shrink CHUNK to exercise chunk boundaries)
        self._pushback = b""
        self._error: VectorFileError | None = None
        self._read_stream = _stream_reader(self._stream, self.compression, path)
        self._queue: queue.Queue[bytes | BaseException] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        weakref.finalize(self, self._stop.set)  # a forgotten reader stops its thread

    @property
    def bytes_read(self) -> int:
        """On-disk bytes consumed so far (the read-ahead thread runs a little ahead)."""
        return self._file.bytes_read

    def start_readahead(self) -> None:
        """From now on a thread reads (and hashes, and decompresses) the next chunks."""
        if self._thread is None and self._error is None:
            self._queue = queue.Queue(maxsize=_AHEAD)
            self._thread = threading.Thread(
                target=_readahead,
                args=(self._read_stream, self.chunk_size, self._queue, self._stop),
                name=f"vecserve-read:{os.path.basename(self.path)}",
                daemon=True,
            )
            self._thread.start()

    def read(self, n: int) -> bytes:
        """Up to ``n`` decompressed bytes; ``b""`` only at the end of the file."""
        if self._pushback:
            data, self._pushback = self._pushback[:n], self._pushback[n:]
        elif self._error is not None:  # met by peek: raised once the bytes before it are read
            raise self._error
        elif self._queue is not None:
            item = self._queue.get()
            if isinstance(item, BaseException):
                self._queue.put(item)  # every later read fails the same way
                raise item
            if not item:
                self._queue.put(item)
            data, self._pushback = item[:n], item[n:]
        else:
            data = self._read_stream(n)
        self.offset += len(data)
        return data

    def peek(self, lines: int) -> bytes:
        """The next bytes up to ``lines`` newlines (or ``SNIFF`` bytes), left unread."""
        data = b""
        try:
            while data.count(b"\n") < lines and len(data) < SNIFF:
                more = self.read(1 << 16)
                if not more:
                    break
                data += more
        except VectorFileError as exc:
            self._error = exc
        self._pushback = data + self._pushback
        self.offset -= len(data)
        return data

    def skip(self, n: int) -> bool:
        """Read and drop ``n`` bytes (they are still hashed); False if the file ends first."""
        while n > 0:
            data = self.read(min(n, self.chunk_size))
            if not data:
                return False
            n -= len(data)
        return True

    def sha256(self, extra_files: Iterable[str] = ()) -> str:
        """Hex sha256 of the whole on-disk file, then of ``extra_files``.

        The bytes not read yet are read from the disk without disturbing the stream
        (after `close`, from the path again).
        """
        with self._file.lock:
            h, pos = self._file.sha.copy(), self._file.bytes_read
        if self.is_stream:
            pass  # read once: what was read is what there is to hash
        elif self._raw.closed:
            with open(self.path, "rb") as f:
                f.seek(pos)
                while data := f.read(1 << 20):
                    h.update(data)
        else:
            while data := os.pread(self._raw.fileno(), 1 << 20, pos):
                h.update(data)
                pos += len(data)
        for name in extra_files:
            with open(name, "rb") as f:
                while data := f.read(1 << 20):
                    h.update(data)
        return h.hexdigest()

    def close(self) -> None:
        """Stop the read-ahead thread and close the file."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._stream is not self._file:
            self._stream.close()  # type: ignore[union-attr]
        if not self.is_stream or self._owned:  # a stream given is the caller's to close
            self._raw.close()
