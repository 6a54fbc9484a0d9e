"""Steps driven on redis-py (:mod:`.wire`'s rounds sent by a sync client).

On a single server a round goes out as one hand-written RESP request
(:func:`~.resp.pack`) on the calling thread's own connection (:class:`Connections`), its
replies read with a hiredis reader of our own (:func:`~.resp.reply_reader`): none of
redis-py's pipeline or pool machinery, which costs more than the server's work for a
one-word read. :class:`CheckedGet` is the hot path of ``kv[word]``: one word's GET and
its proof in one ``sendall``. On a cluster a round is a pipeline (redis-py routes each
command to its slot's node). :func:`run` / :func:`executor` drive steps and turn
redis-py's errors into ours (:func:`~.boundary.translated`).

The asyncio twin is :mod:`.asyncwire`.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import redis
from redis.cluster import RedisCluster

from .boundary import translated
from .keys import vector_key
from .resp import GET_HEADS, get_head, pack, reply_reader
from .resp import NEED as _NEED
from .wire import Round, Steps, checked, drive

__all__ = ["CheckedGet", "Connections", "executor", "run"]

T = TypeVar("T")


class _Raw:
    """One connection as a socket and a RESP reader of our own: redis-py connects it (TLS,
    AUTH, SELECT, HELLO), then every request is one ``sendall`` and its replies are read
    with ``recv_into`` into one buffer: the whole client-side cost of a round trip."""

    __slots__ = ("__weakref__", "buf", "conn", "reader", "sock")

    def __init__(self, conn):
        conn.connect()
        self.conn = conn
        self.sock = conn._sock
        self.reader = reply_reader()
        self.buf = bytearray(_READ_SIZE)

    def request(self, data: bytes, n: int) -> list:
        """The ``n`` replies of request ``data`` (error replies as exception objects).
        On any failure the connection is closed: a reply may be left half read."""
        reader, out = self.reader, []
        try:
            self.sock.sendall(data)
            while len(out) < n:
                reply = reader.gets()
                if reply is _NEED:
                    self.fill()
                else:
                    out.append(reply)
        except TimeoutError as exc:
            self.close()
            raise redis.TimeoutError(f"Timeout reading from socket: {exc}") from exc
        except OSError as exc:
            self.close()
            raise redis.ConnectionError(f"Error while talking to the server: {exc}") from exc
        except BaseException:
            self.close()
            raise
        return out

    def fill(self) -> None:
        """Read what the socket has (waiting for it) into the reply reader."""
        got = self.sock.recv_into(self.buf)
        if not got:
            raise redis.ConnectionError("Connection closed by server.")
        self.reader.feed(self.buf, 0, got)

    def close(self) -> None:
        self.sock = None
        self.conn.disconnect()


_READ_SIZE = 1 << 18


class CheckedGet:
    """A GET that counts only when the reply of a command sent after it in the same
    request is ``expect``: one word's read and its proof, packed by hand and sent with one
    ``sendall`` on the calling thread's raw connection, in one Python frame (the hot path
    of ``kv[word]``). The server runs a client's pipelined commands in order, so a reply
    equal to ``expect``, read after the value, proves that what ``expect`` stands for
    held when the value was read (:meth:`Store.single_get` makes one per generation:
    ``tail`` is the HGET of the model's registry entry, ``expect`` the entry's bytes).

    :meth:`get` answers the value as a read-only row (``dtype``, or ``decode(value)``),
    or None when the check failed, the key is missing or its value is not ``nbytes``
    long: the caller's general read then says which. redis-py's and the socket's errors
    are raised untranslated, the connection closed (a reply may be left half read)."""

    __slots__ = (
        "connections",
        "decode",
        "dtype",
        "expect",
        "key_prefix",
        "local",
        "nbytes",
        "tail",
    )

    def __init__(
        self,
        connections: Connections,
        key_prefix: bytes,
        tail: bytes,
        expect: bytes,
        *,
        nbytes: int,
        dtype: np.dtype,
        decode: Callable[[bytes], np.ndarray] | None = None,
    ):
        self.connections = connections
        self.local = connections._local
        self.key_prefix = key_prefix
        self.tail = tail
        self.expect = expect
        self.nbytes = nbytes
        self.dtype = dtype
        self.decode = decode

    def get(self, token: str) -> np.ndarray | None:
        raw = getattr(self.local, "raw", None)
        if raw is None or raw.sock is None:
            raw = self.connections._connection()
        key = vector_key(self.key_prefix, token)
        n = len(key)
        head = GET_HEADS[n] if n < 256 else get_head(n)
        reader = raw.reader
        try:
            raw.sock.sendall(b"".join((head, key, b"\r\n", self.tail)))
            raw.fill()  # nothing is left buffered between requests
            value = reader.gets()
            while value is _NEED:
                raw.fill()
                value = reader.gets()
            proof = reader.gets()
            while proof is _NEED:
                raw.fill()
                proof = reader.gets()
        except BaseException:
            raw.close()
            raise
        if proof != self.expect or type(value) is not bytes or len(value) != self.nbytes:
            return None
        if self.decode is not None:
            return self.decode(value)
        return np.frombuffer(value, self.dtype)  # read-only: a view of the reply


class Connections:
    """A sync client's raw connections, one per thread (no pool lock, no pool checks)."""

    def __init__(self, client: redis.Redis):
        self.client = client
        self._local = threading.local()
        self._all: weakref.WeakSet = weakref.WeakSet()  # a dead thread's goes with it
        self._lock = threading.Lock()

    def _connection(self) -> _Raw:
        raw = getattr(self._local, "raw", None)
        if raw is None or raw.sock is None:
            pool = self.client.connection_pool
            raw = _Raw(pool.connection_class(**pool.connection_kwargs))
            self._local.raw = raw
            with self._lock:
                self._all.add(raw)
        return raw

    def request(self, data: bytes, n: int) -> list:
        """The ``n`` replies of the packed request ``data`` on this thread's connection,
        error replies as exception objects; redis-py's errors raised, untranslated, no
        retry: the hot path of a single word, which falls back to :meth:`execute`."""
        raw = getattr(self._local, "raw", None)
        if raw is None or raw.sock is None:
            raw = self._connection()
        return raw.request(data, n)

    def execute(self, rnd: Round) -> list:
        request = pack(rnd.commands)
        for attempt in (0, 1):
            try:
                replies = self._connection().request(request, len(rnd.commands))
                break
            except (redis.ConnectionError, redis.TimeoutError):
                if attempt:  # a server restarted since: reads retry once, anew
                    raise
        return checked(replies, rnd)

    def close(self) -> None:
        with self._lock:
            conns, self._all = list(self._all), weakref.WeakSet()
        for raw in conns:
            if raw.sock is not None:
                raw.close()


def _execute_pipeline(client, rnd: Round) -> list:
    pipe = client.pipeline(transaction=False)  # a cluster's rounds hold no packed commands
    for cmd in rnd.commands:
        pipe.execute_command(*cmd)
    return checked(pipe.execute(raise_on_error=False), rnd)


def executor(
    client: redis.Redis | RedisCluster, url: str, connections: Connections | None = None
) -> Callable[[Round], list]:
    """The function that sends a round on a sync client and returns its replies,
    redis-py's errors turned into ours (``url`` named). ``connections`` (single server):
    each round on the calling thread's own raw connection; without: a pipeline."""

    def execute(rnd: Round) -> list:
        try:
            if connections is not None:
                return connections.execute(rnd)
            return _execute_pipeline(client, rnd)
        except (redis.RedisError, OSError) as exc:
            ours = translated(exc, url, rnd.what)
            if ours is None:
                raise
            raise ours from exc

    return execute


def run(
    steps: Steps[T],
    client: redis.Redis | RedisCluster,
    url: str,
    connections: Connections | None = None,
) -> T:
    """Drive ``steps`` on a sync client (see :func:`executor`)."""
    return drive(steps, executor(client, url, connections))
