"""The store: the one module that knows Redis key names.

Layout (``P`` is a generation's physical prefix, see below)::

    P:token                      encoded vector bytes (codec of the model), string key
    P:{b}:token                  the same on Redis Cluster: ``b`` = crc32(token) % buckets,
                                 a hash tag, so one batch needs one MGET per bucket
    vecserve:models              hash  name -> JSON metadata of the COMMITTED generation
    vecserve:loads               hash  name -> JSON state of an unfinished load
    vecserve:generation          hash  name -> last generation number handed out
    vecserve:vocab:P             list  tokens in file order (index_to_key)
    vecserve:counts:P            string  int64 little-endian counts, in vocab order
    vecserve:trash               set   prefixes whose keys are being deleted
    vecserve:lock:name           string  lease of the process loading ``name``
    vecserve:events              pub/sub channel: JSON on every commit and delete

Visibility: readers look a model up in ``vecserve:models`` only, so a load is invisible
until :meth:`LoadSession.commit` writes that one hash field. Every load writes a new
generation; its prefix ``P`` is the model name itself when no other generation of the
name uses it (so a model loaded once lives at exactly ``NAME:token``), and
``NAME~<generation>`` otherwise. Re-loading therefore writes next to the live generation,
flips the registry in one ``HSET``, then deletes the old one: readers never see a mix.

Every redis-py exception is translated to :class:`~vecserve.errors.StoreUnavailable` here.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
import uuid
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields, replace

import numpy as np
import redis
from redis.cluster import RedisCluster

from .codec import Codec, get_codec
from .errors import InvalidModelName, LoadInProgress, ModelNotFound, StoreUnavailable

__all__ = [
    "LoadSession",
    "LoadState",
    "ModelInfo",
    "Store",
    "validate_model_name",
]

NS = "vecserve"
MODELS = f"{NS}:models"
LOADS = f"{NS}:loads"
GENERATION = f"{NS}:generation"
TRASH = f"{NS}:trash"
EVENTS = f"{NS}:events"
LEASE_SECONDS = 30
DEFAULT_CLUSTER_BUCKETS = 128
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
_REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)


def validate_model_name(name: str) -> str:
    """Return ``name`` if it can be a model name, else raise InvalidModelName.

    >>> validate_model_name("GOOGLE_W2V")
    'GOOGLE_W2V'
    """
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise InvalidModelName(
            f"invalid model name {name!r}: use 1-128 letters, digits, '_', '.', '-', "
            "starting with a letter or digit"
        )
    if name.lower() == NS:
        raise InvalidModelName(f"model name {name!r} is reserved for vecserve's metadata")
    return name


@dataclass(frozen=True)
class ModelInfo:
    """Metadata of one committed generation of a model (the registry entry)."""

    name: str
    dim: int
    codec: str
    count: int
    generation: int
    prefix: str
    buckets: int = 0
    has_counts: bool = False
    source: str = ""
    source_format: str = ""
    sha256: str = ""
    created: float = 0.0
    load_seconds: float = 0.0
    duplicates: int = 0

    @property
    def codec_obj(self) -> Codec:
        return get_codec(self.codec)

    @property
    def vocab_key(self) -> str:
        return f"{NS}:vocab:{self.prefix}"

    @property
    def key_prefix(self) -> bytes:
        """Common prefix of every vector key of this generation (for CLIENT TRACKING)."""
        return self.prefix.encode() + b":"

    @property
    def counts_key(self) -> str:
        return f"{NS}:counts:{self.prefix}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, raw: str | bytes) -> ModelInfo:
        data = json.loads(raw)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class LoadState:
    """Progress of an unfinished load, kept in ``vecserve:loads`` after every batch."""

    name: str
    dim: int
    codec: str
    generation: int
    prefix: str
    buckets: int = 0
    source: str = ""
    source_format: str = ""
    fingerprint: str = ""
    declared_count: int | None = None
    written: int = 0
    resume: dict = field(default_factory=dict)
    has_counts: bool = False
    started: float = 0.0
    updated: float = 0.0
    host: str = ""
    pid: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, raw: str | bytes) -> LoadState:
        data = json.loads(raw)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


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
        self.url = url or _describe(client)
        self.is_cluster = isinstance(client, RedisCluster)

    # -- connecting ---------------------------------------------------------------------

    @classmethod
    def from_url(cls, url: str, **kwargs) -> Store:
        """Connect to ``url``; a Redis Cluster node URL gives a cluster client."""
        kwargs.setdefault("socket_connect_timeout", 5)
        kwargs.setdefault("health_check_interval", 30)
        client = redis.Redis.from_url(url, **kwargs)
        try:
            with _translate(url, "connecting"):
                cluster = client.info("cluster").get("cluster_enabled") in (1, "1")
        except StoreUnavailable:
            client.close()
            raise
        if cluster:
            client.close()
            kwargs.pop("health_check_interval", None)
            client = RedisCluster.from_url(url, **kwargs)
        return cls(client, url=url)

    def close(self) -> None:
        self.client.close()

    def ping(self) -> bool:
        with self._errors("PING"):
            return bool(self.client.ping())

    def _errors(self, what: str):
        return _translate(self.url, what)

    # -- key names ----------------------------------------------------------------------

    @staticmethod
    def vector_keys(prefix: str, tokens: Sequence[str], buckets: int = 0) -> list[bytes]:
        """Key names of ``tokens`` in the generation with this prefix.

        >>> Store.vector_keys("M", ["car", "λ"])
        [b'M:car', b'M:\\xce\\xbb']
        >>> Store.vector_keys("M", ["car"], buckets=128)
        [b'M:{10}:car']
        """
        return _keys(prefix, [t.encode("utf-8", "surrogateescape") for t in tokens], buckets)

    # -- reading the registry -----------------------------------------------------------

    def list_models(self) -> list[ModelInfo]:
        """Committed models, sorted by name."""
        with self._errors("listing models"):
            raw = self.client.hgetall(MODELS)
        return sorted((ModelInfo.from_json(v) for v in raw.values()), key=lambda m: m.name)

    def get_model(self, name: str) -> ModelInfo:
        """The committed generation of ``name``; ModelNotFound (a KeyError) if none."""
        with self._errors(f"reading model {name!r}"):
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
        with self._errors("listing loads"):
            raw = self.client.hgetall(LOADS)
        return sorted((LoadState.from_json(v) for v in raw.values()), key=lambda s: s.name)

    def get_load(self, name: str) -> LoadState | None:
        with self._errors(f"reading load state of {name!r}"):
            raw = self.client.hget(LOADS, name)
        return LoadState.from_json(raw) if raw is not None else None

    def lock_holder(self, name: str) -> str | None:
        with self._errors("reading lock"):
            raw = self.client.get(f"{NS}:lock:{name}")
        return raw.decode() if raw is not None else None

    # -- reading vectors ----------------------------------------------------------------

    def fetch(self, model: ModelInfo, tokens: Sequence[str]) -> list[bytes | None]:
        """Raw values of ``tokens`` (``None`` where missing), one round trip per node."""
        if not tokens:
            return []
        keys = self.vector_keys(model.prefix, tokens, model.buckets)
        with self._errors(f"reading {len(keys)} vectors of {model.name!r}"):
            if not self.is_cluster:
                return self.client.mget(keys)
            return self._cluster_mget(keys)

    def registry_entry(self, name: str) -> bytes | None:
        """The raw registry JSON of ``name`` (None if not committed); cheap change check."""
        with self._errors(f"reading model {name!r}"):
            return self.client.hget(MODELS, name)

    def fetch_checked(
        self, model: ModelInfo, tokens: Sequence[str]
    ) -> tuple[list[bytes | None], bytes | None]:
        """:meth:`fetch` plus the model's current raw registry entry.

        On a single server both travel in one pipelined round trip, so a caller can tell
        whether a re-load committed while it read (the generation in the entry changed).
        On a cluster the entry is read with a second call.
        """
        if self.is_cluster:
            return self.fetch(model, tokens), self.registry_entry(model.name)
        keys = self.vector_keys(model.prefix, tokens, model.buckets)
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command("MGET", *keys)
        pipe.execute_command("HGET", MODELS, model.name)
        with self._errors(f"reading {len(keys)} vectors of {model.name!r}"):
            values, raw = pipe.execute()
        return values, raw

    def _cluster_mget(self, keys: list[bytes]) -> list[bytes | None]:
        groups: dict[bytes, list[int]] = {}
        for i, k in enumerate(keys):
            tag = k[k.index(b"{") : k.index(b"}") + 1] if b"{" in k else k
            groups.setdefault(tag, []).append(i)
        pipe = self.client.pipeline(transaction=False)
        order = list(groups.values())
        for idx in order:
            pipe.execute_command("MGET", *[keys[i] for i in idx])
        out: list[bytes | None] = [None] * len(keys)
        for idx, values in zip(order, pipe.execute(), strict=True):
            for i, v in zip(idx, values, strict=True):
                out[i] = v
        return out

    def vocab(self, model: ModelInfo, start: int = 0, stop: int | None = None) -> list[str]:
        """Tokens ``start:stop`` in model order (chunked LRANGE)."""
        stop = model.count if stop is None else min(stop, model.count)
        out: list[str] = []
        step = 100_000
        with self._errors(f"reading the vocabulary of {model.name!r}"):
            for lo in range(start, stop, step):
                hi = min(lo + step, stop)
                out.extend(
                    t.decode("utf-8", "surrogateescape")
                    for t in self.client.lrange(model.vocab_key, lo, hi - 1)
                )
        return out

    def iter_vocab(self, model: ModelInfo, *, chunk: int = 100_000) -> Iterator[list[str]]:
        """The vocabulary in chunks, for bounded-memory scans of big models."""
        for lo in range(0, model.count, chunk):
            yield self.vocab(model, lo, lo + chunk)

    def counts(self, model: ModelInfo) -> np.ndarray | None:
        """Per-token counts in vocab order, or None if the source had none."""
        if not model.has_counts:
            return None
        with self._errors(f"reading counts of {model.name!r}"):
            raw = self.client.get(model.counts_key) or b""
        return np.frombuffer(raw, dtype="<i8").astype(np.int64)

    # -- loading ------------------------------------------------------------------------

    def begin_load(
        self,
        name: str,
        *,
        dim: int,
        codec: str,
        source: str = "",
        source_format: str = "",
        fingerprint: str = "",
        declared_count: int | None = None,
        resume: bool = False,
        restart: bool = False,
    ) -> LoadSession:
        """Start (or with ``resume=True`` continue) a load of model ``name``.

        Raises LoadInProgress when another live process holds the model's lease, or when an
        interrupted load exists and neither ``resume`` nor ``restart`` says what to do.
        """
        validate_model_name(name)
        codec_obj = get_codec(codec)
        lease = LoadSession.take_lease(self, name)
        try:
            state = self.get_load(name)
            if state is not None and resume:
                if fingerprint and state.fingerprint and state.fingerprint != fingerprint:
                    raise LoadInProgress(
                        f"cannot resume the load of {name!r}: it was reading {state.source} "
                        f"and that file has changed since; use --restart to load it afresh"
                    )
                if state.dim != dim or state.codec != codec:
                    raise LoadInProgress(
                        f"cannot resume the load of {name!r}: it was dim {state.dim} codec "
                        f"{state.codec}, now dim {dim} codec {codec}; use --restart"
                    )
                session = LoadSession(self, state, codec_obj, lease)
                session.rewind()
                return session
            if state is not None:
                if not restart:
                    raise LoadInProgress(
                        f"an interrupted load of {name!r} exists ({state.written:,} vectors "
                        f"of {state.source or 'unknown source'} written); pass --resume to "
                        f"continue it or --restart to drop it and start again"
                    )
                self.drop_load(name, _lease_held=True)
            self._purge_trash(name)
            with self._errors(f"starting a load of {name!r}"):
                generation = int(self.client.hincrby(GENERATION, name, 1))
                busy = {m.prefix for m in self.list_models()}
                busy |= {s.prefix for s in self.list_loads()}
                busy |= {p.decode() for p in self.client.smembers(TRASH)}
            prefix = name if name not in busy else f"{name}~{generation}"
            now = time.time()
            state = LoadState(
                name=name,
                dim=dim,
                codec=codec,
                generation=generation,
                prefix=prefix,
                buckets=DEFAULT_CLUSTER_BUCKETS if self.is_cluster else 0,
                source=source,
                source_format=source_format,
                fingerprint=fingerprint,
                declared_count=declared_count,
                started=now,
                updated=now,
                host=socket.gethostname(),
                pid=os.getpid(),
            )
            session = LoadSession(self, state, codec_obj, lease)
            self.delete_generation(prefix, state.buckets)  # leftovers of a crash, if any
            with self._errors(f"starting a load of {name!r}"):
                self.client.hset(LOADS, name, state.to_json())
            return session
        except BaseException:
            lease.release()
            raise

    # -- deleting -----------------------------------------------------------------------

    def delete_model(self, name: str) -> ModelInfo:
        """Unregister ``name`` (readers stop seeing it at once), then delete its keys."""
        info = self.get_model(name)
        with self._errors(f"deleting {name!r}"):
            self.client.sadd(TRASH, info.prefix)
            self.client.hdel(MODELS, name)
            self.client.publish(EVENTS, json.dumps({"event": "delete", "model": name}))
        self.delete_generation(info.prefix, info.buckets)
        return info

    def drop_load(self, name: str, *, _lease_held: bool = False) -> LoadState | None:
        """Delete an unfinished load's keys and state."""
        lease = None if _lease_held else LoadSession.take_lease(self, name)
        try:
            state = self.get_load(name)
            if state is None:
                return None
            with self._errors(f"dropping the load of {name!r}"):
                self.client.sadd(TRASH, state.prefix)
                self.client.hdel(LOADS, name)
            self.delete_generation(state.prefix, state.buckets)
            return state
        finally:
            if lease is not None:
                lease.release()

    def cleanup(self) -> list[str]:
        """Drop every interrupted load whose lease expired, and finish pending deletes."""
        done = []
        for state in self.list_loads():
            try:
                self.drop_load(state.name)
                done.append(f"dropped interrupted load of {state.name} ({state.written:,} vectors)")
            except LoadInProgress:
                done.append(f"skipped {state.name}: a load is running")
        with self._errors("reading trash"):
            trash = [p.decode() for p in self.client.smembers(TRASH)]
        for prefix in trash:
            self.delete_generation(prefix, DEFAULT_CLUSTER_BUCKETS if self.is_cluster else 0)
            done.append(f"deleted leftover keys of {prefix}")
        return done

    def _purge_trash(self, name: str) -> None:
        with self._errors("reading trash"):
            trash = [p.decode() for p in self.client.smembers(TRASH)]
        for prefix in trash:
            if prefix == name or prefix.startswith(f"{name}~"):
                self.delete_generation(prefix, DEFAULT_CLUSTER_BUCKETS if self.is_cluster else 0)

    def delete_generation(self, prefix: str, buckets: int, *, chunk: int = 10_000) -> int:
        """Delete every key of a generation (its vocabulary names them) and its metadata."""
        vocab_key = f"{NS}:vocab:{prefix}"
        deleted = 0
        with self._errors(f"deleting generation {prefix!r}"):
            while True:
                # Pop from the tail so an interrupted delete can simply be run again.
                raw = self.client.lrange(vocab_key, -chunk, -1)
                if not raw:
                    break
                tokens = [t.decode("utf-8", "surrogateescape") for t in raw]
                self._unlink(self.vector_keys(prefix, tokens, buckets))
                self.client.ltrim(vocab_key, 0, -len(raw) - 1)
                deleted += len(raw)
            self.client.delete(vocab_key)
            self.client.delete(f"{NS}:counts:{prefix}")
            self.client.srem(TRASH, prefix)
        return deleted

    def _unlink(self, keys: list[bytes]) -> None:
        if not keys:
            return
        if not self.is_cluster:
            self.client.unlink(*keys)
            return
        groups: dict[bytes, list[bytes]] = {}
        for k in keys:
            tag = k[k.index(b"{") : k.index(b"}") + 1] if b"{" in k else k
            groups.setdefault(tag, []).append(k)
        pipe = self.client.pipeline(transaction=False)
        for ks in groups.values():
            pipe.execute_command("UNLINK", *ks)
        pipe.execute()

    # -- server facts -------------------------------------------------------------------

    def memory_used(self) -> int:
        """Bytes of memory the server(s) use (sum over cluster primaries)."""
        with self._errors("INFO memory"):
            info = self.client.info("memory")
        if self.is_cluster:
            return sum(int(v["used_memory"]) for v in info.values() if isinstance(v, dict))
        return int(info["used_memory"])


