"""The Store: the model registry and reads of a model's vectors and vocabulary."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import redis
from redis.cluster import RedisCluster

from ..errors import (
    GenerationChanged,
    ModelDamaged,
    ModelNotFound,
    PermissionDenied,
    ServerRefused,
    StoreUnavailable,
    VecserveError,
)
from ..subwords import compose, flat_word_hashes, in_vocabulary, ngram_buckets_flat
from .layout import (
    CHECKS,
    DEFAULT_CLUSTER_BUCKETS,
    EVENTS,
    LOADS,
    MODELS,
    NS,
    TRASH,
    LoadState,
    ModelInfo,
    counts_key,
    decode_tokens,
    describe_client,
    encode_tokens,
    group_by_tag,
    lock_key,
    model_key_patterns,
    ngram_keys,
    ngrams_key,
    redact_url,
    replication_marker,
    resp_exists,
    text_key,
    translate_errors,
    unpack_vocab,
    validate_model_name,
    vector_keys,
    vocab_hashes_key,
    vocab_key,
    vocab_parts,
    vocab_sizes_key,
)
from .wire import PAUSE, CheckedGet, Connections, Round, Steps, drive, executor, packed

T = TypeVar("T")

__all__ = ["MemoryFacts", "RowCheck", "Store"]

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


@dataclass(frozen=True)
class RowCheck:
    """What :meth:`Store.check_rows` found: rows checked, rows missing, a few lost words.

    ``lost``: the generation's metadata found gone, as phrases ("its vocabulary");
    ``unlisted``: rows a lost vocabulary no longer names, so they could not be asked
    for (neither present nor missing: `damaged` all the same).
    """

    checked: int
    missing: int
    words: list[str]
    hashes: np.ndarray | None = None  # the vocabulary's sorted word hashes, when asked
    lost: tuple[str, ...] = ()
    unlisted: int = 0

    @property
    def damaged(self) -> bool:
        """Whether rows are missing or could not be checked, or metadata is gone."""
        return bool(self.missing or self.unlisted or self.lost)


#: One round trip for a fastText batch: every word's row, and the n-gram bucket rows of
#: only those words that are missing (as MGET of the words then the buckets would give
#: them; a bucket no missing word needs comes back nil). KEYS: the word keys. ARGV: the
#: bucket key prefix; the bucket numbers (uint32, little-endian); for every bucket of
#: every word in order, its position among them (uint32); word i's first entry in that
#: list (uint32, one more bound at the end). Read-only (EVAL_RO); only the missing words'
#: entries are unpacked.
SUBWORD_READ = """
local n, prefix, ids, flat, bounds = #KEYS, ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local out = {}
for i = 1, n + #ids / 4 do out[i] = false end
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  if v then
    out[i] = v
  else
    local lo = struct.unpack('<I4', bounds, 4 * i - 3)
    local hi = struct.unpack('<I4', bounds, 4 * i + 1)
    for k = lo, hi - 1 do
      local j = struct.unpack('<I4', flat, 4 * k + 1)
      if not out[n + j + 1] then
        out[n + j + 1] = redis.call('GET', prefix .. struct.unpack('<I4', ids, 4 * j + 1))
      end
    end
  end
