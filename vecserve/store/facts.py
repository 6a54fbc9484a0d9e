"""What a server's INFO proves about keys it acknowledged: the commit's completeness gate.

A key a single server acknowledged leaves it only through one of these, and INFO counts
every one of them:

==============================================  =============================================
how a key goes (or the vocabulary changes)      what INFO shows
==============================================  =============================================
a restart (persistence loses the tail)          ``run_id`` changes
a failover, a resync, ``REPLICAOF``             ``role`` / ``master_replid`` change
eviction (a policy, ``maxmemory`` lowered)      ``evicted_keys`` grows
expiry (someone gave it a TTL)                  ``expired_keys`` grows
a command that deletes, renames or moves it,    its ``calls`` in commandstats (commands run
a flush, ``SWAPDB``, ``DEBUG``, a ``*STORE``    by scripts count under their own names):
onto it, a TTL; a list rewritten in place       :data:`REMOVERS`
the counters reset (``CONFIG RESETSTAT``)       ``config|resetstat`` calls; fewer MSET calls
                                                than the load's own
==============================================  =============================================

So a load that read these facts before its first write and finds every one unchanged at
its commit (its own MSETs aside) has proof that every key it wrote, each acknowledged by
a checked reply, is still there: nothing is asked key by key. Any change anywhere on the
server (another application's DEL, an eviction of anyone's key) only means the proof is
not there, and the commit checks every key instead (:meth:`.registry.Store.check_rows`).
Not seen: a module deleting keys through its own API, bypassing commands, and a key
someone overwrote with ``SET ... EX`` whose TTL lapsed but that the server has not
reclaimed yet; the commit also asks a sample of the keys.

>>> a = KeyspaceFacts("r", "master", "x", 0, 0, {"mset": 5})
>>> a.changed_since(a, msets=0) is None
True
>>> KeyspaceFacts("r", "master", "x", 0, 0, {"mset": 9, "del": 1}).changed_since(a, msets=4)
'1 DEL ran'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import redis

from ..errors import PermissionDenied, ServerRefused
from .records import ModelInfo
from .registry import RowCheck, Store

__all__ = ["REMOVERS", "KeyspaceFacts", "Witness", "read_facts"]

#: Commands that can remove a string key, rename or move it, give it a TTL, reset the
#: counters this proof reads, or rewrite a list in place (commandstats names; a
#: subcommand is ``cmd|sub``). Other commands on a string key fail (WRONGTYPE).
REMOVERS = frozenset(
    [
        *("del", "unlink", "getdel", "getex", "rename", "renamenx", "move", "migrate"),
        *("delifeq", "delex", "msetex"),  # newer servers' conditional deletes, TTLs
        *("restore", "restore-asking", "copy", "swapdb", "flushdb", "flushall"),
        *("expire", "pexpire", "expireat", "pexpireat", "persist", "setex", "psetex"),
        *("sort", "sunionstore", "sinterstore", "sdiffstore", "zunionstore", "zinterstore"),
        *("zdiffstore", "zrangestore", "georadius", "georadiusbymember", "geosearchstore"),
        *("bitop", "debug", "replicaof", "slaveof", "failover"),
        *("config|resetstat", "module|load", "module|loadex"),
        # a list rewritten in place: the vocabulary must stay the blobs the load pushed
        *("lset", "linsert", "ltrim", "lrem", "lpop", "rpop", "lmpop", "blpop", "brpop"),
        *("blmpop", "lmove", "blmove", "rpoplpush", "brpoplpush"),
    ]
)


@dataclass(frozen=True)
class KeyspaceFacts:
    """One server's facts that change whenever a key could have left it."""

    run_id: str
    role: str
    replid: str
    evicted: int
    expired: int
    calls: dict[str, int]  # commandstats calls of REMOVERS and MSET

    def changed_since(self, before: KeyspaceFacts, *, msets: int) -> str | None:
        """Why a key written since ``before`` could be gone, or None when nothing could
        have removed one; ``msets``: the MSETs the load itself sent since."""
        if (self.run_id, self.role, self.replid) != (before.run_id, before.role, before.replid):
            return "the server restarted, failed over or resynchronised"
        if self.evicted != before.evicted:
            return f"{self.evicted - before.evicted:,} keys evicted"
        if self.expired != before.expired:
            return f"{self.expired - before.expired:,} keys expired"
        if self.calls.get("mset", 0) < before.calls.get("mset", 0) + msets:
            return "the server's counters were reset"
        ran = [
            f"{self.calls[c] - before.calls.get(c, 0):,} {c.upper()}"
            for c in sorted(self.calls)
            if c != "mset" and self.calls[c] != before.calls.get(c, 0)
        ]
        return " and ".join(ran) + " ran" if ran else None


