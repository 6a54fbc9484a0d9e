"""The server itself: its mode (standalone, cluster), its memory facts, and waiting for
its replicas."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis
from redis.cluster import RedisCluster

from ..errors import PermissionDenied, ServerRefused
from .boundary import describe_client
from .keys import replication_marker

__all__ = ["EVICTING_POLICIES", "MemoryFacts", "ServerFacts", "gb", "server_mode"]

#: ``maxmemory-policy`` values that may evict keys without a TTL (vecserve's keys have none)
EVICTING_POLICIES = ("allkeys-lru", "allkeys-lfu", "allkeys-random")


@dataclass(frozen=True)
class MemoryFacts:
    """A server's ``INFO memory`` facts that decide whether a model fits and stays whole."""

    maxmemory: int  # 0: no limit
    used_memory: int
    policy: str

    @property
    def free(self) -> int | None:
        """Bytes left under ``maxmemory`` (None: no limit)."""
        return max(0, self.maxmemory - self.used_memory) if self.maxmemory else None

    @property
    def evicts(self) -> bool:
        """True when the policy may evict keys without a TTL: parts of a model."""
        return self.policy in EVICTING_POLICIES

    def describe(self) -> str:
        """One line: ``maxmemory 2.0 GB (1.5 GB used), policy noeviction``.

        >>> MemoryFacts(2 << 30, 3 << 29, "allkeys-lru").describe()
        'maxmemory 2.1 GB (1.6 GB used), policy allkeys-lru: evicts keys without a TTL'
        """
        limit = f"maxmemory {gb(self.maxmemory)}" if self.maxmemory else "no maxmemory"
        warn = ": evicts keys without a TTL" if self.evicts else ""
        return f"{limit} ({gb(self.used_memory)} used), policy {self.policy}{warn}"


def gb(n: float) -> str:
    """``n`` bytes in GB (10**9) or MB, for messages.

    >>> gb(3_590_000_000), gb(520_000_000), gb(6_240_000)
    ('3.6 GB', '520 MB', '6.2 MB')
    """
    if n >= 1e9:
        return f"{n / 1e9:.1f} GB"
    return f"{n / 1e6:.0f} MB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def server_mode(client: redis.Redis) -> str:
    """``"standalone"``, ``"cluster"`` or ``"sentinel"``, from ``HELLO`` (in ``@connection``).

    ``HELLO`` needs no right beyond what every client has, where ``INFO`` is ``@dangerous``
    and refused to least-privilege users. It is sent with the protocol version the
    connection already speaks, so it changes nothing. A server older than Redis 6 (no
    ``HELLO``) is asked ``INFO cluster`` instead.
    """
    conn = client.connection_pool.get_connection()
    try:
        conn.send_command("HELLO", int(getattr(conn, "protocol", None) or 2))
        reply = conn.read_response()
    except redis.ResponseError as exc:
        if "unknown command" not in str(exc).lower():
            raise
        return (
            "cluster"
            if client.info("cluster").get("cluster_enabled") in (1, "1")
            else ("standalone")
        )
    if isinstance(reply, list):  # RESP2: a flat list of names and values
        reply = dict(zip(reply[::2], reply[1::2], strict=False))
    mode = reply.get(b"mode", reply.get("mode", b"standalone"))
    return mode.decode() if isinstance(mode, bytes) else str(mode)


class ServerFacts:
    """The :class:`~.registry.Store`'s questions to the server itself."""

    def ping(self) -> bool:
        with self.errors("PING"):
            return bool(self.client.ping())

    def memory_facts(self) -> list[MemoryFacts] | None:
        """``INFO memory`` of the server (of every primary on a cluster), or None where
        the server refuses INFO (a least-privilege user: see :mod:`vecserve.acl`)."""
        try:
            with self.errors("reading INFO memory"):
                if self.is_cluster:
                    raw = self.client.info("memory", target_nodes=RedisCluster.PRIMARIES)
                    infos = [raw] if "used_memory" in raw else list(raw.values())
                else:
                    infos = [self.client.info("memory")]
        except PermissionDenied:
            return None
        except ServerRefused as exc:
            if exc.reply != "ERR":  # ERR: INFO renamed or disabled
                raise
            return None
        return [
            MemoryFacts(
                maxmemory=int(i.get("maxmemory", 0)),
                used_memory=int(i.get("used_memory", 0)),
                policy=str(i.get("maxmemory_policy", "unknown")),
            )
            for i in infos
        ]

    def wait_for_replicas(self, slots_of: Sequence[str], *, timeout: float = 10.0) -> list[str]:
        """Block until the replicas of every node holding one of ``slots_of`` (keys or hash
        tags) have acknowledged every write made so far; the nodes whose replicas did not
        within ``timeout`` seconds, named (empty: all did, or there are no replicas).

        Redis replicates asynchronously: a write a primary acknowledged can be lost when a
        replica takes over before it arrived. ``WAIT`` counts only the writes of its own
        connection, so a scratch key in the same slot (:func:`replication_marker`) is
        written first, on the same connection; the replication stream is ordered, so every
        earlier write of any client is acknowledged with it. A server that refuses INFO
        (least privilege) is not waited on.
        """
        late = []
        with self.errors("waiting for the replicas"):
            for node, client, marker in self._nodes_of(slots_of):
                try:
                    replicas = int(client.info("replication").get("connected_slaves", 0))
                except redis.ResponseError:  # INFO refused: nothing to count replicas by
                    continue
                if not replicas:
                    continue
                pipe = client.pipeline(transaction=False)
                pipe.set(marker, b"1", px=60_000)
                pipe.execute_command("WAIT", replicas, int(timeout * 1000))
                acked = pipe.execute()[1]
                if int(acked) < replicas:
                    late.append(f"{node} ({acked} of {replicas} replicas)")
        return late

    def _nodes_of(self, slots_of: Sequence[str]):
        """``(node name, client, marker key)`` once per node holding one of ``slots_of``."""
        if not self.is_cluster:
            yield describe_client(self.client), self.client, replication_marker(slots_of[0])
            return
        seen = set()
        for slot_of in slots_of:
            marker = replication_marker(slot_of)
            node = self.client.get_node_from_key(marker)
            if node.name not in seen:
                seen.add(node.name)
                yield node.name, self.client.get_redis_connection(node), marker