end
return out
"""


class Store:
    """Model registry and vector keys on a ``redis.Redis`` or ``redis.RedisCluster``.

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
        # reads go out on raw per-thread connections (see vecserve.store.wire)
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

    # -- connecting ---------------------------------------------------------------------

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

    def ping(self) -> bool:
        with self.errors("PING"):
            return bool(self.client.ping())

    def errors(self, what: str):
        """Context manager: redis-py errors inside become StoreUnavailable naming ``what``."""
        return translate_errors(self.url, what)

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

    # -- key names ----------------------------------------------------------------------

    @staticmethod
    def vector_keys(prefix: str, tokens: Sequence[str], buckets: int = 0) -> list[bytes]:
        """Key names of ``tokens`` in the generation with this prefix.

        >>> Store.vector_keys("M", ["car", "λ"])
        [b'M:car', b'M:\\xce\\xbb']
        >>> Store.vector_keys("M", ["car"], buckets=128)
        [b'M:{29}:car']
        """
        return vector_keys(prefix, encode_tokens(tokens), buckets)

    # -- reading the registry -----------------------------------------------------------

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
        return ModelInfo.from_json(raw)

    def list_loads(self) -> list[LoadState]:
        """Unfinished (running or interrupted) loads."""
        with self.errors("listing loads"):
            raw = self.client.hgetall(LOADS)
        return sorted((LoadState.from_json(v) for v in raw.values()), key=lambda s: s.name)

    def get_load(self, name: str) -> LoadState | None:
        with self.errors(f"reading load state of {name!r}"):
            raw = self.client.hget(LOADS, name)
        return LoadState.from_json(raw) if raw is not None else None

    def lock_holder(self, name: str) -> str | None:
        with self.errors("reading lock"):
            raw = self.client.get(lock_key(name))
        return raw.decode() if raw is not None else None

    # -- reading vectors ----------------------------------------------------------------

    def fetch(self, model: ModelInfo, tokens: Sequence[str]) -> list[bytes | None]:
        """Raw stored values of ``tokens`` (``None`` where missing), one round trip per node.

        No generation check: for inspecting storage. Readers use :meth:`read_rows`.
        """
        if not tokens:
            return []
        keys = self.vector_keys(model.prefix, tokens, model.buckets)
        return self.run(self._mget_steps(keys, f"reading {len(keys)} vectors of {model.name!r}"))

    def registry_entry(self, name: str) -> bytes | None:
        """The raw registry JSON of ``name`` (None if not committed); cheap change check."""
        return self.run(self.registry_entry_steps(name))

    def registry_entry_steps(self, name: str) -> Steps[bytes | None]:
        """:meth:`registry_entry` as steps (:mod:`vecserve.store.wire`)."""
        (raw,) = yield Round([("HGET", MODELS, name)], f"reading model {name!r}")
        return raw

    def model_from_entry(self, name: str, raw: bytes | None) -> ModelInfo:
        """The :class:`ModelInfo` of a raw registry entry (parsed once per distinct entry)."""
        if raw is None:
            self._entries.pop(name, None)
            raise ModelNotFound(name)
        hit = self._entries.get(name)
        if hit is not None and hit[0] == raw:
            return hit[1]
        info = ModelInfo.from_json(raw)
        self._entries[name] = (raw, info)
        return info

    def read_rows(self, model: ModelInfo, tokens: Sequence[str], **options):
        """``(info, rows, found)``: float32 rows of ``tokens``, all of ONE generation
        (:meth:`read_rows_steps`, driven on this store's connections)."""
        return self.run(self.read_rows_steps(model, tokens, **options))

    def read_rows_steps(
        self,
        model: ModelInfo,
        tokens: Sequence[str],
        *,
        follow: bool = True,
        attempts: int = 5,
        ngrams: np.ndarray | None = None,
        needs: tuple[np.ndarray, np.ndarray] | None = None,
        pinned: bool = False,
    ) -> Steps[tuple[ModelInfo, np.ndarray, np.ndarray]]:
        """``(info, rows, found)``: float32 rows of ``tokens``, all of ONE generation.

        The one read of rows every reader uses (RedisKeyedVectors, the service, ``vecserve
        get``, the similarity snapshot). The MGET and a read of the model's registry entry
        travel together (one pipelined round trip on a single server; on a cluster the
        entry is read right after the MGETs), and the rows are returned only when the
        entry, read after them, still names the generation they were read from: as
        generations never repeat, that generation was live for the whole read, even when
        a later generation reuses its key prefix. ``info`` is that generation's entry.

        When a re-load committed meanwhile, ``follow=True`` reads again from the new
        generation (at most ``attempts`` times, else :class:`GenerationChanged`);
        ``follow=False`` raises :class:`GenerationChanged` at once. A model deleted
        meanwhile raises :class:`ModelNotFound`. Missing words are zero rows.

        ``ngrams`` (fastText models): n-gram bucket numbers whose rows are read in the
        same MGET; they come after the tokens' rows in ``rows`` and ``found``. A new
        generation with other n-gram settings raises :class:`GenerationChanged` (the
        caller computes the buckets again).

        A missing word that IS in the generation's vocabulary (its key was evicted or
        deleted) raises :class:`ModelDamaged`, never passes for an unknown word: the
        generation's vocabulary hashes (`vocab_hashes`: one more round trip, on the
        first miss of a generation only) tell the two apart. The common path, every word
        found, costs nothing more. A generation committed before the hashes existed
        cannot tell: its misses are unknown words. With ``needs = (positions, bounds)`` (token
        i's buckets are ``ngrams[positions[bounds[i]:bounds[i + 1]]]``), buckets are read
        only for tokens that are missing (`SUBWORD_READ`, one server-side script on a
        single server); the others' come back not found.

        ``pinned=True``: ``model`` is a generation the caller holds a pin on (see
        :mod:`vecserve.reader`); its rows are read without the registry entry and never
        followed to another generation.
        """
        extra = _NO_IDS if ngrams is None else np.asarray(ngrams, np.int64)
        if pinned:
            ids = extra if model.ngram_buckets or not len(extra) else _NO_IDS
            values = yield from self._fetch_steps(model, tokens, ids, needs)
            rows, found = yield from _decode_steps(model, values, _Names(tokens, ids))
            if len(tokens) and not found[: len(tokens)].all():
                yield from self._damage_steps(model, tokens, found[: len(tokens)])
            return model, rows, found
        for _ in range(attempts):
            ids = extra if model.ngram_buckets or not len(extra) else _NO_IDS
            rnd = (yield from self.plain_round_steps(model, tokens)) if not len(ids) else None
            if rnd is not None:  # the common read: words only, one server
                replies = yield rnd
                got = yield from self.plain_rows_steps(model, tokens, replies)
                if got is not None:
                    if not got[2].all():
                        yield from self._damage_steps(model, tokens, got[2])
                    return got
                current = self.model_from_entry(model.name, replies[1])
            else:
                if not tokens and not len(ids):
                    values: list[bytes | None] = []
                    raw = yield from self.registry_entry_steps(model.name)
                else:
                    values, raw = yield from self._fetch_with_entry_steps(model, tokens, ids, needs)
                current = self.model_from_entry(model.name, raw)
                if current.generation == model.generation and current.prefix == model.prefix:
                    rows, found = yield from _decode_steps(model, values, _Names(tokens, ids))
                    if len(tokens) and not found[: len(tokens)].all():
                        yield from self._damage_steps(model, tokens, found[: len(tokens)])
                    return model, rows, found
            settings = (current.min_n, current.max_n, current.ngram_buckets)
            if not follow or (
                len(extra) and settings != (model.min_n, model.max_n, model.ngram_buckets)
            ):
                break  # n-gram buckets are the caller's to compute again
            model = current
        raise GenerationChanged(
            f"model {model.name!r} changed generation while it was being read; retry"
        )

    def plain_round_steps(self, model: ModelInfo, tokens: Sequence[str]) -> Steps[Round | None]:
        """The one round trip of a plain read of ``tokens`` (their MGET and the model's
        registry entry, pipelined) on a single server; None where a read needs more (a
        cluster, no tokens). :meth:`plain_rows_steps` reads its replies. The hot path of
        :meth:`read_rows_steps` (a step only to :data:`PAUSE` between chunks of the keys
        of a big batch)."""
        if self.is_cluster or not tokens:
            return None
        entry = self._entry_requests.get(model.name)
        if entry is None:
            entry = self._entry_requests[model.name] = packed("HGET", MODELS, model.name)
        if len(tokens) <= DECODE_CHUNK:
            keys = vector_keys(model.prefix, encode_tokens(tokens), model.buckets)
        else:
            keys = []
            for i in range(0, len(tokens), DECODE_CHUNK):
                if i:
                    yield PAUSE
                part = encode_tokens(tokens[i : i + DECODE_CHUNK])
                keys += vector_keys(model.prefix, part, model.buckets)
        return Round([("MGET", *keys), entry], f"reading {len(keys)} vectors of {model.name!r}")

    def single_get(self, model: ModelInfo) -> CheckedGet | None:
        """The one-word read of generation ``model`` as one hand-written request
        (:class:`~vecserve.store.wire.CheckedGet`: the GET of the word's key and the HGET
        of the model's registry entry, pipelined; the row counts only when the entry, read
        after it, is still ``model``'s), or None where a read needs more (a cluster,
        hash-tag buckets, n-grams, an entry this store did not parse). The hot path of
        ``kv[word]``: made once per generation; a None from its ``get`` leaves the
        answer to :meth:`read_rows_steps` (a missing word, damage, a reload)."""
        plan = self._singles.get(model.name)
        if plan is not None and plan[0] is model:
            return plan[1]
        hit = self._entries.get(model.name)
        if self.is_cluster or model.buckets or model.subwords or hit is None or hit[1] is not model:
            return None
        codec = model.codec_obj
        decode = None
        if codec.name != "f32":

            def decode(value: bytes) -> np.ndarray:
                row = codec.decode(value, 1, model.dim)[0]
                row.setflags(write=False)
                return row

        single = CheckedGet(
            self._connections,
            model.key_prefix,
            packed("HGET", MODELS, model.name),
            hit[0],  # the raw entry: the reply that proves the row is of this generation
            nbytes=codec.nbytes(model.dim),
            dtype=_F4,
            decode=decode,
        )
        self._singles[model.name] = (model, single)
        return single

    def plain_rows_steps(
        self, model: ModelInfo, tokens: Sequence[str], replies: list
    ) -> Steps[tuple[ModelInfo, np.ndarray, np.ndarray] | None]:
        """``(model, rows, found)`` from the replies of :meth:`plain_round_steps`, or None when
        the entry read after the rows names another generation (read again). A model
        deleted meanwhile raises ModelNotFound."""
        values, raw = replies
        hit = self._entries.get(model.name)
        if hit is None or hit[0] != raw:
            current = self.model_from_entry(model.name, raw)
            if current.generation != model.generation or current.prefix != model.prefix:
                return None
        elif hit[1].generation != model.generation or hit[1].prefix != model.prefix:
            return None
        rows, found = yield from _decode_steps(model, values, tokens)
        return model, rows, found

    def read_rows_subwords(
        self, model: ModelInfo, tokens: Sequence[str]
    ) -> tuple[ModelInfo, np.ndarray, np.ndarray]:
        """``(info, rows, in_vocab)`` of a fastText model (:meth:`read_rows_subwords_steps`)."""
        return self.run(self.read_rows_subwords_steps(model, tokens))

    def read_rows_subwords_steps(
        self, model: ModelInfo, tokens: Sequence[str], *, pinned: bool = False
    ) -> Steps[tuple[ModelInfo, np.ndarray, np.ndarray]]:
        """``(info, rows, in_vocab)`` of a fastText model: a row for every token.

        An in-vocabulary word's row is its stored vector; any other word's is gensim's
        ``FastTextKeyedVectors`` vector: the float32 mean of its n-grams' bucket rows
        (zeros when it has none). One round trip with the registry entry (`read_rows`):
        the generation's vocabulary hashes (`vocab_hashes`, read once per generation)
        say which words are missing, so only their n-grams are hashed and fetched, in
        the MGET of the words. A word the hashes call present whose row is missing is a
        lost row: :class:`ModelDamaged`, never an n-gram vector (an unknown word whose
        64-bit hash equals a known one's, ~1e-13 a word at 2M words, reads as damage
        too). Generations without the hashes (loaded before they existed) read
        with `SUBWORD_READ`, or the buckets of every word. A model without n-gram
        buckets: `read_rows`. ``pinned``: as in :meth:`read_rows_steps`.
        """
        for attempt in range(2):
            if not model.subwords:
                return (yield from self.read_rows_steps(model, tokens, pinned=pinned))
            try:
                known = yield from self.vocab_hashes_steps(model)
                if known is None:
                    return (yield from self._read_rows_subwords_all(model, tokens, pinned))
                return (yield from self._read_rows_subwords_known(model, tokens, known, pinned))
            except GenerationChanged:  # a new generation with other n-gram settings
                if attempt:
                    raise
                raw = yield from self.registry_entry_steps(model.name)
                model = self.model_from_entry(model.name, raw)
        raise AssertionError("unreachable")

    def vocab_hashes(self, model: ModelInfo) -> np.ndarray | None:
        """The sorted word hashes of a generation (None if committed before every
        generation had them; ModelDamaged if they were written and are gone), read once per
        generation and kept (8 bytes a word)."""
        return self.run(self.vocab_hashes_steps(model))

    def vocab_hashes_steps(self, model: ModelInfo) -> Steps[np.ndarray | None]:
        """:meth:`vocab_hashes` as steps: no round trip once the generation's are known."""
        gen = (model.prefix, model.generation)
        hit = self._vocab_hashes.get(gen, False)
        if hit is not False:
            return hit
        (raw,) = yield Round(
            [("GET", vocab_hashes_key(model.prefix))],
            f"reading the vocabulary hashes of {model.name!r}",
        )
        if raw is None and model.word_hashes:  # written at its commit, gone since
            raise ModelDamaged(
                model.name,
                model.generation,
                [],
                0,
                what="its vocabulary's word hashes are gone from Redis (evicted, lost in a "
                "failover, or deleted by hand), so lost rows cannot be told from unknown words",
            )
        # a view of the reply where uint64 is little-endian: 8 bytes a word, no copy
        known = None if raw is None else np.frombuffer(raw, "<u8").astype(np.uint64, copy=False)
        if len(self._vocab_hashes) >= 8:  # old generations' sets go (threads may race)
            self._vocab_hashes.pop(next(iter(self._vocab_hashes), None), None)
        self._vocab_hashes[gen] = known
        return known

    def _damage_steps(
        self, model: ModelInfo, tokens: Sequence[str], found: np.ndarray
    ) -> Steps[None]:
        """ModelDamaged if a word of ``tokens`` not ``found`` is in the vocabulary."""
        known = yield from self.vocab_hashes_steps(model)
        if known is None:
            return
        absent = np.flatnonzero(~found)
        words = [tokens[i] for i in absent.tolist()]
        lost = in_vocabulary(known, encode_tokens(words))
        if lost.any():
            raise ModelDamaged(
                model.name,
                model.generation,
                [w for w, x in zip(words, lost.tolist(), strict=True) if x],
                asked=len(tokens),
            )

    def check_rows(
        self,
        model: ModelInfo,
        *,
        ngrams: bool = True,
        hashes: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> RowCheck:
        """Whether every row of a generation has its key: ``model.count`` words (and, with
        ``ngrams``, a fastText model's n-gram bucket rows).

        The vocabulary is read 64 blobs (~100k words) at a time, and each group's keys are
        asked in one multi-key ``EXISTS`` (per hash tag on a cluster): the server counts,
        no value travels. On a single server the command is built from the blobs with
        array operations (no Python work per key) and sent before the previous group's
        count is read, so client and server work at once. A group with keys missing is
        asked key by key, for a few of its words. ``hashes``: also the vocabulary's sorted
        word hashes (``RowCheck.hashes``, what the commit stores); ``progress(done,
        total)`` after every group.
        """
        total = model.count + (model.ngram_buckets if ngrams else 0)
        found = {"missing": 0, "done": 0, "listed": 0}
        words: list[str] = []
        parts: list[np.ndarray] = []
        lost: list[str] = []

        def tally(blobs: list[bytes], lens: np.ndarray, present: int) -> None:
            if present < len(lens):
                found["missing"] += len(lens) - present
                if len(words) < 5:
                    words.extend(self._missing_words(model, blobs, 5 - len(words)))
            found["done"] += len(lens)
            if progress is not None:
                progress(found["done"], total)

        with self.errors(f"checking the rows of {model.name!r}"):
            groups = self._vocab_groups(model, lost, found)
            if self.is_cluster or model.buckets:
                for blobs, lens, buf in groups:
                    if hashes:
                        parts.append(flat_word_hashes(buf, lens))
                    keys = vector_keys(
                        model.prefix, [t for b in blobs for t in unpack_vocab(b)], model.buckets
                    )
                    tally(blobs, lens, len(keys) - self._count_missing(keys))
            else:
                self._exists_overlapped(model, groups, tally, parts if hashes else None)
            if ngrams and not (self.is_cluster or model.buckets):

                def tally_ngrams(_, lens: np.ndarray, present: int) -> None:
                    found["missing"] += len(lens) - present
                    found["done"] += len(lens)
                    if progress is not None:
                        progress(found["done"], total)

                groups = _ngram_groups(model.ngram_buckets)
                self._exists_overlapped(model, groups, tally_ngrams, None, sep=b"#")
            elif ngrams:
                for lo in range(0, model.ngram_buckets, 100_000):
                    ids = np.arange(lo, min(model.ngram_buckets, lo + 100_000))
                    found["missing"] += self._count_missing(
                        ngram_keys(model.prefix, ids, model.buckets)
                    )
                    found["done"] += len(ids)
                    if progress is not None:
                        progress(found["done"], total)
        known = None
        if hashes:  # sorted, unique (np.unique hashes uint64 slowly: ~6 us a word)
            known = np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)
            known = (
                known[np.concatenate(([True], known[1:] != known[:-1]))] if len(known) else known
            )
        return RowCheck(
            checked=found["done"],
            missing=found["missing"],
            words=words,
            hashes=known,
            lost=tuple(lost),
            unlisted=max(0, model.count - found["listed"]),  # rows no vocabulary names now
        )

    def _vocab_groups(
        self, model: ModelInfo, lost: list[str], found: dict[str, int], *, per: int = 64
    ) -> Iterator[tuple[list[bytes], np.ndarray, np.ndarray]]:
        """``(blobs, lengths, bytes)``: the vocabulary blobs holding the first
        ``model.count`` tokens, ``per`` at a time (a load's count ends at a blob's end),
        with their tokens' lengths and bytes joined.

        All the blobs are read first (~13 bytes a word), in one pipeline: a read between
        two groups would queue behind the server's work on the last group's keys, and
        the client would build the next group while the server idles. Nothing is taken
        on trust: a vocabulary (or its index of blob sizes) that is gone, or lists fewer
        words than the model has, is said in ``lost``; ``found["listed"]`` counts the
        words the blobs read hold."""
        pipe = self.client.pipeline(transaction=False)
        pipe.get(vocab_sizes_key(model.prefix))
        pipe.llen(vocab_key(model.prefix))
        raw, held = pipe.execute()
        sizes = np.frombuffer(raw or b"", "<u4")
        if raw is None and model.count:
            lost.append("its vocabulary's index of blob sizes")
            last = int(held)  # the blobs themselves still say what they hold
        else:
            ends = np.cumsum(sizes, dtype=np.int64)
            last = int(np.searchsorted(ends, model.count, side="left")) + 1 if model.count else 0
            last = min(last, len(sizes))
        pipe = self.client.pipeline(transaction=False)
        for lo in range(0, last, 256):
            pipe.lrange(vocab_key(model.prefix), lo, min(lo + 256, last) - 1)
        every = [b for part in pipe.execute() for b in part] if last else []
        for lo in range(0, len(every), per):
            blobs = every[lo : lo + per]
            split = [vocab_parts(b) for b in blobs]
            lens = np.concatenate([p[0] for p in split])
            found["listed"] += len(lens)
            yield blobs, lens, np.concatenate([p[1] for p in split])
        if found["listed"] < model.count:
            lost.append(f"its vocabulary ({found['listed']:,} of its {model.count:,} words listed)")

    def lost_metadata(self, model: ModelInfo) -> list[str]:
        """What of a committed generation's metadata beside its vocabulary is gone, as
        phrases: its word hashes (every generation committed since they exist has them)
        and its counts. One round trip; :meth:`check_rows` checks the vocabulary."""
        asked = []
        pipe = self.client.pipeline(transaction=False)
        if model.word_hashes:
            asked.append(("its vocabulary's word hashes", 8))
            pipe.strlen(vocab_hashes_key(model.prefix))
        if model.has_counts:
            asked.append(("its word counts", 8))
            pipe.strlen(model.counts_key)
        if not asked:
            return []
        with self.errors(f"checking the metadata of {model.name!r}"):
            lengths = pipe.execute()
        out = []
        for (what, _), n in zip(asked, lengths, strict=True):
            if not int(n) and model.count:
                out.append(what)
        return out

    def remains(self, name: str) -> dict[str, list[str]]:
        """``{prefix: [what]}``: keys of generations of ``name`` that nothing accounts
        for -- neither its registry entry, nor its history (retired generations), the
        trash, or an unfinished load. Keys left when a registry entry is gone (evicted,
        lost in a failover, deleted by hand) are damage, not an unknown model.

        One ``SCAN`` of the metadata keys, then (when none is found) one of the row keys
        that stops at the first: O(keys in the database) on the server, for
        ``vecserve models check`` of a model with no registry entry only."""
        validate_model_name(name)
        with self.errors(f"looking for what remains of {name!r}"):
            accounted = self._accounted(name)
            out: dict[str, list[str]] = {}
            for prefix, what in self._metadata_traces():
                if _of_model(prefix, name) and prefix not in accounted:
                    out.setdefault(prefix, []).append(what)
            if not out:
                for pattern in model_key_patterns(name)[:3]:  # rows: the first found will do
                    for key in self.client.scan_iter(match=pattern, count=10_000):
                        prefix = key.decode("utf-8", "replace").split(":")[0].split("#")[0]
                        if prefix not in accounted:
                            out.setdefault(prefix, []).append("rows")
                            break
        return {p: sorted(set(w)) for p, w in sorted(out.items())}

    def orphans(self) -> dict[str, dict[str, list[str]]]:
        """``{model: {prefix: [what]}}`` for every model with generation metadata that
        nothing accounts for (see :meth:`remains`): models whose registry entry is gone,
        which a listing of the registry alone would not show. One ``SCAN`` of the
        metadata keys; rows are not scanned."""
        with self.errors("looking for models without a registry entry"):
            found: dict[str, dict[str, list[str]]] = {}
            for prefix, what in self._metadata_traces():
                found.setdefault(prefix.split("~")[0], {}).setdefault(prefix, []).append(what)
            out = {}
            for name, prefixes in sorted(found.items()):
                accounted = self._accounted(name)
                left = {p: sorted(w) for p, w in sorted(prefixes.items()) if p not in accounted}
                if left:
                    out[name] = left
        return out

    def _accounted(self, name: str) -> set[str]:
        """The generation prefixes of ``name`` something accounts for: its registry
        entry, its unfinished load, its history, the trash."""
        from .pins import _read_history

        accounted = {p.decode() for p in self.client.smembers(TRASH)}
        raw = self.client.hget(MODELS, name)
        if raw is not None:
            accounted.add(ModelInfo.from_json(raw).prefix)
        load = self.client.hget(LOADS, name)
        if load is not None:
            accounted.add(LoadState.from_json(load).prefix)
        retired, _ = _read_history(self, name)
        return accounted | {info.prefix for _, info in retired.values()}

    def _metadata_traces(self) -> Iterator[tuple[str, str]]:
        """``(prefix, what)`` for every generation metadata key in the database."""
        kinds = {
            vocab_key(""): "vocabulary",
            vocab_sizes_key(""): "vocabulary sizes",
            vocab_hashes_key(""): "word hashes",
            counts_key(""): "counts",
            ngrams_key(""): "n-gram settings",
        }
        for key in self.client.scan_iter(match=f"{NS}:*", count=10_000):
            key = key.decode("utf-8", "replace")
            for head, what in kinds.items():
                if key.startswith(head):
                    yield key[len(head) :], what

    def _exists_overlapped(self, model, groups, tally, parts, *, sep: bytes = b":") -> None:
        """A single server: each group's EXISTS sent before the last one's count is read."""
        pool = self.client.connection_pool
        conn = pool.get_connection()
        try:
            pending = None
            for blobs, lens, buf in groups:
                request = resp_exists(model.prefix, lens, buf, sep=sep)
                conn.send_packed_command([request], check_health=False)
                if parts is not None:
                    parts.append(flat_word_hashes(buf, lens))
                if pending is not None:
                    tally(*pending, int(conn.read_response()))
                pending = (blobs, lens)
            if pending is not None:
                tally(*pending, int(conn.read_response()))
        except BaseException:
            conn.disconnect()  # replies may be pending: never reuse this connection
            raise
        finally:
            pool.release(conn)

    def _missing_words(self, model: ModelInfo, blobs: list[bytes], limit: int) -> list[str]:
        """Up to ``limit`` words of ``blobs`` whose keys are missing."""
        out: list[bytes] = []
        for blob in blobs:
            raw = unpack_vocab(blob)
            keys = vector_keys(model.prefix, raw, model.buckets)
            if self._count_missing(keys):
                out += [raw[i] for i in self._which_missing(keys)]
                if len(out) >= limit:
                    break
        return decode_tokens(out[:limit])

    def record_check(self, model: ModelInfo, check: RowCheck) -> dict:
        """Keep ``check`` as the last check of ``model`` (``vecserve models info``)."""
        record = {
            "generation": model.generation,
            "checked_at": time.time(),
            "rows": check.checked,
            "missing": check.missing,
            "words": check.words,
            "lost": list(check.lost),
        }
        with self.errors(f"recording the check of {model.name!r}"):
            self.client.hset(CHECKS, model.name, json.dumps(record))
        return record

    def last_check(self, name: str) -> dict | None:
        """The last recorded check of model ``name`` (None if never checked)."""
        with self.errors(f"reading the last check of {name!r}"):
            raw = self.client.hget(CHECKS, name)
        return None if raw is None else json.loads(raw)

    def _count_missing(self, keys: list[bytes]) -> int:
        pipe = self.client.pipeline(transaction=False)
        groups = group_by_tag(keys) if self.is_cluster else [range(len(keys))]
        for idx in groups:
            for lo in range(0, len(idx), 10_000):  # bounded commands: no huge query buffer
                pipe.execute_command("EXISTS", *[keys[i] for i in idx[lo : lo + 10_000]])
        return len(keys) - sum(int(n) for n in pipe.execute())

    def missing_keys(self, keys: list[bytes]) -> list[bytes]:
        """Those of ``keys`` not in Redis: one multi-key EXISTS on a single server (none
        or all gone, the usual answers, need no more), else one EXISTS a key, pipelined."""
        with self.errors("asking which keys are gone"):
            if not self.is_cluster:
                present = sum(int(n) for n in self._exists_counts(keys))
                if present in (0, len(keys)):
                    return list(keys) if not present else []
            return [keys[i] for i in self._which_missing(keys)]

    def _exists_counts(self, keys: list[bytes]) -> list:
        pipe = self.client.pipeline(transaction=False)
        for lo in range(0, len(keys), 10_000):
            pipe.execute_command("EXISTS", *keys[lo : lo + 10_000])
        return pipe.execute()

    def _which_missing(self, keys: list[bytes]) -> list[int]:
        pipe = self.client.pipeline(transaction=False)
        for k in keys:
            pipe.execute_command("EXISTS", k)
        return [i for i, n in enumerate(pipe.execute()) if not int(n)]

    def _read_rows_subwords_known(
        self, model: ModelInfo, tokens: Sequence[str], known: np.ndarray, pinned: bool
    ) -> Steps[tuple[ModelInfo, np.ndarray, np.ndarray]]:
        absent = np.flatnonzero(~in_vocabulary(known, encode_tokens(tokens)))
        flat, bounds = ngram_buckets_flat(
            [tokens[i] for i in absent], model.min_n, model.max_n, model.ngram_buckets
        )
        uniq, inverse = np.unique(flat, return_inverse=True)
        got, rows, found = yield from self.read_rows_steps(
            model, tokens, ngrams=uniq, pinned=pinned
        )
        n = len(tokens)
        mat, in_vocab = rows[:n], found[:n]
        own = {i: inverse[bounds[k] : bounds[k + 1]] for k, i in enumerate(absent.tolist())}
        oov = np.flatnonzero(~in_vocab)
        if not len(oov):
            return got, mat, in_vocab
        # every missing word is one the hashes call absent: a present word whose row is
        # missing raised ModelDamaged in read_rows, never gets an n-gram vector
        if any(i not in own for i in oov.tolist()):  # the read followed a re-load
            return (yield from self.read_rows_subwords_steps(got, tokens, pinned=pinned))
        mat = np.array(mat, copy=True)
        mat[oov] = compose(None, [own[i] for i in oov.tolist()], rows[n:])
        return got, mat, in_vocab

    def _read_rows_subwords_all(
        self, model: ModelInfo, tokens: Sequence[str], pinned: bool
    ) -> Steps[tuple[ModelInfo, np.ndarray, np.ndarray]]:
        """Every word's n-grams hashed; only the missing words' buckets read
        (`SUBWORD_READ`) where the server runs it, else all of them."""
        flat, bounds = ngram_buckets_flat(tokens, model.min_n, model.max_n, model.ngram_buckets)
        uniq, inverse = np.unique(flat, return_inverse=True)
        got, rows, found = yield from self.read_rows_steps(
            model, tokens, ngrams=uniq, needs=(inverse, bounds), pinned=pinned
        )
        n = len(tokens)
        mat, in_vocab = rows[:n], found[:n]
        oov = np.flatnonzero(~in_vocab)
        if len(oov):
            mat = np.array(mat, copy=True)
            own = [inverse[bounds[i] : bounds[i + 1]] for i in oov.tolist()]
            mat[oov] = compose(None, own, rows[n:])
        return got, mat, in_vocab

    def _fetch_steps(
        self,
        model: ModelInfo,
        tokens: Sequence[str],
        ngrams: np.ndarray,
        needs: tuple[np.ndarray, np.ndarray] | None,
    ) -> Steps[list[bytes | None]]:
        """The values of ``tokens`` (and n-gram rows ``ngrams``) without the registry entry."""
        keys = self.vector_keys(model.prefix, tokens, model.buckets)
        if len(ngrams):
            if needs is not None and self.subword_script and not model.buckets:
                got = yield from self._fetch_subwords(model, keys, ngrams, needs, entry=False)
                if got is not None:
                    return got[0]
            keys += ngram_keys(model.prefix, ngrams, model.buckets)
        return (yield from self._mget_steps(keys, f"reading {len(keys)} vectors of {model.name!r}"))

    def _fetch_with_entry_steps(
        self,
        model: ModelInfo,
        tokens: Sequence[str],
        ngrams: np.ndarray | None = None,
        needs: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> Steps[tuple[list[bytes | None], bytes | None]]:
        keys = self.vector_keys(model.prefix, tokens, model.buckets)
        if ngrams is not None and len(ngrams):
            if needs is not None and self.subword_script and not model.buckets:
                got = yield from self._fetch_subwords(model, keys, ngrams, needs)
                if got is not None:
                    return got
            keys += ngram_keys(model.prefix, ngrams, model.buckets)
        what = f"reading {len(keys)} vectors of {model.name!r}"
        if self.is_cluster:
            values = yield from self._mget_steps(keys, what)
            return values, (yield from self.registry_entry_steps(model.name))
        entry = self._entry_requests.get(model.name)
        if entry is None:
            entry = self._entry_requests[model.name] = packed("HGET", MODELS, model.name)
        values, raw = yield Round([("MGET", *keys), entry], what)
        return values, raw

    def _fetch_subwords(
        self,
        model: ModelInfo,
        keys: list[bytes],
        ngrams: np.ndarray,
        needs: tuple[np.ndarray, np.ndarray],
        *,
        entry: bool = True,
    ) -> Steps[tuple[list[bytes | None], bytes | None] | None]:
        """`SUBWORD_READ` and (``entry``) the registry entry in one round trip; None if
        the server refused the script."""
        positions, bounds = needs
        args = [
            ngram_keys(model.prefix, [0])[0][:-1],  # the bucket keys' prefix
            np.asarray(ngrams, "<u4").tobytes(),
            np.asarray(positions, "<u4").tobytes(),
            np.asarray(bounds, "<u4").tobytes(),
        ]
        commands = [("EVAL_RO", SUBWORD_READ, len(keys), *keys, *args)]
        if entry:
            commands.append(("HGET", MODELS, model.name))
        what = f"reading {len(keys)} words and their n-grams of {model.name!r}"
        replies = yield Round(commands, what, tolerate=True)
        values = replies[0]
        if isinstance(values, redis.ResponseError):
            msg = str(values).lower()
            if "eval_ro" not in msg and "unknown command" not in msg:
                with self.errors(what):
                    raise values
            self.subword_script = False  # Redis < 7 or an ACL without it: MGET all
            return None
        raw = replies[1] if entry else None
        if isinstance(raw, redis.ResponseError):
            with self.errors(what):
                raise raw
        return values, raw

    def _mget_steps(self, keys: list[bytes], what: str) -> Steps[list[bytes | None]]:
        """One MGET; on a cluster one per hash tag (a slot each), in one round."""
        if not self.is_cluster:
            (values,) = yield Round([("MGET", *keys)], what)
            return values
        order = group_by_tag(keys)
        replies = yield Round([("MGET", *[keys[i] for i in idx]) for idx in order], what)
        out: list[bytes | None] = [None] * len(keys)
        for idx, values in zip(order, replies, strict=True):
            for i, v in zip(idx, values, strict=True):
                out[i] = v
        return out

    def vocab(self, model: ModelInfo, start: int = 0, stop: int | None = None) -> list[str]:
        """Tokens ``start:stop`` in model order (only the blobs that hold them are read)."""
        return self.run(self.vocab_steps(model, start, stop))

    def vocab_steps(
        self, model: ModelInfo, start: int = 0, stop: int | None = None
    ) -> Steps[list[str]]:
        """:meth:`vocab` as steps."""
        stop = model.count if stop is None else min(stop, model.count)
        if start >= stop:
            return []
        what = f"reading the vocabulary of {model.name!r}"
        (sizes,) = yield Round([("GET", vocab_sizes_key(model.prefix))], what)
        if sizes is None:
            raise _vocabulary_gone(model, "its index of blob sizes")
        sizes = np.frombuffer(sizes, dtype="<u4")
        bounds = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))
        first = int(np.searchsorted(bounds, start, side="right")) - 1
        last = int(np.searchsorted(bounds, stop, side="left"))
        raw: list[bytes] = []
        for lo in range(first, last, 64):  # 64 blobs (~100k tokens) per LRANGE
            (blobs,) = yield Round(
                [("LRANGE", vocab_key(model.prefix), lo, min(lo + 64, last) - 1)], what
            )
            if len(blobs) < min(lo + 64, last) - lo:
                raise _vocabulary_gone(model, f"blobs {lo + len(blobs)} to {last - 1}")
            for blob in blobs:
                raw.extend(unpack_vocab(blob))
        skip = start - int(bounds[first])
        return decode_tokens(raw[skip : skip + stop - start])

    def iter_vocab(self, model: ModelInfo, *, chunk: int = 100_000) -> Iterator[list[str]]:
        """The vocabulary in chunks, for bounded-memory scans of big models."""
        for lo in range(0, model.count, chunk):
            yield self.vocab(model, lo, lo + chunk)

    def counts(self, model: ModelInfo) -> np.ndarray | None:
        """Per-token counts in vocab order, or None if the source had none."""
        return self.run(self.counts_steps(model))

    def counts_steps(self, model: ModelInfo) -> Steps[np.ndarray | None]:
        """:meth:`counts` as steps."""
        if not model.has_counts:
            return None
        (raw,) = yield Round([("GET", model.counts_key)], f"reading counts of {model.name!r}")
        if raw is None and model.count:
            raise ModelDamaged(
                model.name,
                model.generation,
                [],
                0,
                what="its word counts are gone from Redis (evicted, lost in a failover, or "
                "deleted by hand)",
            )
        return np.frombuffer(raw or b"", dtype="<i8").astype(np.int64)

    def text_blob_steps(self, model: ModelInfo) -> Steps[bytes]:
        """The generation's text blob (:func:`~.layout.text_key`; b"" if none), one GET."""
        (raw,) = yield Round(
            [("GET", text_key(model.prefix))], f"reading the tokenizer of {model.name!r}"
        )
        return raw or b""

    # -- deleting -----------------------------------------------------------------------

    def delete_model(self, name: str) -> ModelInfo:
        """Unregister ``name`` (readers stop seeing it at once), then delete its keys."""
        info = self.get_model(name)
        with self.errors(f"deleting {name!r}"):
            self.client.sadd(TRASH, info.prefix)
            self.client.hdel(MODELS, name)
            self.client.hdel(CHECKS, name)
            self.client.publish(EVENTS, json.dumps({"event": "delete", "model": name}))
        self.delete_generation(info.prefix, info.buckets)
        return info

    def purge_trash(self, name: str) -> None:
        """Finish deleting the leftover generations of ``name`` named in the trash set."""
        with self.errors("reading trash"):
            trash = [p.decode() for p in self.client.smembers(TRASH)]
        for prefix in trash:
            if prefix == name or prefix.startswith(f"{name}~"):
                self.delete_generation(prefix, self.default_buckets)

    def delete_generation(self, prefix: str, buckets: int, *, blobs: int = 8) -> int:
        """Delete every key of a generation (its vocabulary names them) and its metadata."""
        vkey = vocab_key(prefix)
        deleted = 0
        with self.errors(f"deleting generation {prefix!r}"):
            while True:
                # Pop from the tail so an interrupted delete can simply be run again.
                chunk = self.client.lrange(vkey, -blobs, -1)
                if not chunk:
                    break
                deleted += self.unlink_vocab_blobs(prefix, chunk, buckets)
                self.client.ltrim(vkey, 0, -len(chunk) - 1)
            nkey = ngrams_key(prefix)
            n = int(self.client.get(nkey) or 0)
            for lo in range(0, n, 10_000):  # fastText n-gram rows
                self._unlink(ngram_keys(prefix, np.arange(lo, min(n, lo + 10_000)), buckets))
                deleted += min(n, lo + 10_000) - lo
            for key in (
                vkey,
                vocab_sizes_key(prefix),
                counts_key(prefix),
                nkey,
                vocab_hashes_key(prefix),
                text_key(prefix),
            ):
                self.client.delete(key)  # one by one: they live in different cluster slots
            self.client.srem(TRASH, prefix)
        return deleted

    def unlink_vocab_blobs(self, prefix: str, blobs: Sequence[bytes], buckets: int) -> int:
        """Delete the vector keys of the tokens in vocabulary ``blobs``; return how many."""
        raw = [t for blob in blobs for t in unpack_vocab(blob)]
        self._unlink(vector_keys(prefix, raw, buckets))
        return len(raw)

    def _unlink(self, keys: list[bytes]) -> None:
        if not keys:
            return
        if not self.is_cluster:
            self.client.unlink(*keys)
            return
        pipe = self.client.pipeline(transaction=False)
        for idx in group_by_tag(keys):
            pipe.execute_command("UNLINK", *[keys[i] for i in idx])
        pipe.execute()


