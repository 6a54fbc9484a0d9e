"""One round trip to Redis, described without doing it: the sans-I/O seam of every read.

A read is written once, as a generator of *steps*: it yields a :class:`Round` (the
commands of one round trip and what they are for, for error messages), receives the
list of their replies, and finally ``return`` s its result. Steps compose with
``yield from``. :func:`run` drives steps on a redis-py client, :func:`arun` on a
``redis.asyncio`` one, so the code that decides what to send and how to read the
replies is the same for the sync client, the asyncio client and the service; the
drivers only move bytes.

On a single server the drivers send a round as one hand-written RESP request on a
connection of their own and read the replies with the connection's (hiredis) parser:
none of redis-py's pipeline or pool machinery, which costs more than the server's work
for a one-word read. On a cluster a round is a pipeline (redis-py routes each command to
its slot's node).

>>> def steps():
...     (pong,) = yield Round([("PING",)], "pinging")
...     return pong
>>> drive(steps(), lambda rnd: [b"PONG"])
b'PONG'
"""

from __future__ import annotations

import asyncio
import collections
import threading
import weakref
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

import hiredis
import numpy as np
import redis
import redis.asyncio
from redis._parsers import BaseParser
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from .boundary import translated
from .keys import vector_key
from .resp import GET_HEADS, get_head, pack, pack_yielding

__all__ = [
    "PAUSE",
    "AsyncConnections",
    "CheckedGet",
    "Connections",
    "Round",
    "Steps",
    "arun",
    "drive",
    "executor",
    "pack",
    "run",
    "same_server",
]

T = TypeVar("T")
Steps = Generator["Round", list, T]

#: A round naming this many keys or more is packed by :class:`AsyncConnections`
#: ``PACK_CHUNK`` arguments at a time, letting the event loop run in between.
HEAVY_KEYS = 2000


#: What a connection of our own to a redis-py client's server copies from that client's
#: connection settings (``ssl*`` ones too): the address, the database, the credentials
#: and how the socket is opened. A caller adds what its connection shares beyond that:
#: the asyncio client's (:mod:`vecserve.keyedvectors`) serves requests as the sync
#: client's do, so it keeps the read timeout, health checks, client name and protocol;
#: the cache's tracking listener (:mod:`vecserve.cache`) sets its own (RESP2, no read
#: timeout: it waits for invalidation messages).
SAME_SERVER_KWARGS = frozenset(
    {
        "host",
        "port",
        "path",
        "db",
        "username",
        "password",
        "credential_provider",
        "socket_connect_timeout",
        "socket_keepalive",
        "socket_keepalive_options",
    }
)


def same_server(kwargs: dict, *also: str) -> dict:
    """``kwargs`` (a redis-py pool's ``connection_kwargs``) narrowed to
    :data:`SAME_SERVER_KWARGS`, the ``ssl*`` settings and ``also``.

    >>> same_server({"host": "h", "port": 1, "socket_timeout": 5, "retry": None})
    {'host': 'h', 'port': 1}
    """
    return {
        k: v
        for k, v in kwargs.items()
        if k in SAME_SERVER_KWARGS or k in also or k.startswith("ssl")
    }


class Round:
    """The commands of one round trip. ``tolerate``: a command's ``ResponseError`` comes
    back as its reply instead of being raised (the steps decide)."""

    __slots__ = ("commands", "keys", "tolerate", "what")

    def __init__(self, commands: list[tuple], what: str, *, tolerate: bool = False):
        self.commands = commands
        self.what = what
        self.tolerate = tolerate
        self.keys = sum(len(c) for c in commands if type(c) is not bytes)


#: What steps yield between chunks of long work (decoding 10,000 rows): no round trip;
#: :func:`arun` lets the event loop run, :func:`drive` goes straight on. Its reply: [].
PAUSE = Round([], "pausing")


def drive(steps: Steps[T], execute: Callable[[Round], list]) -> T:
    """Run ``steps`` to their result, each round through ``execute``."""
    try:
        rnd = next(steps)
        while True:
            rnd = steps.send([] if rnd is PAUSE else execute(rnd))
    except StopIteration as stop:
        return stop.value


