"""LoadSession: writing one generation of a model batch by batch, then committing it."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ..codec import Codec
from ..errors import LoadInProgress, StoreUnavailable
from .layout import (
    EVENTS,
    LEASE_SECONDS,
    LOADS,
    MODELS,
    TRASH,
    LoadState,
    ModelInfo,
    counts_key,
    encode_tokens,
    group_by_tag,
    lock_key,
    pack_vocab,
    vector_keys,
    vocab_key,
    vocab_sizes_key,
)

if TYPE_CHECKING:
    from .registry import Store

__all__ = ["LoadSession"]


_DELETE_IF_EQUAL = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)


def _holder_is_dead(holder: str) -> bool:
    """True if a lease token ``host:pid:nonce`` names a process of this host that is gone."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another machine's process: only its lease expiry can tell
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # an exited process that nobody has reaped yet is dead too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def resp_mset(keys: Sequence[bytes], encoded: np.ndarray) -> list[bytes | memoryview]:
    """The RESP2 bytes of ``MSET k1 v1 k2 v2 ...`` for fixed-size values, zero-copy values.

    redis-py packs a 1,700-vector MSET at ~1.1 us a vector; this costs ~0.25 us, and the
    values are views into ``encoded`` rather than copies.

    >>> b"".join(resp_mset([b"a"], np.zeros((1, 2), np.uint8)))
    b'*3\\r\\n$4\\r\\nMSET\\r\\n$1\\r\\na\\r\\n$2\\r\\n\\x00\\x00\\r\\n'
    """
    size = encoded.shape[1]
    mv = memoryview(np.ascontiguousarray(encoded)).cast("B")
    head = b"\r\n$%d\r\n" % size
    parts: list[bytes | memoryview] = [b"*%d\r\n$4\r\nMSET\r\n" % (2 * len(keys) + 1)]
    append = parts.append
    for i, k in enumerate(keys):
        append(b"$%d\r\n%s%s" % (len(k), k, head))
        append(mv[i * size : (i + 1) * size])
        append(b"\r\n")
    return parts


class _Lease:
    def __init__(self, store: Store, name: str, token: str):
        self.store, self.key, self.token = store, lock_key(name), token

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
        """Lock model ``name`` for loading (``SET NX EX``), refreshed while writing.

        A lease whose holder is a process of this host that no longer exists (a loader
        killed with SIGKILL) is taken over at once instead of waiting for it to expire.
        """
        token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        key = lock_key(name)
        with store._errors(f"locking {name!r}"):
            for _ in range(2):
                if store.client.set(key, token, nx=True, ex=LEASE_SECONDS):
                    return _Lease(store, name, token)
                holder = store.client.get(key)
                if holder is None or not _holder_is_dead(holder.decode()):
                    break
                # compare-and-delete, so a lease renewed meanwhile is never taken
                store.client.eval(_DELETE_IF_EQUAL, 1, key, holder)
            ttl = store.client.ttl(key)
            who = holder.decode() if holder else "?"
            raise LoadInProgress(
                f"model {name!r} is being loaded by {who} right now (its lease expires in "
                f"{max(ttl, 0)}s if that process died)"
            )

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
        """Make the stored generation agree with the recorded progress (after a crash).

        A batch whose vectors reached Redis but whose progress record did not is deleted,
        so the resumed load rewrites it and nothing is left over.
        """
        s = self.state
        client = self.store.client
        vkey = vocab_key(s.prefix)
        with self.store._errors(f"resuming the load of {s.name!r}"):
            extra = client.lrange(vkey, s.chunks, -1)
            if extra:
                self.store.unlink_vocab_blobs(s.prefix, extra, s.buckets)
                client.ltrim(vkey, 0, s.chunks - 1)
            truncations = [(vocab_sizes_key(s.prefix), 4 * s.chunks)]
            if s.has_counts:
                truncations.append((counts_key(s.prefix), 8 * s.written))
            for key, nbytes in truncations:
                client.set(key, client.getrange(key, 0, nbytes - 1) if nbytes else b"")
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
        """Like :meth:`write` for vectors already encoded with the model's codec.

        One round trip (per node on a cluster) appends the vocabulary blob, the counts,
        the vectors and the progress record; the session's state advances only after
        the server acknowledged all of it.
        """
        s = self.state
        raw = encode_tokens(tokens)
        keys = vector_keys(s.prefix, raw, s.buckets)
        after = replace(
            s,
            written=s.written + len(tokens),
            chunks=s.chunks + 1,
            resume=dict(resume or {}),
            updated=time.time(),
            has_counts=s.has_counts or counts is not None,
        )
        commands: list[tuple] = [
            ("RPUSH", vocab_key(s.prefix), pack_vocab(raw)),
            ("APPEND", vocab_sizes_key(s.prefix), len(raw).to_bytes(4, "little")),
        ]
        if counts is not None:
            commands.append(
                ("APPEND", counts_key(s.prefix), np.asarray(counts, dtype="<i8").tobytes())
            )
        progress = [("HSET", LOADS, s.name, after.to_json())]
        now = time.monotonic()
        if now - self._last_refresh > LEASE_SECONDS / 3:
            progress.append(("SET", self.lease.key, self.lease.token, "EX", LEASE_SECONDS))
            self._last_refresh = now
        with self.store._errors(f"writing vectors {s.written:,}-{after.written:,} of {s.name!r}"):
            if s.buckets:
                self._write_cluster(commands, progress, keys, encoded)
            else:
                self._write_single(commands, progress, keys, encoded)
        self.state = after

    def _write_single(self, commands, progress, keys, encoded) -> None:
        """Everything in one write on one connection; replies read in order."""
        client = self.store.client
        pool = client.connection_pool
        conn = pool.get_connection()
        try:
            payload: list = []
            payload += conn.pack_commands(commands)
            payload += resp_mset(keys, encoded)
            payload += conn.pack_commands(progress)
            conn.send_packed_command([b"".join(payload)], check_health=False)
            replies = [conn.read_response() for _ in range(len(commands) + 1 + len(progress))]
        except BaseException:
            conn.disconnect()  # replies may be pending: never reuse this connection
            raise
        finally:
            pool.release(conn)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply

    def _write_cluster(self, commands, progress, keys, encoded) -> None:
        size = encoded.shape[1]
        buf = encoded.tobytes()
        pipe = self.store.client.pipeline(transaction=False)
        for cmd in commands:
            pipe.execute_command(*cmd)
        for idx in group_by_tag(keys):  # one MSET per bucket: one slot each
            args = [x for i in idx for x in (keys[i], buf[i * size : (i + 1) * size])]
            pipe.execute_command("MSET", *args)
        for cmd in progress:
            pipe.execute_command(*cmd)
        pipe.execute()

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
            blobs = store.client.llen(vocab_key(s.prefix))
            sizes = store.client.get(vocab_sizes_key(s.prefix)) or b""
            n = int(np.frombuffer(sizes, dtype="<u4").sum())
            if blobs != s.chunks or n != s.written:
                raise StoreUnavailable(
                    f"vocabulary of {s.name!r} has {n} tokens in {blobs} blobs, expected "
                    f"{s.written} in {s.chunks}: the server lost writes (restarted without "
                    "persistence?); the load was not committed"
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