def _vocabulary_gone(model: ModelInfo, part: str) -> ModelDamaged:
    return ModelDamaged(
        model.name,
        model.generation,
        [],
        0,
        what=f"its vocabulary ({part}) is gone from Redis (evicted, lost in a failover, or "
        "deleted by hand)",
    )


def _of_model(prefix: str, name: str) -> bool:
    """Whether ``prefix`` is one of model ``name``'s generation prefixes (``name`` for a
    first load, ``name~<generation>`` after)."""
    return prefix == name or (prefix.startswith(name + "~") and prefix[len(name) + 1 :].isdigit())


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


class _Names(Sequence[str]):
    """The names of a read's values (tokens, then n-gram buckets), made only when an error
    message needs one."""

    def __init__(self, tokens: Sequence[str], ids: np.ndarray):
        self.tokens, self.ids = tokens, ids

    def __len__(self) -> int:
        return len(self.tokens) + len(self.ids)

    def __getitem__(self, i):  # type: ignore[override]
        n = len(self.tokens)
        return self.tokens[i] if i < n else f"n-gram bucket {int(self.ids[i - n])}"


# every value found: the mask of a read of up to this many (a read-only slice, no alloc)
_ALL_FOUND = np.ones(4096, dtype=bool)
_ALL_FOUND.setflags(write=False)
_NO_IDS = np.zeros(0, np.int64)
_NO_IDS.setflags(write=False)


