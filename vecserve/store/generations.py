"""The generations a model keeps: the history of retired generations, their collection,
rollback.

A commit *retires* the generation it replaces instead of deleting it: the old registry
entry moves to ``vecserve:history:NAME`` (:func:`retire`) and its keys stay until
:func:`collect` finds that nothing needs them. A retired generation is needed while

- a live **pin** holds it (:class:`~.pins.Pin`: a lease its holder renews; collectors see
  it as a :class:`PinState`, :func:`live_pins`), or
- it is among the ``keep`` most recently retired ones (``VECSERVE_KEEP_GENERATIONS`` of
  the model's last load, stored with the history; 0 by default: only the live
  generation stays, as without pins).

**Collection** (deleting the retired generations nothing needs) runs under the model's
load lease, where vecserve has write rights: in every load of the model (when it begins
and when it commits), in :func:`rollback`, ``vecserve models history`` and ``vecserve
models cleanup``. A worker killed while it holds a pin stops renewing; its pin key
expires within one lease and the next of those frees the generation. Workers never
collect: deleting vectors is not theirs to do (``vecserve acl``).

>>> [(g.info.generation, g.live, g.kept) for g in history(store, "GOOGLE_W2V")]  # doctest: +SKIP
[(7, True, False), (6, False, True)]
>>> now, replaced = rollback(store, "GOOGLE_W2V")   # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass

from .. import config
from ..errors import LoadInProgress, ModelNotFound, VecserveError
from .keys import (
    EVENTS,
    HISTORY_KEEP,
    MODELS,
    TRASH,
    history_key,
    pin_generation,
    pin_key,
    pins_key,
    validate_model_name,
)
from .lease import Lease
from .records import ModelInfo
from .registry import Store

log = logging.getLogger("vecserve.pins")

__all__ = [
    "Generation",
    "PinState",
    "collect",
    "collect_all",
    "drop_history",
    "history",
    "keep_setting",
    "live_pins",
    "retained_prefixes",
    "retire",
    "rollback",
]


@dataclass(frozen=True)
class PinState:
    """One live pin as collectors see it: its holder and the lease it has left."""

    generation: int
    holder: str
    ttl: float  # seconds


@dataclass(frozen=True)
class Generation:
    """A generation of a model that still has its keys: the live one or a retired one."""

    info: ModelInfo
    live: bool
    retired: float = 0.0  # unix time it stopped being live; 0 for the live one
    kept: bool = False  # retired, and among the ``keep`` newest
    pins: tuple[PinState, ...] = ()


def keep_setting(explicit: int | None = None) -> int:
    """:func:`vecserve.config.keep_generations`, a bad value as a VecserveError."""
    try:
        return config.keep_generations(explicit)
    except ValueError as exc:
        raise VecserveError(str(exc)) from exc


def retire(store: Store, info: ModelInfo) -> None:
    """Record ``info`` (the live generation, about to be replaced) as retired: its keys
    stay until :func:`collect` finds nothing needs them. Written before the flip, so a
    crash between the two leaves a record of the still-live generation, which
    :func:`collect` drops without touching its keys."""
    record = json.dumps({"retired": time.time(), "info": asdict(info)}, sort_keys=True)
    with store.errors(f"retiring generation {info.generation} of {info.name!r}"):
        store.client.hset(history_key(info.name), str(info.generation), record)


def live_pins(store: Store, name: str, *, prune: bool = False) -> dict[int, list[PinState]]:
    """The live pins of ``name`` by generation (``prune``: drop the index's dead ids)."""
    with store.errors(f"reading the pins of {name!r}"):
        ids = sorted(store.client.smembers(pins_key(name)))
        if not ids:
            return {}
        pipe = store.client.pipeline(transaction=False)
        for i in ids:
            pipe.pttl(pin_key(name, i.decode()))
        ttls = pipe.execute()
        out: dict[int, list[PinState]] = {}
        dead = []
        for i, ttl in zip(ids, ttls, strict=True):
            gen, holder = pin_generation(i)
            if ttl is None or ttl < 0 or gen < 0:  # gone, or no TTL: never holds anything
                dead.append(i)
                continue
            out.setdefault(gen, []).append(PinState(gen, holder, ttl / 1000))
        if prune and dead:
            for i in dead:  # a pin key without a TTL is no lease: end it
                store.client.delete(pin_key(name, i.decode()))
            store.client.srem(pins_key(name), *dead)
    return out


def history(store: Store, name: str) -> list[Generation]:
    """The generations of ``name`` that have keys, newest generation first: the live one
    and the retired ones (pinned, kept for rollback, or not yet collected)."""
    validate_model_name(name)
    retired, keep = store.retired(name)
    try:
        live = store.get_model(name)
    except ModelNotFound:
        if not retired:
            raise
        live = None
    pins = live_pins(store, name)
    kept = _kept(retired, live, keep)
    out = []
    if live is not None:
        out.append(Generation(live, True, pins=tuple(pins.get(live.generation, ()))))
    for gen, (when, info) in retired.items():
        if live is not None and gen == live.generation:
            continue
        out.append(Generation(info, False, when, gen in kept, tuple(pins.get(gen, ()))))
    return sorted(out, key=lambda g: -g.info.generation)


def _kept(retired, live: ModelInfo | None, keep: int) -> set[int]:
    """The ``keep`` most recently retired generations (the live one is no retired one)."""
    order = sorted(
        (g for g in retired if live is None or g != live.generation),
        key=lambda g: (-retired[g][0], -g),
    )
    return set(order[:keep])


def retained_prefixes(store: Store, name: str) -> set[str]:
    """Key prefixes of the retired generations of ``name`` that still have keys (a new
    load must not reuse one)."""
    retired, _ = store.retired(name)
    return {info.prefix for _, info in retired.values()}


def collect(
    store: Store, name: str, *, keep: int | None = None, lease: Lease | None = None
) -> list[ModelInfo]:
    """Delete the retired generations of ``name`` that nothing needs; return them.

    A retired generation stays while a live pin holds it or while it is among the
    ``keep`` most recently retired (``keep`` None: the number the model's last load
    stored; given, it is stored). Runs under ``lease`` (the model's load lease), else
    takes it: raises LoadInProgress while a load of the model runs.
    """
    validate_model_name(name)
    own = None if lease is not None else Lease.take(store, name)
    try:
        if keep is not None:
            with store.errors(f"storing how many generations {name!r} keeps"):
                store.client.hset(history_key(name), HISTORY_KEEP, int(keep))
        retired, stored = store.retired(name)
        keep = stored if keep is None else keep
        if not retired:
            if not keep:  # nothing to remember: no key left behind
                with store.errors(f"collecting {name!r}"):
                    store.client.delete(history_key(name))
            return []
        with store.errors(f"reading model {name!r}"):
            raw = store.client.hget(MODELS, name)
        live = ModelInfo.from_json(raw) if raw is not None else None
        pinned = live_pins(store, name, prune=True)
        kept = _kept(retired, live, keep)
        gone = []
        for gen, (_, info) in sorted(retired.items()):
            if live is not None and (gen == live.generation or info.prefix == live.prefix):
                # a crash between retire and the flip: the live generation's own keys
                with store.errors(f"collecting {name!r}"):
                    store.client.hdel(history_key(name), str(gen))
                continue
            if gen in kept or gen in pinned:
                continue
            with store.errors(f"collecting generation {gen} of {name!r}"):
                store.client.sadd(TRASH, info.prefix)  # an interrupted delete is finished later
                store.client.hdel(history_key(name), str(gen))
            store.delete_generation(info.prefix, info.buckets)
            log.info("deleted generation %d of %s (no pin holds it)", gen, name)
            gone.append(info)
        if not keep and len(gone) == len(retired):
            with store.errors(f"collecting {name!r}"):
                store.client.delete(history_key(name))
        return gone
    finally:
        if own is not None:
            own.release()


def rollback(store: Store, name: str, generation: int | None = None) -> tuple[ModelInfo, ModelInfo]:
    """Make a retired generation of ``name`` live again; return ``(now_live, replaced)``.

    ``generation`` None: the most recently retired one. One ``HSET`` of the registry
    entry flips readers to it, as a commit does (readers never mix generations). The
    generation it replaces is retired; then :func:`collect` runs with the stored
    ``keep`` (so with ``keep`` 0 the replaced one goes unless pinned). Holds the
    model's load lease: refused while a load of the model runs.
    """
    validate_model_name(name)
    lease = Lease.take(store, name)
    try:
        current = store.get_model(name)
        retired, _ = store.retired(name)
        retired.pop(current.generation, None)
        if not retired:
            raise VecserveError(
                f"model {name!r} has no retired generation to roll back to: set "
                "VECSERVE_KEEP_GENERATIONS before loading to keep some (`vecserve models "
                f"history {name}`)"
            )
        if generation is None:
            generation = max(retired, key=lambda g: (retired[g][0], g))
        if generation not in retired:
            have = ", ".join(str(g) for g in sorted(retired, reverse=True))
            raise VecserveError(
                f"generation {generation} of {name!r} is not retained (live: "
                f"{current.generation}; retained: {have})"
            )
        target = retired[generation][1]
        retire(store, current)
        with store.errors(f"rolling {name!r} back to generation {generation}"):
            store.client.hset(MODELS, name, target.to_json())  # the flip
            store.client.hdel(history_key(name), str(generation))
            store.client.publish(
                EVENTS,
                json.dumps({"event": "commit", "model": name, "generation": generation}),
            )
        collect(store, name, lease=lease)
        if store.after_commit is not None:
            store.after_commit()
        return target, current
    finally:
        lease.release()


def drop_history(store: Store, name: str) -> list[ModelInfo]:
    """End every pin of ``name`` and delete all its retired generations (a model being
    deleted): pinned views of it then raise PinLost."""
    retired, _ = store.retired(name)
    with store.errors(f"dropping the pins of {name!r}"):
        ids = store.client.smembers(pins_key(name))
        for i in ids:
            store.client.delete(pin_key(name, i.decode()))
        store.client.delete(pins_key(name))
    gone = []
    for gen, (_, info) in sorted(retired.items()):
        with store.errors(f"deleting generation {gen} of {name!r}"):
            store.client.sadd(TRASH, info.prefix)
            store.client.hdel(history_key(name), str(gen))
        store.delete_generation(info.prefix, info.buckets)
        gone.append(info)
    with store.errors(f"deleting the history of {name!r}"):
        store.client.delete(history_key(name))
    return gone


def collect_all(store: Store) -> list[str]:
    """:func:`collect` every model that has retired generations (``vecserve models
    cleanup``); a model being loaded is skipped (its load collects when it commits)."""
    with store.errors("listing models"):
        names = {m.name for m in store.list_models()}
    done = []
    for name in sorted(names):
        try:
            for info in collect(store, name):
                done.append(f"deleted generation {info.generation} of {name} (no pin holds it)")
        except LoadInProgress:
            done.append(f"skipped the history of {name}: a load is running")
    return done