class _Lease:
    def __init__(self, store: Store, name: str, token: str):
        self.store, self.key, self.token = store, f"{NS}:lock:{name}", token

    def refresh(self) -> None:
        with self.store._errors("refreshing the load lease"):
            self.store.client.set(self.key, self.token, ex=LEASE_SECONDS)

    def release(self) -> None:
        with contextlib.suppress(StoreUnavailable), self.store._errors("releasing lease"):
            if self.store.client.get(self.key) == self.token.encode():
                self.store.client.delete(self.key)


class LoadSession:
    """Writes one generation batch by batch, then commits it (or leaves it resumable).

    Obtained from :meth:`Store.begin_load`. Each :meth:`write` is one pipelined round trip
    (per node on a cluster) that appends the tokens to the vocabulary, writes the vectors
    and records the progress, so an interrupted load can continue at the last batch.
    """

    def __init__(self, store: Store, state: LoadState, codec: Codec, lease: _Lease):
        self.store = store
        self.state = state
        self.codec = codec
        self.lease = lease
        self._last_refresh = time.monotonic()
        self.committed: ModelInfo | None = None

    @staticmethod
    def take_lease(store: Store, name: str) -> _Lease:
        token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        key = f"{NS}:lock:{name}"
        with store._errors(f"locking {name!r}"):
            if not store.client.set(key, token, nx=True, ex=LEASE_SECONDS):
                holder = store.client.get(key)
                ttl = store.client.ttl(key)
                who = holder.decode() if holder else "?"
                raise LoadInProgress(
                    f"model {name!r} is being loaded by {who} right now (its lease expires in "
                    f"{max(ttl, 0)}s if that process died)"
                )
        return _Lease(store, name, token)

    @property
    def written(self) -> int:
        return self.state.written

    @property
    def resume_point(self) -> dict:
        return dict(self.state.resume)

    def seen_tokens(self) -> Iterator[str]:
        """Tokens already written (for duplicate detection when resuming)."""
        info = self._as_info(count=self.state.written)
        for chunk in self.store.iter_vocab(info):
            yield from chunk

    def rewind(self) -> None:
        """Make the stored generation agree with the recorded progress (after a crash)."""
        s = self.state
        vocab_key = f"{NS}:vocab:{s.prefix}"
        with self.store._errors(f"resuming the load of {s.name!r}"):
            extra = self.store.client.lrange(vocab_key, s.written, -1)
            if extra:
                tokens = [t.decode("utf-8", "surrogateescape") for t in extra]
                self.store._unlink(self.store.vector_keys(s.prefix, tokens, s.buckets))
                self.store.client.ltrim(vocab_key, 0, s.written - 1)
            if s.has_counts:
                ckey = f"{NS}:counts:{s.prefix}"
                raw = self.store.client.getrange(ckey, 0, 8 * s.written - 1) if s.written else b""
                self.store.client.set(ckey, raw)
            s.pid, s.host = os.getpid(), socket.gethostname()

    def write(
        self,
        tokens: Sequence[str],
        vectors: np.ndarray,
        *,
        counts: np.ndarray | None = None,
        resume: dict | None = None,
    ) -> None:
        """Append one batch: encode, then vocab + vectors + progress in one round trip."""
        if not tokens:
            return
        encoded = self.codec.encode(vectors)
        self.write_encoded(tokens, encoded, counts=counts, resume=resume)

    def write_encoded(
        self,
        tokens: Sequence[str],
        encoded: np.ndarray,
        *,
        counts: np.ndarray | None = None,
        resume: dict | None = None,
    ) -> None:
        """Like :meth:`write` for vectors already encoded with the model's codec."""
        s = self.state
        store = self.store
        raw = [t.encode("utf-8", "surrogateescape") for t in tokens]
        keys = _keys(s.prefix, raw, s.buckets)
        size = encoded.shape[1]
        buf = encoded.tobytes()
        values = [buf[i : i + size] for i in range(0, len(buf), size)]
        after = replace(
            s,
            written=s.written + len(tokens),
            resume=dict(resume or {}),
            updated=time.time(),
            has_counts=s.has_counts or counts is not None,
        )
        pipe = store.client.pipeline(transaction=False)
        pipe.rpush(f"{NS}:vocab:{s.prefix}", *raw)
        if counts is not None:
            pipe.append(f"{NS}:counts:{s.prefix}", np.asarray(counts, dtype="<i8").tobytes())
        if s.buckets:
            groups: dict[int, list[bytes]] = {}
            for t, k, v in zip(raw, keys, values, strict=True):
                groups.setdefault(zlib.crc32(t) % s.buckets, []).extend((k, v))
            for args in groups.values():
                pipe.execute_command("MSET", *args)
        else:
            args: list[bytes] = [b""] * (2 * len(keys))
            args[0::2], args[1::2] = keys, values
            pipe.execute_command("MSET", *args)
        pipe.hset(LOADS, s.name, after.to_json())
        now = time.monotonic()
        if now - self._last_refresh > LEASE_SECONDS / 3:
            pipe.set(self.lease.key, self.lease.token, ex=LEASE_SECONDS)
            self._last_refresh = now
        with store._errors(f"writing vectors {s.written:,}-{after.written:,} of {s.name!r}"):
            pipe.execute()
        self.state = after

    def _as_info(self, *, count: int, **extra) -> ModelInfo:
        s = self.state
        return ModelInfo(
            name=s.name,
            dim=s.dim,
            codec=s.codec,
            count=count,
            generation=s.generation,
            prefix=s.prefix,
            buckets=s.buckets,
            has_counts=s.has_counts,
            source=s.source,
            source_format=s.source_format,
            **extra,
        )

    def commit(self, *, sha256: str = "", duplicates: int = 0) -> ModelInfo:
        """Flip the registry to this generation (one HSET), then delete the previous one."""
        s = self.state
        store = self.store
        info = self._as_info(
            count=s.written,
            sha256=sha256,
            created=time.time(),
            load_seconds=round(time.time() - s.started, 3),
            duplicates=duplicates,
        )
        with store._errors(f"committing {s.name!r}"):
            n = store.client.llen(info.vocab_key)
            if n != s.written:
                raise StoreUnavailable(
                    f"vocabulary of {s.name!r} has {n} entries, expected {s.written}: "
                    "the server lost writes (restarted without persistence?); "
                    "the load was not committed"
                )
            raw_old = store.client.hget(MODELS, s.name)
            old = ModelInfo.from_json(raw_old) if raw_old is not None else None
            if old is not None:
                store.client.sadd(TRASH, old.prefix)
            store.client.hset(MODELS, s.name, info.to_json())  # the flip
            store.client.hdel(LOADS, s.name)
            store.client.publish(
                EVENTS,
                json.dumps({"event": "commit", "model": s.name, "generation": s.generation}),
            )
        self.committed = info
        if old is not None and old.prefix != info.prefix:
            store.delete_generation(old.prefix, old.buckets)
        self.lease.release()
        return info

    def abort(self, *, keep: bool = True) -> None:
        """Stop writing; ``keep=True`` leaves the partial load resumable, else drops it."""
        try:
            if not keep:
                self.store.drop_load(self.state.name, _lease_held=True)
        finally:
            self.lease.release()


