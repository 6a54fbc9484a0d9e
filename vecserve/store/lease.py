"""The load lease: one process at a time loads a given model.

A lease is ``vecserve:lock:NAME`` holding ``host:pid:nonce``, set with ``SET NX EX`` and
refreshed while the load writes. Two kinds of lease are taken over at once instead of
waiting for them to expire, each by a script that compares the token first, so that a
lease renewed or taken by another process meanwhile is never touched:

- one whose holder is a process of this host that no longer exists (a loader killed with
  SIGKILL): deleted (:data:`~.lua.DELETE_IF_EQUAL`), then taken;
- this process's own lease, released, that the server brought back: a server restarted
  from its append-only file (or a replica promoted before the release reached it)
  restores the key with the token this process gave up, often because the release
  itself found the server gone. Only the releasing process can tell that nobody holds
  it, so it remembers the tokens it released for as long as such a key can live, and a
  retry of its load (``load_file(retries=...)``) takes the lease back
  (:data:`~.lua.TAKE_IF_EQUAL`). A lease this process still holds (another thread's load
  of the model) refuses like any other.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from typing import TYPE_CHECKING

from ..errors import LoadInProgress, StoreUnavailable
from ..procs import pid_alive
from .keys import lock_key
from .lua import DELETE_IF_EQUAL, TAKE_IF_EQUAL

if TYPE_CHECKING:
    from .registry import Store

__all__ = ["LEASE_SECONDS", "Lease", "holder_is_dead"]

#: Seconds a lease lives unless its holder refreshes it.
LEASE_SECONDS = 30

log = logging.getLogger("vecserve.load")

#: The tokens of leases this process released, and when (monotonic): a restored key
#: expires at most :data:`LEASE_SECONDS` after its last refresh, which came before the
#: release, so a token is forgotten after twice that (a margin for the two clocks).
_released: dict[str, float] = {}
_released_lock = threading.Lock()


def _remember_released(token: str) -> None:
    now = time.monotonic()
    with _released_lock:
        for old, when in list(_released.items()):
            if now - when > 2 * LEASE_SECONDS:
                del _released[old]
        _released[token] = now


def _released_here(holder: str) -> bool:
    """True if ``holder`` is the token of a lease this process released (lately)."""
    with _released_lock:
        when = _released.get(holder)
    return when is not None and time.monotonic() - when <= 2 * LEASE_SECONDS


def holder_is_dead(holder: str) -> bool:
    """True if a lease token ``host:pid:nonce`` names a process of this host that is gone."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another machine's process: only its lease expiry can tell
    return not pid_alive(int(pid))


class Lease:
    """A per-model load lock (``SET NX EX``); the load refreshes it with its writes
    (:class:`~.session.LoadSession` sends the ``SET ... EX`` in a batch's round trip)."""

    def __init__(self, store: Store, name: str, token: str):
        self.store, self.key, self.token = store, lock_key(name), token

    def release(self) -> None:
        """End the lease if it still holds this token. Where the server cannot be reached,
        or later brings the key back, this process can take it back (:meth:`take`)."""
        _remember_released(self.token)
        with contextlib.suppress(StoreUnavailable), self.store.errors("releasing lease"):
            if self.store.client.get(self.key) == self.token.encode():
                self.store.client.delete(self.key)

    @classmethod
    def take(cls, store: Store, name: str) -> Lease:
        """Lock model ``name`` for loading (``SET NX EX``), refreshed while writing.

        A lease whose holder is a process of this host that no longer exists (a loader
        killed with SIGKILL), or one this process released that the server brought back
        (a restart from its append-only file), is taken over at once instead of waiting
        for it to expire. Raises LoadInProgress while another holder's lease lives.
        """
        token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        key = lock_key(name)
        with store.errors(f"locking {name!r}"):
            for _ in range(2):
                if store.client.set(key, token, nx=True, ex=LEASE_SECONDS):
                    return cls(store, name, token)
                holder = store.client.get(key)
                if holder is not None and _released_here(holder.decode()):
                    # compare-and-set: the lease this process gave up, and only while it is
                    if store.client.eval(TAKE_IF_EQUAL, 1, key, holder, token, LEASE_SECONDS):
                        log.info("took back %s's lease this process had released", name)
                        return cls(store, name, token)
                    continue
                if holder is None or not holder_is_dead(holder.decode()):
                    break
                # compare-and-delete, so a lease renewed meanwhile is never taken
                store.client.eval(DELETE_IF_EQUAL, 1, key, holder)
            ttl = store.client.ttl(key)
            who = holder.decode() if holder else "?"
            raise LoadInProgress(
                f"model {name!r} is being loaded by {who} right now (its lease expires in "
                f"{max(ttl, 0)}s if that process died)"
            )