_F4 = np.dtype("<f4")


def _join_rows_steps(values: list[bytes], size: int) -> Steps[np.ndarray | None]:
    """``values`` joined into one writable uint8 array, None unless each is ``size``
    bytes; ``DECODE_CHUNK`` rows at a time, with a :data:`PAUSE` in between (the array is
    not zeroed first: its pages are touched a chunk at a time too)."""
    total = size * len(values)
    if len(values) <= DECODE_CHUNK:
        out = bytearray().join(values)
        return np.frombuffer(out, np.uint8) if len(out) == total else None
    arr = np.empty(total, np.uint8)
    view, pos = memoryview(arr), 0
    for i in range(0, len(values), DECODE_CHUNK):
        if i:
            yield PAUSE
        part = b"".join(values[i : i + DECODE_CHUNK])
        if pos + len(part) > total:
            return None
        view[pos : pos + len(part)] = part
        pos += len(part)
    return arr if pos == total else None


def _found_all(n: int) -> np.ndarray:
    return _ALL_FOUND[:n] if n <= len(_ALL_FOUND) else np.ones(n, dtype=bool)


#: Rows a big decode joins at a time, with a :data:`~vecserve.store.wire.PAUSE` in between.
DECODE_CHUNK = 1024


def _decode_steps(model: ModelInfo, values: list[bytes | None], tokens: Sequence[str]):
    """``(rows, found)`` of MGET ``values`` (a step only to :data:`PAUSE`: a 10,000-row
    decode lets an event loop run between its chunks)."""
    codec = model.codec_obj
    if values and None not in values:  # the common case: no mask, no scatter
        n = len(values)
        if codec.name == "f32":  # little-endian float32 as stored: one copy, no conversion
            rows = yield from _join_rows_steps(values, 4 * model.dim)  # type: ignore[arg-type]
            if rows is not None:
                return rows.view(_F4).reshape(n, model.dim), _found_all(n)
        buf = b"".join(values)  # type: ignore[arg-type]
        if len(buf) == n * codec.nbytes(model.dim):
            return codec.decode(buf, n, model.dim), _found_all(n)
    return codec.decode_values(values, model.dim, what=tokens)


def _ngram_groups(rows: int, per: int = 100_000) -> Iterator[tuple[None, np.ndarray, np.ndarray]]:
    """``(None, lengths, bytes)`` of the n-gram bucket numbers ``0..rows-1`` as decimal
    text, ``per`` at a time: the key suffixes :func:`resp_exists` joins to ``P#``."""
    for lo in range(0, rows, per):
        ids = np.arange(lo, min(rows, lo + per))
        digits = np.ones(len(ids), dtype=np.int64)
        for power in range(1, 19):
            digits += ids >= 10**power
        text = "".join(map(str, ids.tolist())).encode()
        yield None, digits, np.frombuffer(text, dtype=np.uint8)
