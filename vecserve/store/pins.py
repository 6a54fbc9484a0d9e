"""Pins: a reader's lease on one generation of a model, so that no collector deletes it
while the reader reads it (:class:`Pin`). What a pin protects, the retired generations a
model keeps and their collection, is :mod:`.generations`.

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
from typing import TypeVar

from .. import config
from ..errors import GenerationChanged, ModelNotFound, PinLost, VecserveError

# the import path of ``vecserve models history / rollback / cleanup`` (vecserve/cli/models.py);
from .keys import MODELS, pin_id, pin_key, pins_key
from .records import ModelInfo
from .registry import Store
from .wire import Round, Steps

T = TypeVar("T")

log = logging.getLogger("vecserve.pins")

__all__ = [
    "Pin",
    "keep_alive_async",
]


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