@contextlib.contextmanager
def _translate(url: str, what: str) -> Iterator[None]:
    """The one boundary where redis-py's errors become StoreUnavailable."""
    try:
        yield
    except redis.AuthenticationError as exc:
        raise StoreUnavailable(
            f"Redis at {url} refused our credentials while {what}: {exc}"
        ) from exc
    except redis.BusyLoadingError as exc:
        raise StoreUnavailable(f"Redis at {url} is still loading its data ({what})") from exc
    except _REDIS_ERRORS as exc:
        raise StoreUnavailable(f"Redis at {url} is unreachable while {what}: {exc}") from exc
    except redis.ResponseError as exc:
        if "OOM" in str(exc):
            raise StoreUnavailable(f"Redis at {url} is out of memory while {what}: {exc}") from exc
        raise


def _keys(prefix: str, raw: Sequence[bytes], buckets: int) -> list[bytes]:
    p = prefix.encode() + b":"
    if not buckets:
        return [p + t for t in raw]
    return [b"%s{%d}:%s" % (p, zlib.crc32(t) % buckets, t) for t in raw]


def _describe(client) -> str:
    try:
        kw = client.connection_pool.connection_kwargs
        if "path" in kw:
            return f"unix://{kw['path']}"
        return f"redis://{kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"
    except AttributeError:
        return "redis-cluster"


def iter_chunks(items: Iterable, size: int) -> Iterator[list]:
    """Lists of up to ``size`` consecutive items."""
    chunk: list = []
    for x in items:
        chunk.append(x)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
