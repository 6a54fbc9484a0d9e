"""Integrity: whether every row of a generation is there, and its vocabulary hashes
(which tell a lost row from an unknown word)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from ..errors import ModelDamaged
from ..subwords import flat_word_hashes
from .keys import (
    CHECKS,
    decode_tokens,
    group_by_tag,
    ngram_key_prefix,
    ngram_keys,
    vector_keys,
    vocab_hashes_key,
    vocab_key,
    vocab_sizes_key,
)
from .records import ModelInfo, unpack_vocab, vocab_parts
from .resp import resp_exists
from .wire import Round, Steps

__all__ = ["Integrity", "RowCheck"]


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


class Integrity:
    """The :class:`~.registry.Store`'s checks of generations."""

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
                self._exists_overlapped(groups, tally, parts if hashes else None, model.key_prefix)
            if ngrams:
                self._check_ngram_rows(model, found, progress, total)
        return RowCheck(
            checked=found["done"],
            missing=found["missing"],
            words=words,
            hashes=_sorted_unique(parts) if hashes else None,
            lost=tuple(lost),
            unlisted=max(0, model.count - found["listed"]),  # rows no vocabulary names now
        )

    def _check_ngram_rows(self, model: ModelInfo, found: dict, progress, total: int) -> None:
        """:meth:`check_rows` of a fastText model's n-gram bucket rows, counted in ``found``."""

        def tally_ngrams(_, lens: np.ndarray, present: int) -> None:
            found["missing"] += len(lens) - present
            found["done"] += len(lens)
            if progress is not None:
                progress(found["done"], total)

        if not (self.is_cluster or model.buckets):
            groups = _ngram_groups(model.ngram_buckets)
            self._exists_overlapped(groups, tally_ngrams, None, ngram_key_prefix(model.prefix))
            return
        for lo in range(0, model.ngram_buckets, 100_000):
            ids = np.arange(lo, min(model.ngram_buckets, lo + 100_000))
            present = len(ids) - self._count_missing(ngram_keys(model.prefix, ids, model.buckets))
            tally_ngrams(None, ids, present)

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

    def _exists_overlapped(self, groups, tally, parts, key_prefix: bytes) -> None:
        """A single server: each group's EXISTS (of ``key_prefix`` + its tokens) sent
        before the last one's count is read."""
        pool = self.client.connection_pool
        conn = pool.get_connection()
        try:
            pending = None
            for blobs, lens, buf in groups:
                request = resp_exists(key_prefix, lens, buf)
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


def _sorted_unique(parts: list[np.ndarray]) -> np.ndarray:
    """The word hashes of ``parts`` sorted, each once (np.unique hashes uint64 slowly:
    ~6 us a word)."""
    known = np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)
    return known[np.concatenate(([True], known[1:] != known[:-1]))] if len(known) else known


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
