"""A load writing its generation: :class:`LoadSession`, batch by batch, then its commit
(:class:`~.commit.Committing`), or an abort that leaves it resumable or drops it
(:func:`drop_load`: an unfinished load's keys and record deleted).

A session is started or resumed by :func:`~.loads.begin_load` under the model's
:class:`~.lease.Lease`; it refreshes that lease with its writes. Built on
:class:`~.registry.Store` (reads, deletes); the registry knows nothing of loads in
progress beyond reading their records.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace

import numpy as np
import redis

from ..codec import Codec
from ..errors import StoreUnavailable
from ..subwords import word_hashes
from .commit import Committing
from .facts import Witness
from .generations import keep_setting
from .keys import (
    LOADS,
    TRASH,
    counts_key,
    encode_tokens,
    group_by_tag,
    ngram_keys,
    ngrams_key,
    text_key,
    vector_keys,
    vocab_key,
    vocab_sizes_key,
)
from .lease import LEASE_SECONDS, Lease
from .lua import VOCAB_PUSH
from .records import LoadState, ModelInfo, pack_vocab
from .registry import Store
from .resp import resp_mset

__all__ = ["LoadSession", "drop_load"]


class LoadSession(Committing):
    """Writes one generation batch by batch, then commits it (or leaves it resumable).

    Obtained from :func:`begin_load`. Each :meth:`write` is one pipelined round trip
    (per node on a cluster) that appends the tokens to the vocabulary, writes the vectors
    and records the progress, so an interrupted load can continue at the last batch.
    """

    def __init__(self, store: Store, state: LoadState, codec: Codec, lease: Lease):
        self.store = store
        self.state = state
        self.codec = codec
        self.lease = lease
        self._last_refresh = time.monotonic()
        self.committed: ModelInfo | None = None
        # retired generations kept unpinned for rollback (VECSERVE_KEEP_GENERATIONS)
        self.keep = keep_setting()
        # what the commit's completeness check may rest on instead of asking every key
        self.witness = Witness(store, fresh=state.written == 0)

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

    def written_counts(self) -> np.ndarray | None:
        """The counts written so far, in vocabulary order (None: the source has none)."""
        info = self._as_info(count=self.state.written)
        return self.store.run(self.store.counts_steps(info))

    def rewind(self) -> None:
        """Make the stored generation agree with the recorded progress (after a crash).

        A batch whose vectors reached Redis but whose progress record did not is deleted,
        so the resumed load rewrites it and nothing is left over.
        """
        s = self.state
        client = self.store.client
        vkey = vocab_key(s.prefix)
        with self.store.errors(f"resuming the load of {s.name!r}"):
            extra = client.lrange(vkey, s.chunks, -1)
            if extra:
                self.store.unlink_vocab_blobs(s.prefix, extra, s.buckets)
                if s.chunks:
                    client.ltrim(vkey, 0, s.chunks - 1)
                else:  # LTRIM key 0 -1 would keep the whole list
                    client.delete(vkey)
            truncations = [(vocab_sizes_key(s.prefix), 4 * s.chunks)]
            if s.has_counts:
                truncations.append((counts_key(s.prefix), 8 * s.written))
            for key, nbytes in truncations:
                client.set(key, client.getrange(key, 0, nbytes - 1) if nbytes else b"")
            s.pid, s.host = os.getpid(), socket.gethostname()

    def lost_writes(self) -> int:
        """How many of the written words the server cannot vouch for (0: resume safely).

        A write can be acknowledged and still be lost: on a Redis Cluster with replicas a
        primary acknowledges before its replica has it, and a server whose policy evicts
        keys drops them later. Checked when a load resumes: the vocabulary's blobs, their
        sizes and the counts cover what the load recorded; every written word's key is
        present (one multi-key EXISTS per batch of keys, per hash tag on a cluster; no
        vectors travel); and the vocabulary holds as many distinct words as were written
        (a blob written twice, or one whose tail was lost, would shift the rest).
        """
        s = self.state
        client = self.store.client
        with self.store.errors(f"checking the written part of {s.name!r}"):
            blobs = int(client.llen(vocab_key(s.prefix)))
            sizes = client.getrange(vocab_sizes_key(s.prefix), 0, 4 * s.chunks - 1)
            counted = int(client.strlen(counts_key(s.prefix))) // 8 if s.has_counts else s.written
        sizes = sizes if s.chunks else b""  # GETRANGE k 0 -1 is the whole value
        listed = int(np.frombuffer(sizes[: len(sizes) // 4 * 4], "<u4").sum())
        if blobs < s.chunks or len(sizes) < 4 * s.chunks or listed != s.written:
            return max(1, s.written - listed)
        if counted < s.written:
            return s.written - counted
        if not s.written:
            return 0
        check = self.store.check_rows(self._as_info(count=s.written), ngrams=False, hashes=True)
        assert check.hashes is not None
        return check.missing + max(0, s.written - len(check.hashes))

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
        tokens: Sequence[str] | Sequence[bytes],
        encoded: np.ndarray,
        *,
        counts: np.ndarray | None = None,
        resume: dict | None = None,
    ) -> None:
        """Like :meth:`write` for vectors already encoded with the model's codec;
        ``tokens`` as str or as their key bytes (UTF-8: ``VectorBatch.raw``).

        One round trip (per node on a cluster) appends the vocabulary blob, the counts,
        the vectors and the progress record; the session's state advances only after
        the server acknowledged all of it.
        """
        s = self.state
        raw = tokens if tokens and isinstance(tokens[0], bytes) else encode_tokens(tokens)
        keys = vector_keys(s.prefix, raw, s.buckets)
        after = replace(
            s,
            written=s.written + len(tokens),
            chunks=s.chunks + 1,
            resume=dict(resume or {}),
            updated=time.time(),
            has_counts=s.has_counts or counts is not None,
        )
        # each write lands at the position the load is at, so running one twice (a
        # cluster client resends what it lost the reply of) changes nothing
        commands: list[tuple] = [
            ("EVAL", VOCAB_PUSH, 1, vocab_key(s.prefix), s.chunks, pack_vocab(raw)),
            ("SETRANGE", vocab_sizes_key(s.prefix), 4 * s.chunks, len(raw).to_bytes(4, "little")),
        ]
        if counts is not None:
            commands.append(
                (
                    "SETRANGE",
                    counts_key(s.prefix),
                    8 * s.written,
                    np.asarray(counts, dtype="<i8").tobytes(),
                )
            )
        progress = [("HSET", LOADS, s.name, after.to_json())]
        now = time.monotonic()
        if now - self._last_refresh > LEASE_SECONDS / 3:
            progress.append(("SET", self.lease.key, self.lease.token, "EX", LEASE_SECONDS))
            self._last_refresh = now
        witness = self.witness
        witness.before_write()
        # the words' hashes, computed while the server works on the batch
        hashes = (lambda: word_hashes(raw)) if witness.active else None
        with self.store.errors(f"writing vectors {s.written:,}-{after.written:,} of {s.name!r}"):
            if s.buckets:
                self._write_cluster(commands, progress, keys, encoded)
            else:
                hashes = self._write_single(commands, progress, keys, encoded, meanwhile=hashes)
        self.state = after
        witness.wrote(keys, hashes)

    def declare_ngrams(self, *, min_n: int, max_n: int, bucket: int) -> None:
        """Make this a fastText generation with ``bucket`` n-gram rows (before writing them).

        Recorded in the load state and in ``vecserve:ngrams:P`` at once, so that dropping
        an interrupted load deletes the n-gram keys too.
        """
        s = self.state
        after = replace(s, min_n=min_n, max_n=max_n, ngram_buckets=bucket)
        with self.store.errors(f"starting the n-grams of {s.name!r}"):
            self.store.client.set(ngrams_key(s.prefix), str(bucket))
            self.store.client.hset(LOADS, s.name, after.to_json())
        self.state = after

    def set_text(self, spec: str, blob: bytes = b"") -> None:
        """Record how text is cut into this model's tokens (``spec``, the JSON of a
        :class:`vecserve.text.TextSpec`) and its blob (tokenizer, phrases) before commit.

        The blob goes to ``vecserve:text:P`` with the generation's other metadata (deleted
        with it); the spec rides in the registry entry.
        """
        s = self.state
        after = replace(s, text=spec)
        with self.store.errors(f"storing the tokenizer of {s.name!r}"):
            self.store.client.set(text_key(s.prefix), blob)
            self.store.client.hset(LOADS, s.name, after.to_json())
        self.state = after

    def write_ngrams(self, first: int, encoded: np.ndarray) -> None:
        """Write encoded n-gram bucket rows ``first, first + 1, ...`` (one round trip).

        Idempotent: a resumed load writes them all again.
        """
        s = self.state
        if first < 0 or first + len(encoded) > s.ngram_buckets:
            raise ValueError(f"n-gram rows {first}..{first + len(encoded)} of {s.ngram_buckets}")
        keys = ngram_keys(s.prefix, np.arange(first, first + len(encoded)), s.buckets)
        self.witness.before_write()
        with self.store.errors(f"writing n-gram rows {first:,}+ of {s.name!r}"):
            if s.buckets:
                self._write_cluster([], [], keys, encoded)
            else:
                self._write_single([], [], keys, encoded)
        self.witness.wrote(keys, ngrams=True)

    def _write_single(self, commands, progress, keys, encoded, meanwhile=None):
        """One MULTI ... EXEC in one write on one connection; every reply checked;
        ``meanwhile()`` runs while the server works, and its result is returned.

        A transaction is all or nothing: a command the server refuses while queueing it
        (OOM, READONLY, MISCONF) makes it discard the whole batch, the progress record
        included, so the recorded resume point never passes a failed write (a plain
        pipeline would run the progress record after a refused MSET).
        """
        client = self.store.client
        pool = client.connection_pool
        conn = pool.get_connection()
        try:
            payload: list = [*conn.pack_command("MULTI")]
            payload += conn.pack_commands(commands) if commands else []
            payload += resp_mset(keys, encoded)
            payload += conn.pack_commands(progress) if progress else []
            payload += conn.pack_command("EXEC")
            conn.send_packed_command([b"".join(payload)], check_health=False)
            result = meanwhile() if meanwhile is not None else None
            replies = []
            for _ in range(len(commands) + len(progress) + 3):
                try:
                    replies.append(conn.read_response())
                except redis.ResponseError as exc:  # consumed whole: the next reply follows
                    replies.append(exc)
        except BaseException:
            conn.disconnect()  # replies may be pending: never reuse this connection
            raise
        finally:
            pool.release(conn)
        failed = [r for r in replies[:-1] if isinstance(r, Exception)]
        done = replies[-1]
        if isinstance(done, Exception):
            raise failed[0] if failed else done  # the refused command, not EXECABORT
        if failed:
            raise failed[0]
        for reply in done:
            if isinstance(reply, Exception):
                raise reply
        if commands:
            self._check_push(done[0])
        return result

    def _write_cluster(self, commands, progress, keys, encoded) -> None:
        """Vocabulary and vectors (one MSET per hash tag), every reply checked; then the
        progress record, only once all of them succeeded (the nodes are written in
        parallel, so a record sent with them could run beside a refused MSET)."""
        size = encoded.shape[1]
        buf = encoded.tobytes()
        pipe = self.store.client.pipeline(transaction=False)
        for cmd in commands:
            pipe.execute_command(*cmd)
        for idx in group_by_tag(keys):  # one MSET per bucket: one slot each
            args = [x for i in idx for x in (keys[i], buf[i * size : (i + 1) * size])]
            pipe.execute_command("MSET", *args)
        replies = pipe.execute(raise_on_error=False)
        _raise_first(replies)
        if commands:
            self._check_push(replies[0])
        if progress:
            pipe = self.store.client.pipeline(transaction=False)
            for cmd in progress:
                pipe.execute_command(*cmd)
            _raise_first(pipe.execute(raise_on_error=False))

    def _check_push(self, reply) -> None:
        """Raise unless `VOCAB_PUSH` left the vocabulary one blob past the recorded ones."""
        s, reply = self.state, int(reply)
        if reply != s.chunks + 1:
            held = -1 - reply if reply < 0 else reply
            raise self._lost(
                f"its vocabulary list holds {held:,} blobs where the load wrote {s.chunks:,}"
            )

    def _lost(self, what: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"the server lost acknowledged writes of the load of {self.state.name!r} ({what}: "
            "a failover, or a restart without persistence); nothing was committed, and "
            "--resume rewrites what was lost"
        )

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
            min_n=s.min_n,
            max_n=s.max_n,
            ngram_buckets=s.ngram_buckets,
            text=s.text,
            layout=s.layout,
            **extra,
        )

    def abort(self, *, keep: bool = True) -> None:
        """Stop writing; ``keep=True`` leaves the partial load resumable, else drops it."""
        try:
            if not keep:
                drop_load(self.store, self.state.name, lease=self.lease)
        finally:
            self.lease.release()


def _raise_first(replies: list) -> None:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply


def drop_load(store: Store, name: str, *, lease: Lease | None = None) -> LoadState | None:
    """Delete an unfinished load's keys and state (under ``lease``, else a lease of its own)."""
    own = None if lease is not None else Lease.take(store, name)
    try:
        state = store.get_load(name)
        if state is None:
            return None
        with store.errors(f"dropping the load of {name!r}"):
            store.client.sadd(TRASH, state.prefix)
            store.client.hdel(LOADS, name)
        store.delete_generation(state.prefix, state.buckets)
        return state
    finally:
        if own is not None:
            own.release()
