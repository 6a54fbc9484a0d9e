"""The load lease: one process at a time loads a given model.

A lease is ``vecserve:lock:NAME`` holding ``host:pid:nonce``, set with ``SET NX EX`` and
refreshed while the load writes. A lease whose holder is a process of this host that no
longer exists (a loader killed with SIGKILL) is taken over at once, with a
compare-and-delete, instead of waiting for it to expire.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from typing import TYPE_CHECKING

from ..errors import LoadInProgress, StoreUnavailable
from ..procs import pid_alive
from .keys import lock_key
from .lua import DELETE_IF_EQUAL

if TYPE_CHECKING:
    from .registry import Store

__all__ = ["LEASE_SECONDS", "Lease", "holder_is_dead"]

#: Seconds a lease lives unless its holder refreshes it.
LEASE_SECONDS = 30


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
        with contextlib.suppress(StoreUnavailable), self.store.errors("releasing lease"):
            if self.store.client.get(self.key) == self.token.encode():
                self.store.client.delete(self.key)

    @classmethod
    def take(cls, store: Store, name: str) -> Lease:
        """Lock model ``name`` for loading (``SET NX EX``), refreshed while writing.

        A lease whose holder is a process of this host that no longer exists (a loader
        killed with SIGKILL) is taken over at once instead of waiting for it to expire.
        """
        token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        key = lock_key(name)
        with store.errors(f"locking {name!r}"):
            for _ in range(2):
                if store.client.set(key, token, nx=True, ex=LEASE_SECONDS):
                    return cls(store, name, token)
                holder = store.client.get(key)
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
