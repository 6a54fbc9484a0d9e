"""Pinned generations, the generations a model keeps, and rollback.

A commit *retires* the generation it replaces instead of deleting it: the old registry
entry moves to ``vecserve:history:NAME`` and its keys stay until :func:`collect` finds
that nothing needs them. A retired generation is needed while

- a live **pin** holds it (:class:`Pin`: a lease its holder renews), or
- it is among the ``keep`` most recently retired ones (``VECSERVE_KEEP_GENERATIONS`` of
  the model's last load, stored with the history; 0 by default: only the live
  generation stays, as without pins).

**A pin is a key with a TTL**, ``vecserve:pin:NAME:GEN:HOLDER``, written ``SET NX PX``,
renewed ``SET XX PX`` by its holder, listed in the set ``vecserve:pins:NAME``. A key
with a TTL rather than a sorted set of expiry times, because then the server's clock
alone decides expiry (a worker whose clock runs ahead cannot keep a generation alive,
one whose clock runs behind cannot free it early), a pin once expired is gone for good
(``SET XX`` cannot bring it back under a generation being deleted, and tells the holder
its pin is lost), and ``PTTL`` is the lease left. The set is only an index: collectors
drop the ids whose key is gone.

**Taking a pin races a commit**: the pinner writes its pin, then reads the registry
entry; a commit flips the entry, then looks for pins. Whichever goes second sees the
other: either the pinner reads the new entry (and pins that generation instead) or the
committer finds the pin.

**Reading a pinned generation** needs read rights only: the rows' ``MGET``, nothing
else. The holder knows without I/O that its pin lived through a read
(:meth:`Pin.holds`: less than one lease since the last acknowledged renewal was sent);
when it cannot tell, one renewal can (``SET XX`` succeeds only on a pin that never
expired), and otherwise the read raises PinLost.

**Collection** (deleting the retired generations nothing needs) runs under the model's
load lease, where vecserve has write rights: in every load of the model (when it begins
and when it commits), in :func:`rollback`, ``vecserve models history`` and ``vecserve
models cleanup``. A worker killed while it holds a pin stops renewing; its pin key
expires within one lease and the next of those frees the generation. Workers never
collect: deleting vectors is not theirs to do (``vecserve acl``).

>>> pin = Pin.take(store, "GOOGLE_W2V")             # doctest: +SKIP
>>> pin.info.generation, pin.renew()                # doctest: +SKIP
(7, True)
>>> pin.release()                                   # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import TypeVar

from .. import config
from ..errors import GenerationChanged, LoadInProgress, ModelNotFound, PinLost, VecserveError
from .keys import (
    EVENTS,
    HISTORY_KEEP,
    MODELS,
    TRASH,
    history_key,
    pin_generation,
    pin_id,
    pin_key,
    pins_key,
    validate_model_name,
)
from .lease import Lease
from .records import ModelInfo
from .registry import Store
from .wire import Round, Steps

T = TypeVar("T")

log = logging.getLogger("vecserve.pins")

__all__ = [
    "Generation",
    "Pin",
    "PinState",
    "collect",
    "collect_all",
    "drop_history",
    "history",
    "keep_alive_async",
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


def _lease_ms(explicit: float | None) -> int:
    try:
        return max(100, round(1000 * config.pin_lease(explicit)))
    except ValueError as exc:
        raise VecserveError(str(exc)) from exc


class Pin:
    """A lease on one generation of a model: while it lives, no collector deletes it.

    Taken with :meth:`take` (the generation live at that moment), kept alive with
    :meth:`keep_alive` (a daemon thread renewing it every third of the lease) or
    :func:`keep_alive_async` (an asyncio task), ended with :meth:`release`.

    :meth:`holds` says, without I/O, whether the pin is known to live: the server set its
    expiry at least :attr:`lease` after the last acknowledged renewal was *sent*, so
    until then on this process's monotonic clock no collector can have deleted the
    generation (server and client clocks only need to run at the same rate). A read
    of the pinned generation is good when :meth:`holds` is true after its reply came,
    or when a renewal then succeeds (``SET XX`` succeeds only while the key never
    expired); otherwise the pin is lost (:meth:`confirm` raises PinLost).

    Every operation is also written as steps (:mod:`vecserve.store.wire`:
    :meth:`take_steps`, :meth:`renew_steps`, :meth:`confirm_steps`,
    :meth:`release_steps`, :meth:`confirmed`), so the asyncio client drives the same
    code on ``redis.asyncio``.
    """

    def __init__(self, store: Store, info: ModelInfo, holder: str, lease_ms: int):
        self.store, self.info, self.holder, self.lease_ms = store, info, holder, lease_ms
        self.id = pin_id(info.generation, holder)
        self.key = pin_key(info.name, self.id)
        self.value = json.dumps({"since": round(time.time(), 3), "prefix": info.prefix})
        self.lost = False
        self.valid_until = 0.0  # monotonic time up to which the pin surely lives
        self._pid = os.getpid()  # a forked child renews no pin: it asks (confirm)
        self._stop: threading.Event | None = None
        self._released = False

    @property
    def lease(self) -> float:
        """Seconds the pin lives unless renewed."""
        return self.lease_ms / 1000

    # -- steps ---------------------------------------------------------------------------

    @classmethod
    def take_steps(
        cls,
        store: Store,
        name: str,
        *,
        lease: float | None = None,
        info: ModelInfo | None = None,
        attempts: int = 5,
    ) -> Steps[Pin]:
        """:meth:`take` as steps: write the pin (``SET NX PX``), index it, and read the
        registry entry in one round; the entry still naming the pinned generation proves
        no commit flipped before the pin existed (a commit flips, then looks for pins).
        Re-loaded meanwhile: release it and pin the new generation."""
        lease_ms = _lease_ms(lease)
        if info is None:
            info = store.model_from_entry(name, (yield from store.registry_entry_steps(name)))
        holder = cls.holder_token()
        for _ in range(attempts):
            pin = cls(store, info, holder, lease_ms)
            sent = time.monotonic()
            _, _, raw = yield Round(
                [
                    ("SET", pin.key, pin.value, "NX", "PX", lease_ms),
                    ("SADD", pins_key(name), pin.id),
                    ("HGET", MODELS, name),
                ],
                f"pinning {name!r}",
            )
            pin.valid_until = sent + pin.lease  # the key is this pin's alone: it is set
            try:
                current = store.model_from_entry(name, raw)
            except ModelNotFound:
                yield from pin.release_steps()
                raise
            if (current.generation, current.prefix) == (info.generation, info.prefix):
                return pin
            yield from pin.release_steps()
            info = current
        raise GenerationChanged(f"model {name!r} was re-loaded under every try to pin it")

    def renew_steps(self) -> Steps[bool]:
        """Extend the lease (``SET XX PX``: never recreates a pin that is gone); False,
        and :attr:`lost`, once it is gone."""
        sent = time.monotonic()
        (ok,) = yield Round(
            [("SET", self.key, self.value, "XX", "PX", self.lease_ms)],
            f"renewing the pin of {self.info.name!r}",
        )
        if ok is None:
            self.lost = True
        elif not self.lost:
            self.valid_until = max(self.valid_until, sent + self.lease)
        return not self.lost

    def confirm_steps(self) -> Steps[None]:
        """After a read of the pinned generation: no round while :meth:`holds`; else one
        renewal, PinLost if the pin is gone."""
        if not self.holds() and not (yield from self.renew_steps()):
            raise self.lost_error()

    def confirmed(self, steps: Steps[T]) -> Steps[T]:
        """``steps`` (a read of the pinned generation), then :meth:`confirm_steps`."""
        out = yield from steps
        yield from self.confirm_steps()
        return out

    def release_steps(self) -> Steps[None]:
        """End the pin (idempotent; in a process forked after it was taken, only this
        process's view of it ends: the parent's pin stays)."""
        if self._released:
            return
        self.lost = self._released = True
        if self._stop is not None:
            self._stop.set()
        if os.getpid() != self._pid:
            return
        yield Round(
            [("DEL", self.key), ("SREM", pins_key(self.info.name), self.id)],
            f"releasing the pin of {self.info.name!r}",
        )

    # -- the same, driven on the store's sync connections ----------------------------------

    @classmethod
    def take(cls, store: Store, name: str, **options) -> Pin:
        """Pin the generation of ``name`` that is live now (``info``: the one the caller
        believes live; read from the registry when None).

        ``lease``: seconds the pin lives unless renewed (``$VECSERVE_PIN_LEASE``, 30).
        Raises ModelNotFound if the model does not exist, GenerationChanged if it was
        re-loaded under every one of ``attempts`` tries.
        """
        return store.run(cls.take_steps(store, name, **options))

    def renew(self) -> bool:
        """Extend the lease by :attr:`lease`; False (and :attr:`lost`) if the pin is gone."""
        return self.store.run(self.renew_steps())

    def confirm(self) -> None:
        self.store.run(self.confirm_steps())

    def release(self) -> None:
        """End the pin (the generation goes at the next collection if nothing else needs
        it). Idempotent; the renewal thread stops."""
        self.store.run(self.release_steps())

    def holds(self) -> bool:
        """True while the pin surely lives (no I/O; see the class docstring). Never in a
        process forked after the pin was taken: its parent may release it meanwhile."""
        return not self.lost and time.monotonic() < self.valid_until and os.getpid() == self._pid

    def lost_error(self) -> PinLost:
        return PinLost(
            f"the pin on generation {self.info.generation} of {self.info.name!r} expired "
            f"(not renewed within {self.lease:g}s) or was dropped: its vectors may be gone; "
            "pin the model again"
        )

    @classmethod
    def holder_token(cls) -> str:
        """``host:pid:nonce``: who holds a pin (shown by ``vecserve models history``)."""
        return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    def keep_alive(self) -> Pin:
        """Renew the pin every third of its lease on a daemon thread until :meth:`release`
        (or until the pin is lost); a renewal that fails on the network is retried
        sooner, and the pin stays good as long as one succeeds within the lease."""
        if self._stop is None:
            self._stop = threading.Event()
            name = f"vecserve-pin-{self.info.name}-{self.info.generation}"
            threading.Thread(target=self._renew_loop, name=name, daemon=True).start()
        return self

    def _renew_loop(self) -> None:
        stop = self._stop
        assert stop is not None
        wait = self.lease / 3
        while not stop.wait(wait):
            try:
                if not self.renew():
                    return
                wait = self.lease / 3
            except VecserveError as exc:  # a blip: try again soon, within the lease
                log.warning("renewing the pin on %s failed: %s", self.info.name, exc)
                wait = self.lease / 10

    def __repr__(self) -> str:
        return f"<Pin {self.info.name!r} generation {self.info.generation} ({self.holder})>"


async def keep_alive_async(pin: Pin, run: Callable[[Steps], Awaitable]) -> None:
    """Renew ``pin`` every third of its lease until it is lost or the task is cancelled
    (the asyncio client runs this as a task). ``run(steps)`` drives steps on the
    client's connections."""
    wait = pin.lease / 3
    while not pin.lost:
        await asyncio.sleep(wait)
        try:
            if not await run(pin.renew_steps()):
                return
        except VecserveError as exc:
            log.warning("renewing the pin on %s failed: %s", pin.info.name, exc)
            wait = pin.lease / 10
            continue
        wait = pin.lease / 3


# -- the history ---------------------------------------------------------------------------


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