def _check(replies: list, rnd: Round) -> list:
    if not rnd.tolerate:
        for r in replies:
            if isinstance(r, Exception):
                raise r
    return replies


_NEED = object()  # hiredis's "not enough data yet"


def _reply_reader() -> hiredis.Reader:
    """A RESP reader whose error replies come back as redis-py's exception objects (the
    classes :func:`~vecserve.store.layout.translated` knows), not raised."""
    return hiredis.Reader(
        protocolError=redis.exceptions.InvalidResponse,
        replyError=BaseParser.parse_error,
        notEnoughData=_NEED,
    )


class _Raw:
    """One connection as a socket and a RESP reader of our own: redis-py connects it (TLS,
    AUTH, SELECT, HELLO), then every request is one ``sendall`` and its replies are read
    with ``recv_into`` into one buffer: the whole client-side cost of a round trip."""

    __slots__ = ("__weakref__", "buf", "conn", "reader", "sock")

    def __init__(self, conn):
        conn.connect()
        self.conn = conn
        self.sock = conn._sock
        self.reader = _reply_reader()
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
        return _check(replies, rnd)

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
    return _check(pipe.execute(raise_on_error=False), rnd)


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


class _Pipe(asyncio.Protocol):
    """One connection coroutines of an event loop share, pipelined: requests are
    written in the order they are made (those made while it is busy, one loop
    iteration's in one write), and the replies, parsed as they arrive, go to their
    requests in that order. A request whose caller was cancelled still has its replies
    read (and dropped), so the connection stays in step. Parsing happens a received
    chunk at a time (hiredis keeps a half-read reply), so a 12 MB reply never holds the
    loop for long."""

    def __init__(self, conn, transport: asyncio.Transport):
        self.conn = conn  # redis.asyncio's: it connected and shook hands; owns the transport
        self.transport = transport
        self.loop = asyncio.get_running_loop()
        self.reader = _reply_reader()
        self.waiting: collections.deque = collections.deque()  # [future, n, replies]
        self.out: list[bytes] = []
        self.lost: Exception | None = None

    def send(self, data: bytes, n: int) -> asyncio.Future:
        """A future of the ``n`` replies of request ``data``."""
        if self.lost is not None:
            raise self.lost
        fut = self.loop.create_future()
        if not self.waiting:  # an idle connection: no request to coalesce with
            self.transport.write(data)
        else:
            if not self.out:
                self.loop.call_soon(self._flush)
            self.out.append(data)
        self.waiting.append([fut, n, []])
        return fut

    def _flush(self) -> None:
        out, self.out = self.out, []
        if self.lost is None and out:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def data_received(self, data: bytes) -> None:
        reader, waiting = self.reader, self.waiting
        reader.feed(data)
        while waiting:
            entry = waiting[0]
            reply = reader.gets()
            if reply is _NEED:
                return
            replies = entry[2]
            replies.append(reply)
            if len(replies) == entry[1]:
                waiting.popleft()
                if not entry[0].done():
                    entry[0].set_result(replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(redis.ConnectionError(f"Connection closed by server{f': {exc}' if exc else ''}."))

    def fail(self, exc: Exception) -> None:
        """End the connection: every waiting request fails with ``exc``."""
        if self.lost is None:
            self.lost = exc
            try:
                self.transport.abort()
            except RuntimeError:  # its loop is closed: close the socket as the loop would
                self.transport._call_connection_lost(None)
            self.conn._reader = self.conn._writer = None  # closed: redis.asyncio's own mark
        while self.waiting:
            fut = self.waiting.popleft()[0]
            if not fut.done():
                fut.set_exception(exc)


class AsyncConnections:
    """An asyncio client's raw connections (single server): a few :class:`_Pipe` s that
    the coroutines of the loop pipeline their requests on, each request on the one
    with the fewest waiting. A new connection is made only while every one has
    requests waiting, up to ``size``: a server writes a limited amount to one client
    per turn of its event loop (64 KB), so one connection cannot carry the replies of
    many concurrent batches; a few can, with far fewer reads than a connection each."""

    def __init__(self, client: redis.asyncio.Redis, size: int = 8):
        self.client = client
        self.size = size
        self._pipes: list[_Pipe] = []
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the pipes' and the lock's

    def _pick(self) -> _Pipe | None:
        best = None
        for pipe in self._pipes:
            if pipe.lost is None and (best is None or len(pipe.waiting) < len(best.waiting)):
                best = pipe
        return best

    async def _pipe(self) -> _Pipe:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # another loop's connections are no use here
            self._loop, self._lock, pipes, self._pipes = loop, None, self._pipes, []
            for old in pipes:
                old.fail(redis.ConnectionError("Connection closed: another event loop."))
        pipe = self._pick()
        if pipe is not None and (not pipe.waiting or len(self._pipes) >= self.size):
            return pipe
        if self._lock is None:
            self._lock = asyncio.Lock()
        elif pipe is not None and self._lock.locked():
            return pipe  # another coroutine is connecting: no need to wait for it
        async with self._lock:  # one coroutine connects at a time
            best = self._pick()
            if best is not None and (not best.waiting or len(self._pipes) >= self.size):
                return best
            pool = self.client.connection_pool
            conn = pool.connection_class(**pool.connection_kwargs)
            await conn.connect()  # redis.asyncio's own: TLS, AUTH, SELECT, HELLO
            transport = conn._writer.transport
            new = _Pipe(conn, transport)
            transport.set_protocol(new)
            self._pipes = [p for p in self._pipes if p.lost is None] + [new]
            return new

    async def execute(self, rnd: Round) -> list:
        if rnd.keys >= HEAVY_KEYS:  # packing 10,000 keys takes milliseconds: in chunks
            request = await pack_yielding(rnd.commands)
        else:
            request = pack(rnd.commands)
        timeout = self.client.connection_pool.connection_kwargs.get("socket_timeout")
        for attempt in (0, 1):
            try:
                pipe = await self._pipe()
                fut = pipe.send(request, len(rnd.commands))
                if timeout:
                    try:
                        replies = await asyncio.wait_for(fut, timeout)
                    except asyncio.TimeoutError:
                        exc = redis.TimeoutError(
                            f"Timeout reading from the server after {timeout} s"
                        )
                        pipe.fail(exc)
                        raise exc from None
                else:
                    replies = await fut
                break
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                if attempt:  # a server restarted since: reads retry once, anew
                    raise
        return _check(replies, rnd)

    async def close(self) -> None:
        pipes, self._pipes = self._pipes, []
        for pipe in pipes:
            pipe.fail(redis.ConnectionError("Connection closed."))


async def _aexecute_pipeline(client, rnd: Round) -> list:
    pipe = client.pipeline(transaction=False)
    for cmd in rnd.commands:
        pipe.execute_command(*cmd)
    return _check(await pipe.execute(raise_on_error=False), rnd)


async def arun(
    steps: Steps[T],
    client: redis.asyncio.Redis | AsyncRedisCluster,
    url: str,
    connections: AsyncConnections | None = None,
) -> T:
    """:func:`run` on a ``redis.asyncio`` client. Nothing holds the event loop for long:
    a big request is packed in chunks (:class:`AsyncConnections`), its replies parsed
    as they arrive, and steps decoding them yield :data:`PAUSE` between chunks, where
    the loop runs its other callbacks. No worker threads: a thread would hold the GIL
    the loop needs for up to a switch interval (5 ms) at a time."""
    execute: Callable[[Round], Awaitable[list]]
    if connections is not None:
        execute = connections.execute
    else:

        async def execute(rnd: Round) -> list:
            return await _aexecute_pipeline(client, rnd)

    done, rnd = _send(steps, None)
    while not done:
        if rnd is PAUSE:
            await asyncio.sleep(0)
            done, rnd = _send(steps, [])
            continue
        try:
            replies = await execute(rnd)
        except (redis.RedisError, OSError) as exc:
            ours = translated(exc, url, rnd.what)
            if ours is None:
                raise
            raise ours from exc
        done, rnd = _send(steps, replies)
    return rnd


def _send(steps: Steps, replies: list | None) -> tuple[bool, Any]:
    """``(False, next round)`` or ``(True, result)``."""
    try:
        return False, steps.send(replies)
    except StopIteration as stop:
        return True, stop.value
