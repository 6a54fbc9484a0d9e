"""Connections of our own beside a :class:`~.registry.Store`'s client: the ``redis.asyncio``
client of an asyncio reader, and the client-side cache's tracking connections.

The code outside the store never imports redis: :mod:`vecserve.keyedvectors` asks
:func:`async_client` for its client, :mod:`vecserve.cache` listens through
:class:`TrackingConnection` on the nodes :func:`tracking_nodes` (and, on a cluster,
:func:`topology`) name.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from ..errors import StoreUnavailable
from .asyncwire import AsyncConnections

if TYPE_CHECKING:
    from .registry import Store

__all__ = [
    "IDLE",
    "INVALIDATE_CHANNEL",
    "NodeSpec",
    "TrackingConnection",
    "async_client",
    "same_server",
    "topology",
    "tracking_nodes",
]

#: ``(connection class, kwargs)`` of one node: where a tracking connection goes.
NodeSpec = tuple[type, dict]
AsyncClient = redis.asyncio.Redis | AsyncRedisCluster
INVALIDATE_CHANNEL = b"__redis__:invalidate"


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


def async_client(
    store: Store,
) -> tuple[redis.asyncio.Redis | AsyncRedisCluster, AsyncConnections | None]:
    """A ``redis.asyncio`` client to the server ``store`` speaks to, and (single server)
    its raw connections."""
    if store.is_cluster:
        node = store.client.get_random_node()
        kw = same_server(node.redis_connection.connection_pool.connection_kwargs, "socket_timeout")
        # the node's address is the cluster client's own argument; a cluster has no db
        # or unix socket; TLS is not carried over (a cluster client takes it otherwise)
        keep = {
            k: v
            for k, v in kw.items()
            if v is not None and k not in ("host", "port", "path", "db") and k[:3] != "ssl"
        }
        return AsyncRedisCluster(host=node.host, port=node.port, **keep), None
    pool = store.client.connection_pool
    # its connections serve requests as the sync client's do (see SAME_SERVER_KWARGS)
    kw = same_server(
        pool.connection_kwargs, "socket_timeout", "health_check_interval", "client_name", "protocol"
    )
    name = pool.connection_class.__name__
    cls = getattr(redis.asyncio.connection, name, None) or redis.asyncio.Connection
    client = redis.asyncio.Redis(
        connection_pool=redis.asyncio.ConnectionPool(connection_class=cls, **kw)
    )
    return client, AsyncConnections(client)


def tracking_nodes(client: redis.Redis | RedisCluster) -> list[NodeSpec]:
    """(connection class, kwargs) of every node whose writes the cache must hear about."""
    if isinstance(client, RedisCluster):
        out = []
        for node in client.get_primaries():
            pool = node.redis_connection.connection_pool
            out.append((pool.connection_class, dict(pool.connection_kwargs)))
        return out
    pool = client.connection_pool
    return [(pool.connection_class, dict(pool.connection_kwargs))]


def topology(client: redis.Redis | RedisCluster) -> Callable[[], list[NodeSpec]] | None:
    """For a cluster, a function giving its primaries as they are NOW (asked with
    ``CLUSTER SLOTS``), so a cache follows failovers and resharding; None otherwise."""
    if not isinstance(client, RedisCluster):
        return None
    template = tracking_nodes(client)[0]

    def primaries() -> list[NodeSpec]:
        slots = client.cluster_slots(target_nodes=RedisCluster.RANDOM)
        addrs = sorted({(str(v["primary"][0]), int(v["primary"][1])) for v in slots.values()})
        cls, kw = template
        return [(cls, {**kw, "host": host, "port": port}) for host, port in addrs]

    return primaries


#: What :meth:`TrackingConnection.receive` answers when no invalidation came.
IDLE = object()


class TrackingConnection:
    """One node's connection in ``CLIENT TRACKING ... BCAST`` mode, redirected to itself
    and subscribed to ``__redis__:invalidate`` (RESP2: the messages come on a channel).

    Its errors are redis-py's and the socket's, raised untranslated: the listener that
    holds it drops everything it cached on any of them."""

    def __init__(self, cls: type, kwargs: dict):
        self.cls = cls
        self.kwargs = same_server(kwargs)
        self.kwargs["protocol"] = 2  # invalidation messages on a channel of their own
        self.kwargs["socket_timeout"] = None  # it waits for them as long as it takes
        self.conn = None
        self.idle_since = 0.0
        self.pinged = False

    def open(self, prefixes: Sequence[bytes]) -> None:
        """Connect, track every key beginning with one of ``prefixes``, subscribe."""
        conn = self.conn = self.cls(**self.kwargs)
        conn.connect()
        conn.send_command("CLIENT", "ID")
        cid = conn.read_response()
        args = [a for p in prefixes for a in ("PREFIX", p)]
        conn.send_command("CLIENT", "TRACKING", "on", "REDIRECT", cid, "BCAST", *args)
        conn.read_response()
        conn.send_command("SUBSCRIBE", INVALIDATE_CHANNEL)
        conn.read_response()
        self.idle_since, self.pinged = time.monotonic(), False

    def receive(self, timeout: float, health: float):
        """The keys one invalidation message names (None: a flush of everything), or
        :data:`IDLE` when none came within ``timeout``. After ``health`` seconds of
        silence the server is sent a PING; one left unanswered that long raises
        :class:`~vecserve.errors.StoreUnavailable` (a silent peer)."""
        conn = self.conn
        if not conn.can_read(timeout=timeout):
            if time.monotonic() - self.idle_since < health:
                return IDLE
            if self.pinged:
                raise StoreUnavailable("the cache's tracking connection had no answer to PING")
            conn.send_command("PING")
            self.pinged, self.idle_since = True, time.monotonic()
            return IDLE
        msg = conn.read_response()
        self.pinged, self.idle_since = False, time.monotonic()
        if not isinstance(msg, list) or len(msg) < 3 or msg[0] != b"message":
            return IDLE  # subscribe confirmations, pong
        keys = msg[2]
        return [keys] if keys is not None and not isinstance(keys, list) else keys

    def close(self) -> None:
        """Disconnect (errors ignored: the connection may be broken already)."""
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.disconnect()
            self.conn = None
