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
import threading
import weakref
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, TypeVar

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from .layout import translated

__all__ = [
    "AsyncConnections",
    "Connections",
    "Round",
    "Steps",
    "arun",
    "drive",
    "executor",
    "pack",
    "run",
]

T = TypeVar("T")
Steps = Generator["Round", list, T]

#: A round whose commands name this many keys or more is read off the event loop by
#: :func:`arun` (its replies decoded in a thread): a 10,000-row batch takes ~10 ms to
#: decode, which would stall every other coroutine.
HEAVY_KEYS = 2000


class Round:
    """The commands of one round trip. ``tolerate``: a command's ``ResponseError`` comes
    back as its reply instead of being raised (the steps decide)."""

    __slots__ = ("commands", "keys", "tolerate", "what")

    def __init__(self, commands: list[tuple], what: str, *, tolerate: bool = False):
        self.commands = commands
        self.what = what
        self.tolerate = tolerate
        self.keys = sum(len(c) for c in commands if type(c) is not bytes)


def pack(commands: Sequence[tuple | bytes]) -> bytes:
    """The RESP request of ``commands`` (arguments: bytes, str or int; a ``bytes``
    command is one already packed, sent as it is).

    >>> pack([("GET", b"k")])
    b'*2\\r\\n$3\\r\\nGET\\r\\n$1\\r\\nk\\r\\n'
    """
    out = []
    for cmd in commands:
        if type(cmd) is bytes:
            out.append(cmd)
            continue
        args = [
            a if type(a) is bytes else a.encode() if isinstance(a, str) else b"%d" % a for a in cmd
        ]
        out.append(b"*%d\r\n" % len(args))
        out.append(b"".join([b"$%d\r\n%b\r\n" % (len(a), a) for a in args]))
    return b"".join(out)


def packed(*args) -> bytes:
    """One command packed once (a request sent again and again)."""
    return pack([args])


def drive(steps: Steps[T], execute: Callable[[Round], list]) -> T:
    """Run ``steps`` to their result, each round through ``execute``."""
    try:
        rnd = next(steps)
        while True:
            rnd = steps.send(execute(rnd))
    except StopIteration as stop:
        return stop.value


def _check(replies: list, rnd: Round) -> list:
    if not rnd.tolerate:
        for r in replies:
            if isinstance(r, Exception):
                raise r
    return replies


class Connections:
    """A sync client's raw connections, one per thread (no pool lock, no pool checks)."""

    def __init__(self, client: redis.Redis):
        self.client = client
        self._local = threading.local()
        self._all: weakref.WeakSet = weakref.WeakSet()  # a dead thread's goes with it
        self._lock = threading.Lock()

    def execute(self, rnd: Round) -> list:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self.client.connection_pool.connection_class(
                **self.client.connection_pool.connection_kwargs
            )
            self._local.conn = conn
            with self._lock:
                self._all.add(conn)
        request = [pack(rnd.commands)]
        for attempt in (0, 1):
            try:
                conn.send_packed_command(request)
                replies = []
                for _ in rnd.commands:
                    try:
                        replies.append(conn.read_response())
                    except redis.ResponseError as exc:
                        replies.append(exc)
                break
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                conn.disconnect()  # a server restarted since: reads retry once, anew
                if attempt:
                    raise
            except BaseException:
                conn.disconnect()  # replies may be pending: never reuse it as it is
                raise
        return _check(replies, rnd)

    def close(self) -> None:
        with self._lock:
            conns, self._all = list(self._all), weakref.WeakSet()
        for conn in conns:
            conn.disconnect()


def _execute_pipeline(client, rnd: Round) -> list:
    pipe = client.pipeline(transaction=False)  # a cluster's rounds hold no packed commands
    for cmd in rnd.commands:
        pipe.execute_command(*cmd)
    return _check(pipe.execute(raise_on_error=False), rnd)


def executor(client: redis.Redis | RedisCluster, url: str,
             connections: Connections | None = None) -> Callable[[Round], list]:  # fmt: skip
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


def run(steps: Steps[T], client: redis.Redis | RedisCluster, url: str,
        connections: Connections | None = None) -> T:  # fmt: skip
    """Drive ``steps`` on a sync client (see :func:`executor`)."""
    return drive(steps, executor(client, url, connections))


class AsyncConnections:
    """An asyncio client's raw connections: a free list (one event loop, no lock)."""

    def __init__(self, client: redis.asyncio.Redis):
        self.client = client
        self._free: list = []

    async def execute(self, rnd: Round) -> list:
        pool = self.client.connection_pool
        conn = self._free.pop() if self._free else pool.connection_class(**pool.connection_kwargs)
        request = pack(rnd.commands)
        for attempt in (0, 1):
            try:
                await conn.send_packed_command(request)
                replies = []
                for _ in rnd.commands:
                    try:
                        replies.append(await conn.read_response())
                    except redis.ResponseError as exc:
                        replies.append(exc)
                break
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                await conn.disconnect(nowait=True)  # reads retry once, on a new connection
                if attempt:
                    raise
            except BaseException:  # cancelled mid-reply too: the connection is dropped
                await asyncio.shield(conn.disconnect(nowait=True))
                raise
        self._free.append(conn)
        return _check(replies, rnd)

    async def close(self) -> None:
        conns, self._free = self._free, []
        for conn in conns:
            await conn.disconnect()


async def _aexecute_pipeline(client, rnd: Round) -> list:
    pipe = client.pipeline(transaction=False)
    for cmd in rnd.commands:
        pipe.execute_command(*cmd)
    return _check(await pipe.execute(raise_on_error=False), rnd)


async def arun(steps: Steps[T], client: redis.asyncio.Redis | AsyncRedisCluster, url: str,
               connections: AsyncConnections | None = None) -> T:  # fmt: skip
    """:func:`run` on a ``redis.asyncio`` client. The replies of a round naming
    ``HEAVY_KEYS`` keys or more are handed to the steps in a thread, so decoding a big
    batch never blocks the event loop."""
    execute: Callable[[Round], Awaitable[list]]
    if connections is not None:
        execute = connections.execute
    else:

        async def execute(rnd: Round) -> list:
            return await _aexecute_pipeline(client, rnd)

    done, rnd = _send(steps, None)
    while not done:
        try:
            replies = await execute(rnd)
        except (redis.RedisError, OSError) as exc:
            ours = translated(exc, url, rnd.what)
            if ours is None:
                raise
            raise ours from exc
        if rnd.keys >= HEAVY_KEYS:
            done, rnd = await asyncio.to_thread(_send, steps, replies)
        else:
            done, rnd = _send(steps, replies)
    return rnd


def _send(steps: Steps, replies: list | None) -> tuple[bool, Any]:
    """``(False, next round)`` or ``(True, result)``: a StopIteration cannot cross a
    thread's future."""
    try:
        return False, steps.send(replies)
    except StopIteration as stop:
        return True, stop.value
