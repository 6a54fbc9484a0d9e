"""Least-privilege Redis users for vecserve's roles, as ``ACL SETUSER`` lines.

- ``worker`` (``RedisKeyedVectors`` in Celery workers) and ``api`` (``vecserve serve``):
  read-only. ``+@read +@connection`` less ``@dangerous`` (so no ``INFO``, ``KEYS``,
  ``CLIENT KILL``), keys readable only (``%R~``), plus what cache invalidation needs
  (``SUBSCRIBE`` to ``__redis__:invalidate``; ``CLIENT TRACKING`` is in ``@connection``)
  and, on a Redis Cluster, the slot map (``CLUSTER SLOTS``/``SHARDS``, ``READONLY``);
  ``EVAL_RO`` for fastText models' one-round-trip read (a script that can only read:
  the server refuses any write from it, and the key rules still apply).
  Reading a pinned generation (``kv.pin()``) needs nothing more: the rows' ``MGET`` and
  an ``EXISTS`` of the pin key. Holding a pin does, and only the ``worker`` gets it:
  ``SET`` (taking a pin ``NX PX``, renewing it ``XX PX``), ``SADD`` (indexing it),
  ``DEL`` and ``SREM`` (releasing it), on the pin keys alone (``%W~vecserve:pin:*``,
  ``%W~vecserve:pins:*``, one model's with ``--model``): never a vector, the registry
  or another model's pins.
- ``loader`` (``vecserve load``, ``vecserve train``): reads and writes one model's keys
  and the shared registry hashes, publishes commit events, runs the lease's one script,
  and writes each batch in one ``MULTI``/``EXEC`` (``@transaction``: all or nothing, so
  a refused write never counts as written). It also gets ``INFO`` (and only that of
  ``@dangerous``): the load's pre-flight reads ``maxmemory``, ``used_memory`` and
  ``maxmemory_policy`` from ``INFO memory`` to refuse, in one line before writing
  anything, a model that cannot fit or a server whose policy may evict its keys. INFO
  shows server statistics and settings, no data and no secrets; the loader is an
  operator's tool, and without it a load that does not fit stops half-way instead
  (``check skipped``, the writes then catch it). Readers never get it: they load nothing.

vecserve detects a cluster with ``HELLO``, never ``INFO``, so these users suffice.

>>> print(setuser_line("worker", user="w", password="pw"))  # doctest: +NORMALIZE_WHITESPACE
ACL SETUSER w reset on >pw resetchannels &__redis__:invalidate %R~* -@all +@read
+@connection -@dangerous +subscribe +unsubscribe +eval_ro +cluster|slots +cluster|shards
+readonly %W~vecserve:pins:* %W~vecserve:pin:* +set +sadd +srem +del
"""

from __future__ import annotations

import secrets

from .errors import VecserveError
from .store.layout import (
    EVENTS,
    SHARED_METADATA,
    model_key_patterns,
    pin_key_patterns,
    replication_marker,
)

__all__ = ["ROLES", "setuser_line"]

INVALIDATE_CHANNEL = "__redis__:invalidate"
_CLUSTER = ["+cluster|slots", "+cluster|shards", "+readonly"]
# EVAL_RO: fastText reads (Store.read_rows_subwords) in one read-only script
_READER = [
    "-@all",
    "+@read",
    "+@connection",
    "-@dangerous",
    "+subscribe",
    "+unsubscribe",
    "+eval_ro",
]
# Holding a pin (Pin.take / renew / release), on pin keys only (%W~): worker only
_PINNER = ["+set", "+sadd", "+srem", "+del"]
ROLES = {
    "worker": "read-only (but its pins): RedisKeyedVectors in workers",
    "api": "read-only: the HTTP service (vecserve serve)",
    "loader": "writes one model (--model) and vecserve's registry",
}


def setuser_line(
    role: str, *, user: str | None = None, model: str | None = None, password: str | None = None
) -> str:
    """The ``ACL SETUSER`` line of ``role`` for ``user`` (default ``vecserve-<role>``).

    ``model`` limits a worker's or the API's reads to that model (and the registry), and
    is required for a loader. ``password`` defaults to a fresh random one.
    """
    if role not in ROLES:
        raise VecserveError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    user = user or f"vecserve-{role}"
    password = password or secrets.token_urlsafe(24)
    head = ["ACL", "SETUSER", user, "reset", "on", f">{password}", "resetchannels"]
    if role == "loader":
        if not model:
            raise VecserveError("a loader writes one model: name it with --key NAME")
        # the scratch keys a commit writes before WAIT (Store.wait_for_replicas)
        markers = replication_marker("*")
        keys = [f"~{p}" for p in (*model_key_patterns(model), *SHARED_METADATA, markers)]
        rights = [
            "-@all",
            "+@read",
            "+@write",
            "+@connection",
            "+@transaction",
            "-@dangerous",
            "+eval",
            "+info",
        ]
        return " ".join([*head, f"&{EVENTS}", *keys, *rights, "+publish", *_CLUSTER])
    if model:
        keys = [f"%R~{p}" for p in (*model_key_patterns(model), *SHARED_METADATA)]
    else:
        keys = ["%R~*"]
    line = [*head, f"&{INVALIDATE_CHANNEL}", *keys, *_READER, *_CLUSTER]
    if role == "worker":
        line += [*(f"%W~{p}" for p in pin_key_patterns(model)), *_PINNER]
    return " ".join(line)
