"""The one boundary where redis-py's errors become vecserve's: an error reply becomes a
:class:`~vecserve.errors.ServerRefused` (its code named), NOPERM
:class:`~vecserve.errors.PermissionDenied`, a lost connection or a cluster moving slots
:class:`~vecserve.errors.StoreUnavailable`. Messages never carry a password."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import redis

from ..errors import (
    AuthenticationFailed,
    OutOfMemory,
    PermissionDenied,
    PersistenceFailing,
    ReadOnlyServer,
    ServerBusy,
    ServerLoading,
    ServerRefused,
    StoreUnavailable,
    TooManyClients,
    VecserveError,
)

_REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)
#: Every error redis-py or the socket under it raises: what a caller outside the store
#: catches where it falls back to a read that names what failed.
DRIVER_ERRORS = (redis.RedisError, OSError)


# A Redis Cluster that is failing over or resharding: transient, like a lost connection.
_CLUSTER_ERRORS = (
    redis.exceptions.ClusterError,
    redis.exceptions.TryAgainError,
    redis.exceptions.SlotNotCoveredError,
    redis.exceptions.MovedError,
)


_CRED_RE = re.compile(r"(\w+://)([^:@/\s]*)(:[^@/\s]*)?@")


def redact_url(text: str) -> str:
    """``text`` with the password of any URL in it hidden (the user name is kept).

    >>> redact_url("Redis at redis://worker:s3cret@db:6379/0 is down")
    'Redis at redis://worker:***@db:6379/0 is down'
    >>> redact_url("rediss://:s3cret@db")
    'rediss://:***@db'
    """
    return _CRED_RE.sub(lambda m: f"{m[1]}{m[2]}{':***' if m[3] else ''}@", text)


def _url_user(url: str) -> str:
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).username or "default"
    except ValueError:
        return "default"


# Error replies: the code a reply starts with -> (our class, what it means, what to do).
_REFUSALS: dict[str, tuple[type[ServerRefused], str, str]] = {
    "OOM": (
        OutOfMemory,
        "is out of memory (maxmemory reached, nothing it may evict)",
        "raise its maxmemory (CONFIG SET maxmemory ...) or free memory",
    ),
    "READONLY": (
        ReadOnlyServer,
        "is a read-only replica",
        "point vecserve at its primary",
    ),
    "MISCONF": (
        PersistenceFailing,
        "refuses writes because it cannot save its snapshot",
        "fix its dir or disk (see its log), or CONFIG SET stop-writes-on-bgsave-error no",
    ),
    "LOADING": (
        ServerLoading,
        "is still loading its dataset into memory",
        "retry when it has finished",
    ),
    "BUSY": (
        ServerBusy,
        "is busy running a script or function",
        "retry when it ends, or stop it (SCRIPT KILL / FUNCTION KILL)",
    ),
    "NOAUTH": (
        AuthenticationFailed,
        "requires a password",
        "put the user and password in the URL (redis://USER:PASSWORD@host)",
    ),
    "WRONGPASS": (
        AuthenticationFailed,
        "refused our credentials",
        "check the user and password in the URL",
    ),
    "MAXCLIENTS": (
        TooManyClients,
        "has reached its maxclients limit",
        "close idle clients or raise maxclients, then retry",
    ),
    "MASTERDOWN": (
        ServerLoading,
        "is a replica that lost its primary",
        "retry when the link is back, or point vecserve at the primary",
    ),
}


def _reply_code(exc: redis.RedisError) -> str:
    """The code of an error reply (``OOM``, ``READONLY``, ...; ``ERR`` for a plain one).

    redis-py strips the code from the messages of the replies it has classes for.
    """
    if isinstance(exc, redis.BusyLoadingError):
        return "LOADING"
    msg = str(exc)
    if "max number of clients" in msg.lower():
        return "MAXCLIENTS"
    if isinstance(exc, redis.AuthenticationError):
        code = getattr(exc, "status_code", None) or ""
        return code if code in ("NOAUTH", "WRONGPASS") else "WRONGPASS"
    code = getattr(exc, "status_code", None)
    if code:
        return str(code)
    for known, cls in (
        ("OOM", redis.exceptions.OutOfMemoryError),
        ("READONLY", redis.exceptions.ReadOnlyError),
    ):
        if isinstance(exc, cls):
            return known
    head = msg.split(" ", 1)[0]
    return head if head.isupper() and head.isalpha() else "ERR"


def refusal(exc: redis.RedisError, url: str, what: str, *, user: str = "") -> ServerRefused | None:
    """The :class:`ServerRefused` of an error reply from ``url`` while doing ``what``,
    or None when ``exc`` is no error reply (a lost connection, a timeout).

    >>> str(refusal(redis.exceptions.ReadOnlyError("You can't write against a read only "
    ...     "replica."), "redis://r:6379/0", "writing vectors"))  # doctest: +ELLIPSIS
    "Redis at redis://r:6379/0 is a read-only replica (READONLY: You can't write ...) while ..."
    """
    code = _reply_code(exc)
    replied = isinstance(exc, (redis.ResponseError, redis.AuthenticationError))
    if not replied and code not in ("LOADING", "MAXCLIENTS"):
        return None
    msg = str(exc).strip()
    if msg.startswith(code + " "):
        msg = msg[len(code) + 1 :]
    msg = msg.split(". ", 1)[0].rstrip(".")  # its first sentence: the message stays short
    cls, meaning, todo = _REFUSALS.get(
        code, (ServerRefused, "answered an error", "see the server's log")
    )
    said = msg if code == "MAXCLIENTS" else f"{code}: {msg}"
    if code == "WRONGPASS" and user:
        meaning = f"refused the credentials of user {user!r}"
    return cls(f"Redis at {url} {meaning} ({said}) while {what}: {todo}", reply=code)


@contextlib.contextmanager
def translate_errors(url: str, what: str) -> Iterator[None]:
    """The one boundary where redis-py's errors become ours: an error reply becomes a
    :class:`ServerRefused` (:func:`refusal`), NOPERM :class:`PermissionDenied`, a lost
    connection :class:`StoreUnavailable` (:func:`translated`).

    Messages never carry a password: ``url`` is redacted. Nothing is computed unless an
    error passes (the read path enters this once a round trip).
    """
    try:
        yield
    except (redis.RedisError, OSError) as exc:
        if isinstance(exc, VecserveError):
            raise  # already ours (raised inside the block): it says what it means
        ours = translated(exc, url, what)
        if ours is None:
            raise
        raise ours from exc


def translated(exc: Exception, url: str, what: str) -> Exception | None:
    """Our exception for redis-py's ``exc`` (None: not ours to translate); what
    :func:`translate_errors` raises."""
    user, url = _url_user(url), redact_url(url)
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return PermissionDenied(
            f"Redis user {user!r} at {url} may not do this ({what}): {exc}. "
            "Grant it to the user (`vecserve acl --help` prints least-privilege roles)"
        )
    if isinstance(exc, _CLUSTER_ERRORS):
        return StoreUnavailable(
            f"Redis Cluster at {url} is failing over or moving slots ({what}): {exc}; retry"
        )
    if isinstance(exc, redis.RedisError):
        refused = refusal(exc, url, what, user=user)
        if refused is not None:
            return refused
    if isinstance(exc, _REDIS_ERRORS):
        return StoreUnavailable(f"Redis at {url} is unreachable while {what}: {exc}")
    return None


def describe_client(client) -> str:
    try:
        kw = client.connection_pool.connection_kwargs
        if "path" in kw:
            return f"unix://{kw['path']}"
        return f"redis://{kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"
    except AttributeError:
        return "redis-cluster"
