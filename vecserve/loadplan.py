"""What a load needs before it begins: the server memory a model will take
(:func:`estimate_bytes`) and the pre-flight that refuses a load that cannot fit or a
server that would evict it (:func:`preflight`), both told in figures a person can act on."""

from __future__ import annotations

import logging

from .codec import get_codec
from .errors import (
    LoadRefused,
)
from .store import Store
from .store.registry import gb

__all__ = ["PER_KEY_BYTES", "TOKEN_BYTES", "estimate_bytes", "preflight"]

# the loader's one logger: its modules speak as "vecserve.loader"
log = logging.getLogger("vecserve.loader")

# Server memory of a row beyond its value's bytes: the key's own bytes, then ~100 B of
# dict entry, object and allocation overhead, its vocabulary entry and hash (measured on
# valkey 9.1: 61-109 B beside 8-byte tokens, by codec and dim; BENCHMARKS.md).
PER_KEY_BYTES = 100


TOKEN_BYTES = 12  # a typical token's UTF-8 bytes (GoogleNews: ~11)


def estimate_bytes(count: int, dim: int, codec: str, *, ngram_rows: int = 0) -> int:
    """Server memory ``count`` words (and ``ngram_rows`` fastText n-gram rows) take.

    >>> estimate_bytes(3_000_000, 300, "f32") / 1e9
    3.936
    """
    value = get_codec(codec).nbytes(dim)
    return count * (value + PER_KEY_BYTES + TOKEN_BYTES) + ngram_rows * (value + PER_KEY_BYTES)


def preflight(
    store: Store,
    name: str,
    *,
    count: int | None,
    dim: int,
    codec: str,
    ngram_rows: int = 0,
    allow_eviction: bool = False,
) -> None:
    """Refuse, before writing anything, a load the server cannot hold or may evict.

    Reads ``INFO memory`` (``maxmemory``, ``used_memory``, ``maxmemory_policy``; on a
    cluster every primary, each taking its share): a policy that evicts keys without a
    TTL (``allkeys-*``) raises :class:`LoadRefused` unless ``allow_eviction`` (then a
    warning); a model whose :func:`estimate_bytes` exceed the free memory raises it too
    (with ``allow_eviction``: only what exceeds ``maxmemory`` itself). Where INFO is
    refused, or the file does not say how many vectors it holds, the check is skipped
    with a log line; the verified writes still stop a load that runs out of memory.
    """
    facts = store.memory_facts()
    if facts is None:
        log.info(
            "pre-flight check skipped: the Redis user may not run INFO (grant +info, as "
            "`vecserve acl loader` does, to learn up front whether %s fits)",
            name,
        )
        return
    evicting = sorted({f.policy for f in facts if f.evicts})
    if evicting:
        if not allow_eviction:
            raise LoadRefused(
                f"Redis at {store.url} has maxmemory-policy {', '.join(evicting)}: it may "
                f"evict parts of {name!r} at any time (vecserve's keys have no TTL); set "
                "maxmemory-policy noeviction (or a volatile-* one), or pass "
                "--allow-eviction to load anyway"
            )
        log.warning(
            "loading %s into a server whose maxmemory-policy is %s (--allow-eviction): "
            "evicted vectors are reported as ModelDamaged; `vecserve models check %s` "
            "finds them",
            name,
            ", ".join(evicting),
            name,
        )
    if count is None:
        log.info("memory check skipped: the file does not say how many vectors it holds")
        return
    need = estimate_bytes(count, dim, codec, ngram_rows=ngram_rows)
    share = -(-need // len(facts))
    for f in facts:
        room = (f.maxmemory or None) if allow_eviction and f.evicts else f.free
        if room is None or share <= room:
            continue
        smaller = ", ".join(
            f"--codec {c} (~{gb(estimate_bytes(count, dim, c, ngram_rows=ngram_rows))})"
            for c in ("f16", "i8")
            if get_codec(c).nbytes(dim) < get_codec(codec).nbytes(dim)
        )
        where = f"each of its {len(facts)} primaries" if len(facts) > 1 else "it"
        raise LoadRefused(
            f"{name!r} needs about {gb(need)} in Redis ({count:,} vectors x {dim} {codec}"
            + (f" and {ngram_rows:,} n-gram rows" if ngram_rows else "")
            + f") but Redis at {store.url} has {gb(room)} free for {where} "
            f"({f.describe()}): raise maxmemory (CONFIG SET maxmemory), free memory"
            + (f", or load with {smaller}" if smaller else "")
        )
