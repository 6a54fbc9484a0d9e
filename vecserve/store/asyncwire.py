"""Steps driven on ``redis.asyncio`` (:mod:`.wire`'s rounds sent from an event loop).

On a single server the coroutines of a loop share a few connections of our own
(:class:`AsyncConnections`), each a pipelined :class:`_Pipe` whose replies a hiredis
reader parses as they arrive (:func:`~.resp.reply_reader`); on a cluster a round is a
``redis.asyncio`` pipeline. :func:`arun` drives steps so that nothing holds the loop for
long, and turns redis-py's errors into ours (:func:`~.boundary.translated`).

The sync twin is :mod:`.syncwire`.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from .boundary import translated
from .resp import NEED as _NEED
from .resp import pack, pack_yielding, reply_reader
from .wire import PAUSE, Round, Steps, advance, checked

__all__ = ["HEAVY_KEYS", "AsyncConnections", "arun"]

T = TypeVar("T")

#: A round naming this many keys or more is packed by :class:`AsyncConnections`
#: ``PACK_CHUNK`` arguments at a time, letting the event loop run in between.
HEAVY_KEYS = 2000


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
        self.reader = reply_reader()
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
        return checked(replies, rnd)

    async def close(self) -> None:
        pipes, self._pipes = self._pipes, []
        for pipe in pipes:
            pipe.fail(redis.ConnectionError("Connection closed."))


async def _aexecute_pipeline(client, rnd: Round) -> list:
    pipe = client.pipeline(transaction=False)
    for cmd in rnd.commands:
        pipe.execute_command(*cmd)
    return checked(await pipe.execute(raise_on_error=False), rnd)


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

    done, rnd = advance(steps, None)
    while not done:
        if rnd is PAUSE:
            await asyncio.sleep(0)
            done, rnd = advance(steps, [])
            continue
        try:
            replies = await execute(rnd)
        except (redis.RedisError, OSError) as exc:
            ours = translated(exc, url, rnd.what)
            if ours is None:
                raise
            raise ours from exc
        done, rnd = advance(steps, replies)
    return rnd
