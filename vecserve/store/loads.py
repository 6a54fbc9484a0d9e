"""Starting a load: :func:`begin_load` takes the model's lease, then continues an
interrupted load (checked first: its source and settings unchanged, none of its
acknowledged writes lost) or starts a new generation beside the live one (its number,
a key prefix no generation with keys uses, leftovers of a crash deleted). And
:func:`cleanup_loads`: the interrupted loads nobody will resume, dropped.

The session it hands back writes the generation (:class:`~.session.LoadSession`).
"""

from __future__ import annotations

import logging
import os
import socket
import time

from ..codec import get_codec
from ..errors import LoadInProgress
from .generations import collect, retained_prefixes
from .keys import GENERATION, LOADS, TRASH, generation_prefix, validate_model_name
from .lease import Lease
from .records import LAYOUT_VERSION, LoadState
from .registry import Store
from .session import LoadSession, drop_load

log = logging.getLogger("vecserve.load")

__all__ = ["begin_load", "cleanup_loads"]


def begin_load(
    store: Store,
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
    lease = Lease.take(store, name)
    try:
        state = store.get_load(name)
        if state is not None and resume:
            session = _resumed(store, state, lease, dim=dim, codec=codec, fingerprint=fingerprint)
            if session is not None:
                return session
            restart = True  # acknowledged writes were lost: load it again from the start
        if state is not None:
            if not restart:
                raise LoadInProgress(
                    f"an interrupted load of {name!r} exists ({state.written:,} vectors "
                    f"of {state.source or 'unknown source'} written); pass --resume to "
                    f"continue it or --restart to drop it and start again"
                )
            drop_load(store, name, lease=lease)
        raw = store.registry_entry(name)
        if raw is not None:  # never retire a generation of a layout it cannot read
            store.model_from_entry(name, raw)
        store.purge_trash(name)
        collect(store, name, lease=lease)  # retired generations whose pins expired
        generation, prefix = _new_generation(store, name)
        now = time.time()
        state = LoadState(
            name=name,
            dim=dim,
            codec=codec,
            generation=generation,
            prefix=prefix,
            buckets=store.default_buckets,
            source=source,
            source_format=source_format,
            fingerprint=fingerprint,
            declared_count=declared_count,
            started=now,
            updated=now,
            host=socket.gethostname(),
            pid=os.getpid(),
            layout=LAYOUT_VERSION,
        )
        session = LoadSession(store, state, codec_obj, lease)
        store.delete_generation(prefix, state.buckets)  # leftovers of a crash, if any
        with store.errors(f"starting a load of {name!r}"):
            store.client.hset(LOADS, name, state.to_json())
        return session
    except BaseException:
        lease.release()
        raise


def _resumed(
    store: Store, state: LoadState, lease: Lease, *, dim: int, codec: str, fingerprint: str
) -> LoadSession | None:
    """The session that continues the interrupted load ``state``; None when writes it
    made are lost (it is loaded again from the start); LoadInProgress when the source or
    its settings changed."""
    name = state.name
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
    session = LoadSession(store, state, get_codec(codec), lease)
    lost = session.lost_writes()
    if not lost:
        session.rewind()
        return session
    log.warning(
        "the interrupted load of %s lost %s of its %s written vectors (a failover, "
        "or keys evicted); loading it again from the start",
        name,
        f"{lost:,}",
        f"{state.written:,}",
    )
    return None


def _new_generation(store: Store, name: str) -> tuple[int, str]:
    """``(generation, prefix)`` of a new generation of ``name``: the next number, and a
    prefix no generation that still has keys uses."""
    with store.errors(f"starting a load of {name!r}"):
        generation = int(store.client.hincrby(GENERATION, name, 1))
        busy = {m.prefix for m in store.list_models()}
        busy |= {s.prefix for s in store.list_loads()}
        busy |= {p.decode() for p in store.client.smembers(TRASH)}
    busy |= retained_prefixes(store, name)
    return generation, generation_prefix(name, generation, busy)


def cleanup_loads(store: Store) -> list[str]:
    """Drop every interrupted load whose lease expired, and finish pending deletes."""
    done = []
    for state in store.list_loads():
        try:
            drop_load(store, state.name)
            done.append(f"dropped interrupted load of {state.name} ({state.written:,} vectors)")
        except LoadInProgress:
            done.append(f"skipped {state.name}: a load is running")
    with store.errors("reading trash"):
        trash = [p.decode() for p in store.client.smembers(TRASH)]
    for prefix in trash:
        store.delete_generation(prefix, store.default_buckets)
        done.append(f"deleted leftover keys of {prefix}")
    return done
