"""Least-privilege Redis users for vecserve's roles, as ``ACL SETUSER`` lines.

- ``worker`` (``RedisKeyedVectors`` in Celery workers) and ``api`` (``vecserve serve``):
  read-only. ``+@read +@connection`` less ``@dangerous`` (so no ``INFO``, ``KEYS``,
  ``CLIENT KILL``), keys readable only (``%R~``), plus what cache invalidation needs
  (``SUBSCRIBE`` to ``__redis__:invalidate``; ``CLIENT TRACKING`` is in ``@connection``)
  and, on a Redis Cluster, the slot map (``CLUSTER SLOTS``/``SHARDS``, ``READONLY``);
  ``EVAL_RO`` for fastText models' one-round-trip read (a script that can only read:
  the server refuses any write from it, and the key rules still apply).
  Reading a pinned generation (``kv.pin()``) needs nothing more: the rows' ``MGET`` and
  an ``EXISTS`` of the pin key. Holding a pin does, and only the ``worker`` gets it:
  ``SET`` (taking a pin ``NX PX``, renewing it ``XX PX``), ``SADD`` (indexing it),
  ``DEL`` and ``SREM`` (releasing it), on the pin keys alone (``%W~vecserve:pin:*``,
  ``%W~vecserve:pins:*``, one model's with ``--model``): never a vector, the registry
  or another model's pins.
- ``loader`` (``vecserve load``, ``vecserve train``): reads and writes one model's keys
  and the shared registry hashes, publishes commit events, runs the lease's one script,
  and writes each batch in one ``MULTI``/``EXEC`` (``@transaction``: all or nothing, so
  a refused write never counts as written). It also gets ``INFO`` (and only that of
  ``@dangerous``): the load's pre-flight reads ``maxmemory``, ``used_memory`` and
  ``maxmemory_policy`` from ``INFO memory`` to refuse, in one line before writing
  anything, a model that cannot fit or a server whose policy may evict its keys. INFO
  shows server statistics and settings, no data and no secrets; the loader is an
  operator's tool, and without it a load that does not fit stops half-way instead
  (``check skipped``, the writes then catch it). Readers never get it: they load nothing.

- ``maintainer`` (a loader of any model, ``vecserve models cleanup`` on a schedule): the
  loader's rights on every key (``~*``), never ``@dangerous`` beyond ``INFO``.
- ``admin``: every command on every key and channel: the operator's own user (``ACL``,
  ``CONFIG``, ``INFO``), for a server whose ``default`` user is disabled.

vecserve detects a cluster with ``HELLO``, never ``INFO``, so these users suffice.

An ACL file (``--aclfile``, read by the server at start) keeps the users across restarts,
where ``ACL SETUSER`` alone lasts until the server stops. :func:`write_aclfile` puts a
user's line in one (``user NAME ...``, the password as its SHA-256, ``#<hex>``, so the
file holds no password), keeps the other users' lines, and disables the ``default`` user
when the file does not name it: a server started with the file never has an open default
(:data:`DEFAULT_OFF` says why that user keeps its permissions).

>>> print(setuser_line("worker", user="w", password="pw"))  # doctest: +NORMALIZE_WHITESPACE
ACL SETUSER w reset on >pw resetchannels &__redis__:invalidate %R~* -@all +@read
+@connection -@dangerous +subscribe +unsubscribe +eval_ro +cluster|slots +cluster|shards
+readonly %W~vecserve:pins:* %W~vecserve:pin:* +set +sadd +srem +del
"""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
from pathlib import Path

from .errors import VecserveError
from .store.layout import (
    EVENTS,
    SHARED_METADATA,
    model_key_patterns,
    pin_key_patterns,
    replication_marker,
)

__all__ = ["DEFAULT_OFF", "ROLES", "aclfile_line", "setuser_line", "write_aclfile"]

INVALIDATE_CHANNEL = "__redis__:invalidate"
_CLUSTER = ["+cluster|slots", "+cluster|shards", "+readonly"]
# EVAL_RO: fastText reads (Store.read_rows_subwords) in one read-only script
_READER = [
    "-@all",
    "+@read",
    "+@connection",
    "-@dangerous",
    "+subscribe",
    "+unsubscribe",
    "+eval_ro",
]
# Holding a pin (Pin.take / renew / release), on pin keys only (%W~): worker only
_PINNER = ["+set", "+sadd", "+srem", "+del"]
ROLES = {
    "worker": "read-only (but its pins): RedisKeyedVectors in workers",
    "api": "read-only: the HTTP service (vecserve serve)",
    "loader": "writes one model (--model) and vecserve's registry",
    "maintainer": "writes every model and the registry: loads of any model, models cleanup",
    "admin": "every command, every key: the operator's user (ACL, CONFIG, INFO)",
}
#: The ``default`` user of an ACL file written by vecserve when the file does not name it:
#: off and without a password, so no connection is ever it (unauthenticated ones get
#: NOAUTH, ``AUTH default ...`` gets WRONGPASS). Its permissions stay whole on purpose:
#: at a restart the server replays its AOF as the default user and re-checks every
#: MULTI/EXEC against that user's permissions, silently dropping the transactions it
#: refuses (redis/redis#14541, valkey-io/valkey#3983: Redis 7, Valkey 8). vecserve writes
#: every batch in MULTI/EXEC, so a default user without permissions loses the models.
DEFAULT_OFF = "user default off resetpass ~* &* +@all"


