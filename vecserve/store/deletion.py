"""Deleting models and generations (their vocabulary names their keys)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from .keys import (
    CHECKS,
    EVENTS,
    MODELS,
    TRASH,
    counts_key,
    group_by_tag,
    is_generation_of,
    ngram_keys,
    ngrams_key,
    text_key,
    vector_keys,
    vocab_hashes_key,
    vocab_key,
    vocab_sizes_key,
)
from .records import ModelInfo, unpack_vocab

__all__ = ["Deletion"]


class Deletion:
    """The :class:`~.registry.Store`'s deletes."""

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
            if is_generation_of(prefix, name):
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
