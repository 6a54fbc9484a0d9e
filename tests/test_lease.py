"""The load lease (vecserve/store/lease.py) against real servers: a lease another live
holder has refuses; a lease this process released that the server brought back (a
restart replaying its append-only file) is taken back at once, and a load interrupted
by such a restart resumes on its first retry instead of waiting for the lease to expire."""

from __future__ import annotations

import logging
import os
import socket

import numpy as np
import pytest

from tests.helpers import durable_valkey, kill_on_third_batch
from vecserve.embedded import NO_RETRY
from vecserve.errors import LoadInProgress
from vecserve.loader import load_file
from vecserve.store import Lease, Store
from vecserve.store.keys import lock_key
from vecserve.store.lease import LEASE_SECONDS


def test_a_lease_another_live_process_holds_refuses(store):
    """A live process of this host (our parent) holds it: refused, the key untouched."""
    theirs = f"{socket.gethostname()}:{os.getppid()}:0badc0de"
    store.client.set(lock_key("M"), theirs, ex=LEASE_SECONDS)
    with pytest.raises(LoadInProgress, match=f"being loaded by {theirs} right now"):
        Lease.take(store, "M")
    assert store.client.get(lock_key("M")) == theirs.encode()


def test_a_lease_this_process_still_holds_refuses(store):
    """Another load of the same model in this process (say, another thread) is refused:
    only a lease this process released can be taken back."""
    held = Lease.take(store, "M")
    with pytest.raises(LoadInProgress, match=f"being loaded by {held.token} right now"):
        Lease.take(store, "M")
    assert store.client.get(lock_key("M")) == held.token.encode()
    held.release()
    assert store.client.get(lock_key("M")) is None


def test_a_released_lease_the_server_brought_back_is_taken_back(store):
    """The state a restart from the append-only file leaves: the key again holds the token
    this process released. The next take replaces it with its own token at once."""
    old = Lease.take(store, "M")
    old.release()
    store.client.set(lock_key("M"), old.token, ex=LEASE_SECONDS)  # as the AOF replays it
    new = Lease.take(store, "M")
    assert new.token != old.token
    assert store.client.get(lock_key("M")) == new.token.encode()
    assert 0 < store.client.ttl(lock_key("M")) <= LEASE_SECONDS
    with pytest.raises(LoadInProgress):  # and it is a lease like any other
        Lease.take(store, "M")
    new.release()


def test_a_load_resumes_after_a_restart_that_replays_its_lease(
    tmp_path, small_bin, monkeypatch, caplog
):
    """Redis is killed mid-load and restarted from its append-only file before the retry:
    the lease key comes back holding this loader's own released token. The load's one
    retry takes it back, resumes after the 100 vectors written and commits the whole file
    (before the fix the retry was refused: "being loaded by <this process> right now")."""
    path, tokens, vectors = small_bin
    server = durable_valkey(tmp_path)
    restored: list[bytes | None] = []

    class RestartBeforeTheRetry(logging.Handler):
        """On the retry's warning (the lease's release already failed: the server was
        gone), the server starts again from its append-only file."""

        def emit(self, record: logging.LogRecord) -> None:
            if "resuming in" in record.getMessage():
                server.start()
                again = Store.from_url(server.url)
                restored.append(again.client.get(lock_key("K")))
                again.close()

    kill_on_third_batch(monkeypatch, server)
    handler = RestartBeforeTheRetry()
    logging.getLogger("vecserve.loader").addHandler(handler)
    store = Store.from_url(server.url, retry=NO_RETRY)
    try:
        with caplog.at_level(logging.INFO, logger="vecserve"):
            info = load_file(path, name="K", store=store, batch_size=50, progress=False, retries=1)
        mine = f"{socket.gethostname()}:{os.getpid()}:".encode()
        assert restored and restored[0] is not None and restored[0].startswith(mine)
        assert info.count == len(tokens)
        assert any(
            "resuming the load of K after 100 vectors" in r.getMessage() for r in caplog.records
        )
        got = store.vocab(info)
        matrix, found = info.codec_obj.decode_values(store.fetch(info, got), info.dim)
        assert got == tokens and found.all() and np.array_equal(matrix, vectors)
        assert store.client.get(lock_key("K")) is None  # released after the commit
    finally:
        logging.getLogger("vecserve.loader").removeHandler(handler)
        store.close()
        server.stop()