def read_facts(client: redis.Redis) -> KeyspaceFacts | None:
    """The facts of a single server (one INFO round trip), or None where it refuses INFO
    (a least-privilege user; then every key is checked)."""
    try:
        info = client.execute_command("INFO", "server", "replication", "stats", "commandstats")
    except (redis.ResponseError, PermissionDenied, ServerRefused):
        return None
    calls = {}
    for name, stat in info.items():
        if isinstance(name, str) and name.startswith("cmdstat_"):
            cmd = name[len("cmdstat_") :]
            if cmd in REMOVERS or cmd == "mset":
                calls[cmd] = int(stat["calls"])
    return KeyspaceFacts(
        run_id=str(info.get("run_id", "")),
        role=str(info.get("role", "")),
        replid=str(info.get("master_replid", "")),
        evicted=int(info.get("evicted_keys", 0)),
        expired=int(info.get("expired_keys", 0)),
        calls=calls,
    )


class Witness:
    """What one load process saw of a single server while writing a generation: the
    facts before its first write, its MSETs, its words' hashes, a sample of its keys.

    A fresh load (nothing written before this process) on a single server keeps one;
    a resumed load or a cluster does not, and its commit checks every key.
    """

    #: keys of each batch kept for the commit's sample (its first and last)
    SAMPLE_PER_BATCH = 2

    def __init__(self, store: Store, *, fresh: bool):
        self.store = store
        self.why_not = "" if fresh and not store.is_cluster else "a resumed load, or a cluster"
        self.before: KeyspaceFacts | None = None
        self.started = False
        self.msets = 0
        self.ngram_rows = 0
        self.hashes: list[np.ndarray] = []
        self.sample: list[bytes] = []

    @property
    def active(self) -> bool:
        """Whether the commit may rest on this witness (else it checks every key)."""
        return not self.why_not

    def before_write(self) -> None:
        """Read the facts, once, before the first write."""
        if self.started or not self.active:
            return
        self.started = True
        with self.store.errors("reading the server's INFO before the first write"):
            self.before = read_facts(self.store.client)
        if self.before is None:
            self.why_not = "the Redis user may not run INFO"

    def wrote(
        self, keys: Sequence[bytes], hashes: np.ndarray | None = None, *, ngrams: bool = False
    ) -> None:
        """One MSET of ``keys`` acknowledged (with its words' ``hashes``, or n-gram rows)."""
        if not self.active:
            return
        self.msets += 1
        if ngrams:
            self.ngram_rows += len(keys)
        elif hashes is not None:
            self.hashes.append(hashes)
        if keys:
            self.sample += [keys[0], keys[-1]][: self.SAMPLE_PER_BATCH]

    def proof(self, model: ModelInfo) -> tuple[RowCheck | None, str]:
        """``(check, "")`` when the facts prove every row of ``model`` present (the
        sampled keys asked too), else ``(None, why not)``."""
        if not self.active or self.before is None:
            return None, self.why_not or "nothing was written"
        if sum(len(h) for h in self.hashes) != model.count:
            return None, "rows were written by another process"
        if model.ngram_buckets and self.ngram_rows < model.ngram_buckets:
            return None, "n-gram rows were written by another process"
        with self.store.errors(f"checking {model.name!r} against the server's INFO"):
            after = read_facts(self.store.client)
            if after is None:
                return None, "the Redis user may not run INFO"
            why = after.changed_since(self.before, msets=self.msets)
            if why:
                return None, why
            pipe = self.store.client.pipeline(transaction=False)
            for lo in range(0, len(self.sample), 10_000):
                pipe.execute_command("EXISTS", *self.sample[lo : lo + 10_000])
            present = sum(int(n) for n in pipe.execute()) if self.sample else 0
        if present != len(self.sample):
            return None, f"{len(self.sample) - present:,} sampled keys missing"
        known = np.sort(np.concatenate(self.hashes)) if self.hashes else np.zeros(0, np.uint64)
        if len(known):
            known = known[np.concatenate(([True], known[1:] != known[:-1]))]
        checked = model.count + model.ngram_buckets
        return RowCheck(checked=checked, missing=0, words=[], hashes=known), ""
