"""The redis-py and asyncio internals vecserve's raw connections stand on
(vecserve/store/syncwire.py, vecserve/store/asyncwire.py, the reply reader in
vecserve/store/resp.py), checked against the installed versions.

redis-py opens and authenticates each raw connection, then the drivers take its socket
(``Connection._sock``) or its asyncio transport (``Connection._writer.transport``), reads
replies with hiredis turning error replies into redis-py's exceptions
(``redis._parsers.BaseParser.parse_error``), and marks a connection it closed the way
redis.asyncio does (``_reader`` / ``_writer`` None); with its loop closed, a transport is
closed by asyncio's ``_call_connection_lost``. None of these is public API: pyproject.toml
pins redis-py's range, and a release that renames one fails here, by name, rather than
deep inside a read.
"""

from __future__ import annotations

import asyncio
import re
import socket
from pathlib import Path

import redis
import redis.asyncio
from packaging.requirements import Requirement
from redis._parsers import BaseParser

from vecserve.store.asyncwire import AsyncConnections, _Pipe
from vecserve.store.syncwire import _Raw
from vecserve.store.wire import Round

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def test_the_installed_redis_py_is_in_the_pinned_range():
    (line,) = re.findall(r'^\s*"(redis\[[^"]*)",', PYPROJECT.read_text(encoding="utf-8"), re.M)
    req = Requirement(line)
    assert any(s.operator == "<" for s in req.specifier), "redis-py's range needs an upper bound"
    assert req.specifier.contains(redis.__version__), (
        f"redis-py {redis.__version__} is outside {req.specifier}: check the drivers' use of "
        "its internals (this file), then widen the range"
    )


def test_a_sync_connection_gives_its_socket(store):
    pool = store.client.connection_pool
    raw = _Raw(pool.connection_class(**pool.connection_kwargs))
    assert isinstance(raw.sock, socket.socket), "redis.Connection._sock is gone"
    assert raw.request(b"*1\r\n$4\r\nPING\r\n", 1) == [b"PONG"]
    raw.close()


def test_error_replies_become_redis_py_exceptions():
    err = BaseParser.parse_error("WRONGTYPE Operation against a key holding the wrong kind")
    assert isinstance(err, redis.ResponseError) and "wrong kind" in str(err)


def test_an_asyncio_connection_gives_its_transport_and_is_marked_closed(store):
    async def scenario():
        client = _async_client(store)
        conns = AsyncConnections(client)
        assert await conns.execute(Round([("PING",)], "pinging")) == [b"PONG"]
        (pipe,) = conns._pipes
        assert isinstance(pipe, _Pipe) and isinstance(pipe.transport, asyncio.Transport)
        assert pipe.conn.is_connected
        await conns.close()
        # asyncwire.py marks a connection it closed as redis.asyncio does
        assert not pipe.conn.is_connected, "is_connected no longer reads _reader/_writer"
        await client.aclose()

    asyncio.run(scenario())


def test_a_pipe_of_a_closed_loop_closes_its_socket(store):
    conns = AsyncConnections(_async_client(store))
    loop = asyncio.new_event_loop()
    loop.run_until_complete(conns.execute(Round([("PING",)], "pinging")))
    (pipe,) = conns._pipes
    sock = pipe.transport.get_extra_info("socket")
    loop.close()
    assert hasattr(pipe.transport, "_call_connection_lost"), "asyncio's transports changed"
    pipe.fail(redis.ConnectionError("closed"))
    assert sock.fileno() == -1


def _async_client(store) -> redis.asyncio.Redis:
    """A redis.asyncio client to ``store``'s server (its address: the test server)."""
    pool = store.client.connection_pool
    kw = {k: v for k, v in pool.connection_kwargs.items() if k in ("host", "port", "path")}
    cls = getattr(redis.asyncio.connection, pool.connection_class.__name__)
    return redis.asyncio.Redis(
        connection_pool=redis.asyncio.ConnectionPool(connection_class=cls, **kw)
    )