def setuser_line(
    role: str, *, user: str | None = None, model: str | None = None, password: str | None = None
) -> str:
    """The ``ACL SETUSER`` line of ``role`` for ``user`` (default ``vecserve-<role>``).

    ``model`` limits a worker's or the API's reads to that model (and the registry), and
    is required for a loader. ``password`` defaults to a fresh random one.
    """
    if role not in ROLES:
        raise VecserveError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    user = user or f"vecserve-{role}"
    password = password or secrets.token_urlsafe(24)
    head = ["ACL", "SETUSER", user, "reset", "on", f">{password}", "resetchannels"]
    if role == "admin":
        return " ".join([*head, "~*", "&*", "+@all"])
    if role in ("loader", "maintainer"):
        if role == "loader" and not model:
            raise VecserveError("a loader writes one model: name it with --key NAME")
        if role == "maintainer" and model:
            raise VecserveError("a maintainer writes every model: leave out --key")
        # the scratch keys a commit writes before WAIT (Store.wait_for_replicas)
        markers = replication_marker("*")
        patterns = (*model_key_patterns(model), *SHARED_METADATA, markers) if model else ("*",)
        keys = [f"~{p}" for p in patterns]
        rights = [
            "-@all",
            "+@read",
            "+@write",
            "+@connection",
            "+@transaction",
            "-@dangerous",
            "+eval",
            "+info",
        ]
        return " ".join([*head, f"&{EVENTS}", *keys, *rights, "+publish", *_CLUSTER])
    if model:
        keys = [f"%R~{p}" for p in (*model_key_patterns(model), *SHARED_METADATA)]
    else:
        keys = ["%R~*"]
    line = [*head, f"&{INVALIDATE_CHANNEL}", *keys, *_READER, *_CLUSTER]
    if role == "worker":
        line += [*(f"%W~{p}" for p in pin_key_patterns(model)), *_PINNER]
    return " ".join(line)


def aclfile_line(setuser: str) -> str:
    """An ``ACL SETUSER`` line (:func:`setuser_line`) as a line of an ACL file: ``user
    NAME rules``, its ``>password`` replaced by ``#<sha256 hex>``.

    >>> aclfile_line("ACL SETUSER w reset on >pw ~*")  # doctest: +ELLIPSIS
    'user w reset on #30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4 ~*'
    """
    words = setuser.split()
    if words[:2] != ["ACL", "SETUSER"] or len(words) < 3:
        raise VecserveError(f"not an ACL SETUSER line: {setuser[:40]!r}")
    rules = [
        "#" + hashlib.sha256(w[1:].encode()).hexdigest() if w.startswith(">") else w
        for w in words[3:]
    ]
    return " ".join(["user", words[2], *rules])


def write_aclfile(path: str | Path, lines: list[str]) -> list[str]:
    """Put ``lines`` (``user NAME ...``) in the ACL file ``path``, replacing those users'
    lines and keeping the others'; adds :data:`DEFAULT_OFF` when no line names ``default``.

    Written whole to a temporary file in the same folder, then renamed over ``path`` (a
    server reading it meanwhile sees the old file or the new one), mode 0600. Returns
    what it did, one line each, for the command to print.
    """
    path = Path(path)
    try:
        old = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    except (OSError, UnicodeDecodeError) as exc:
        raise VecserveError(f"cannot read the ACL file {path}: {exc}") from exc

    def user_of(line: str) -> str | None:
        words = line.split()
        return words[1] if len(words) > 1 and words[0] == "user" else None

    for line in lines:
        if user_of(line) is None:
            raise VecserveError(f"not an ACL file line (user NAME rules...): {line[:40]!r}")
    for n, line in enumerate(old, 1):  # the server refuses a file with any other line
        if line.strip() and user_of(line) is None:
            raise VecserveError(
                f"{path}:{n}: not an ACL file (each line is `user NAME rules...`): "
                f"{line.strip()[:40]!r}; nothing written"
            )
    new_users = {user_of(line) for line in lines}
    kept = [ln for ln in old if ln.strip() and user_of(ln) not in new_users]
    done = [f"{'replaced' if any(user_of(ln) == u for ln in old) else 'added'} user {u}"
            for u in (user_of(line) for line in lines)]  # fmt: skip
    if not any(user_of(ln) == "default" for ln in [*kept, *lines]):
        kept.insert(0, DEFAULT_OFF)
        done.append("disabled user default (the file did not name it)")
    text = "\n".join([*kept, *lines]) + "\n"
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise VecserveError(f"cannot write the ACL file {path}: {exc.strerror}") from exc
    return done
