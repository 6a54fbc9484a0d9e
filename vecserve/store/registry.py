"""The Store: the model registry, and the facade of every read (its parts are mixins,
one module each)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
import redis
from redis.cluster import RedisCluster

from ..errors import ModelNotFound, StoreUnavailable, VecserveError
from .boundary import describe_client, redact_url, translate_errors
from .deletion import Deletion
from .integrity import Integrity, RowCheck
from .keys import DEFAULT_CLUSTER_BUCKETS, LOADS, MODELS, encode_tokens, lock_key, vector_keys
from .records import LoadState, ModelInfo, check_layout
from .remains import Remains
from .resp import packed
from .rows import RowReads
from .server import MemoryFacts, ServerFacts, gb, server_mode
from .subword_rows import SubwordReads
from .syncwire import Connections, executor
from .vocabulary import VocabularyReads
from .wire import Round, Steps, drive

T = TypeVar("T")

__all__ = ["MemoryFacts", "RowCheck", "Store", "gb", "server_mode"]


class Store(RowReads, SubwordReads, VocabularyReads, Integrity, Remains, Deletion, ServerFacts):
    """Model registry and vector keys on a ``redis.Redis`` or ``redis.RedisCluster``.

    A facade: the registry reads and the connection are here, every other concern is a
    mixin of its own module (:class:`~.rows.RowReads`, :class:`~.subword_rows.SubwordReads`,
    :class:`~.vocabulary.VocabularyReads`, :class:`~.integrity.Integrity`,
    :class:`~.remains.Remains`, :class:`~.deletion.Deletion`,
    :class:`~.server.ServerFacts`), all on the state :meth:`__init__` sets.

    Parameters
    ----------
    client : redis.Redis or redis.cluster.RedisCluster
        A client created with ``decode_responses=False``.
    url : str, optional
        Shown in error messages.

    Examples
    --------
    >>> store = Store.from_url("redis://localhost:6379/0")     # doctest: +SKIP
    >>> [m.name for m in store.list_models()]                  # doctest: +SKIP
    ['GOOGLE_W2V']
    """

    def __init__(self, client: redis.Redis | RedisCluster, *, url: str = ""):
        self.client = client
        self.url = redact_url(url or describe_client(client))
        self.is_cluster = isinstance(client, RedisCluster)
        # reads go out on raw per-thread connections (see vecserve.store.syncwire)
        self._connections = None if self.is_cluster else Connections(client)
        #: sends one round of read steps (:mod:`vecserve.store.wire`) and returns its replies
        self.execute = executor(client, self.url, self._connections)
        self._entries: dict[str, tuple[bytes, ModelInfo]] = {}  # model_from_entry
        self._entry_requests: dict[str, bytes] = {}  # HGET of a registry entry, packed
        self._singles: dict[str, tuple] = {}  # (info, single_get's), by model name
        #: ``request(data, n)``: the ``n`` replies of a packed request on this thread's raw
        #: connection, untranslated, no retry (single server; the one-word hot path)
        self.request = None if self._connections is None else self._connections.request
        # vocab_hashes, by (prefix, generation): a later generation may reuse a prefix
        self._vocab_hashes: dict[tuple[str, int], np.ndarray | None] = {}
        # False once the server refused SUBWORD_READ (no EVAL_RO: Redis < 7, or an ACL
        # without it): fastText reads then fetch every word's buckets with MGET
        self.subword_script = not self.is_cluster
        # Called after a load of this store commits (the embedded server saves then).
        self.after_commit: Callable[[], None] | None = None

    @classmethod
    def from_url(cls, url: str, **kwargs) -> Store:
        """Connect to ``url``; a Redis Cluster node URL gives a cluster client."""
        kwargs.setdefault("socket_connect_timeout", 5)
        kwargs.setdefault("health_check_interval", 30)
        client = redis.Redis.from_url(url, **kwargs)
        try:
            with translate_errors(url, "connecting (HELLO)"):
                cluster = server_mode(client) == "cluster"
            if cluster:
                client.close()
                kwargs.pop("health_check_interval", None)
                with translate_errors(url, "reading the cluster's slots"):
                    client = RedisCluster.from_url(url, **kwargs)
        except VecserveError:
            client.close()
            raise
        return cls(client, url=url)

    @property
    def default_buckets(self) -> int:
        """Bucket count of new generations: hash-tagged keys on a cluster only."""
        return DEFAULT_CLUSTER_BUCKETS if self.is_cluster else 0

    def close(self) -> None:
        """Close every connection this store opened, now.

        A cluster client made from a URL gives each node a connection pool of its own
        that the client's ``close()`` leaves open (redis-py closes only the pools a
        client made itself): those are closed here too, not left to the garbage
        collector, which would find the sockets unclosed wherever it ran."""
        if self._connections is not None:
            self._connections.close()
        if self.is_cluster:
            for node in self.client.get_nodes():
                if node.redis_connection is not None:
                    node.redis_connection.connection_pool.disconnect()
        self.client.close()

    def run(self, steps: Steps[T]) -> T:
        """Drive read ``steps`` (the ``*_steps`` methods) on this store's connections."""
        return drive(steps, self.execute)

    def errors(self, what: str):
        """Context manager: redis-py errors inside become StoreUnavailable naming ``what``."""
        return translate_errors(self.url, what)

    @staticmethod
    def vector_keys(prefix: str, tokens: Sequence[str], buckets: int = 0) -> list[bytes]:
        """Key names of ``tokens`` in the generation with this prefix.

        >>> Store.vector_keys("M", ["car", "λ"])
        [b'M:car', b'M:\\xce\\xbb']
        >>> Store.vector_keys("M", ["car"], buckets=128)
        [b'M:{29}:car']
        """
        return vector_keys(prefix, encode_tokens(tokens), buckets)

    def list_models(self) -> list[ModelInfo]:
        """Committed models, sorted by name."""
        with self.errors("listing models"):
            raw = self.client.hgetall(MODELS)
        return sorted((ModelInfo.from_json(v) for v in raw.values()), key=lambda m: m.name)

    def get_model(self, name: str) -> ModelInfo:
        """The committed generation of ``name``; ModelNotFound (a KeyError) if none."""
        with self.errors(f"reading model {name!r}"):
            raw = self.client.hget(MODELS, name)
        if raw is None:
            hint = ""
            with contextlib.suppress(StoreUnavailable):
                if self.get_load(name) is not None:
                    hint = "a load of it is unfinished (see `vecserve models`)"
            raise ModelNotFound(name, hint)
        return check_layout(ModelInfo.from_json(raw))

    def list_loads(self) -> list[LoadState]:
        """Unfinished (running or interrupted) loads."""
        with self.errors("listing loads"):
            raw = self.client.hgetall(LOADS)
        return sorted((LoadState.from_json(v) for v in raw.values()), key=lambda s: s.name)

    def get_load(self, name: str) -> LoadState | None:
        with self.errors(f"reading load state of {name!r}"):
            raw = self.client.hget(LOADS, name)
        return check_layout(LoadState.from_json(raw)) if raw is not None else None

    def lock_holder(self, name: str) -> str | None:
        with self.errors("reading lock"):
            raw = self.client.get(lock_key(name))
        return raw.decode() if raw is not None else None

    def registry_entry(self, name: str) -> bytes | None:
        """The raw registry JSON of ``name`` (None if not committed); cheap change check."""
        return self.run(self.registry_entry_steps(name))

    def registry_entry_steps(self, name: str) -> Steps[bytes | None]:
        """:meth:`registry_entry` as steps (:mod:`vecserve.store.wire`)."""
        (raw,) = yield Round([("HGET", MODELS, name)], f"reading model {name!r}")
        return raw

    def entry_request(self, name: str) -> bytes:
        """The HGET of ``name``'s registry entry, packed once (it rides on every read)."""
        entry = self._entry_requests.get(name)
        if entry is None:
            entry = self._entry_requests[name] = packed("HGET", MODELS, name)
        return entry

    def model_from_entry(self, name: str, raw: bytes | None) -> ModelInfo:
        """The :class:`ModelInfo` of a raw registry entry (parsed once per distinct entry)."""
        if raw is None:
            self._entries.pop(name, None)
            raise ModelNotFound(name)
        hit = self._entries.get(name)
        if hit is not None and hit[0] == raw:
            return hit[1]
        info = check_layout(ModelInfo.from_json(raw))
        self._entries[name] = (raw, info)
        return info
