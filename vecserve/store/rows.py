"""Reads of rows: the one generation-consistent read (:meth:`RowReads.read_rows_steps`)
and its hot paths."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import GenerationChanged, ModelDamaged
from ..subwords import in_vocabulary
from .keys import encode_tokens, group_by_tag, ngram_keys, vector_keys
from .records import ModelInfo
from .syncwire import CheckedGet
from .wire import PAUSE, Round, Steps

__all__ = ["DECODE_CHUNK", "RowReads"]


class RowReads:
    """The :class:`~.registry.Store`'s reads of rows."""

    def fetch(self, model: ModelInfo, tokens: Sequence[str]) -> list[bytes | None]:
        """Raw stored values of ``tokens`` (``None`` where missing), one round trip per node.

        No generation check: for inspecting storage. Readers use :meth:`read_rows`.
        """
        if not tokens:
            return []
        keys = self.vector_keys(model.prefix, tokens, model.buckets)
        return self.run(self._mget_steps(keys, f"reading {len(keys)} vectors of {model.name!r}"))

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
            return (yield from self._rows_of_steps(model, tokens, ids, values))
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
                    return (yield from self._rows_of_steps(model, tokens, ids, values))
            settings = (current.min_n, current.max_n, current.ngram_buckets)
            if not follow or (
                len(extra) and settings != (model.min_n, model.max_n, model.ngram_buckets)
            ):
                break  # n-gram buckets are the caller's to compute again
            model = current
        raise GenerationChanged(
            f"model {model.name!r} changed generation while it was being read; retry"
        )

    def _rows_of_steps(
        self, model: ModelInfo, tokens: Sequence[str], ids: np.ndarray, values: list
    ) -> Steps[tuple[ModelInfo, np.ndarray, np.ndarray]]:
        """``(model, rows, found)`` of the values of ``tokens`` then n-gram rows ``ids``
        read from generation ``model``; ModelDamaged if a missing word is in its vocabulary."""
        rows, found = yield from _decode_steps(model, values, _Names(tokens, ids))
        if len(tokens) and not found[: len(tokens)].all():
            yield from self._damage_steps(model, tokens, found[: len(tokens)])
        return model, rows, found

    def plain_round_steps(self, model: ModelInfo, tokens: Sequence[str]) -> Steps[Round | None]:
        """The one round trip of a plain read of ``tokens`` (their MGET and the model's
        registry entry, pipelined) on a single server; None where a read needs more (a
        cluster, no tokens). :meth:`plain_rows_steps` reads its replies. The hot path of
        :meth:`read_rows_steps` (a step only to :data:`PAUSE` between chunks of the keys
        of a big batch)."""
        if self.is_cluster or not tokens:
            return None
        entry = self.entry_request(model.name)
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
        (:class:`~vecserve.store.syncwire.CheckedGet`: the GET of the word's key and the HGET
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
            self.entry_request(model.name),
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
        entry = self.entry_request(model.name)
        values, raw = yield Round([("MGET", *keys), entry], what)
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
