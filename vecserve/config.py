"""The library's settings: every ``VECSERVE_*`` variable the library reads, read here.

An explicit argument always wins; an unset or empty variable means "the default". The
HTTP service has its own, larger set (:class:`vecserve.service.settings.Settings`, same
prefix), validated by pydantic; these are the ones the library and the CLI need.

========================  ==============================================================
``VECSERVE_REDIS_URL``    Redis/Valkey URL; unset = the embedded server
``VECSERVE_DATA_DIR``     the embedded server's data dir (platform user data dir)
``VECSERVE_CACHE_DIR``    similarity snapshots and indexes (platform user cache dir)
``VECSERVE_SIMILARITY_URL``  the vecserve HTTP service for whole-matrix calls
``VECSERVE_API_KEY``      the key RedisKeyedVectors sends to that service
``VECSERVE_MODEL_TTL``    seconds a model's registry entry answers metadata calls before
                          it is read again (default 1.0; every client and the service)
``VECSERVE_KEEP_GENERATIONS``  retired generations a load keeps for rollback besides
                          the live one, pinned or not (default 0: only the live one)
``VECSERVE_PIN_LEASE``    seconds a pin lives unless renewed (default 30; renewed
                          every third of it)
========================  ==============================================================

>>> redis_url("redis://localhost:6379/0")
'redis://localhost:6379/0'
>>> redis_url("localhost:6379")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
vecserve.errors.InvalidSetting: redis_url='localhost:6379' has no scheme: ... (try redis://localhost:6379)

A bad value is an :class:`~vecserve.errors.InvalidSetting` naming where it came from (the
variable, or the argument ``redis_url`` / the flag ``--redis-url``) and what is expected.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

from .errors import InvalidSetting

__all__ = [
    "api_key",
    "cache_dir",
    "check_redis_url",
    "data_dir",
    "env",
    "keep_generations",
    "make_dir",
    "model_ttl",
    "pin_lease",
    "redis_url",
    "similarity_url",
]

PREFIX = "VECSERVE_"
DEFAULT_MODEL_TTL = 1.0


def env(name: str) -> str | None:
    """``$VECSERVE_<NAME>``, or None when unset or empty.

    >>> env("SURELY_NOT_SET") is None
    True
    """
    return os.environ.get(PREFIX + name.upper()) or None


def redis_url(explicit: str | None = None) -> str | None:
    """``explicit``, else ``$VECSERVE_REDIS_URL``, else None (= the embedded server);
    a URL that redis-py could not use raises :class:`~vecserve.errors.InvalidSetting`."""
    if explicit:
        return check_redis_url(explicit, "redis_url")
    url = env("REDIS_URL")
    return None if url is None else check_redis_url(url, PREFIX + "REDIS_URL")


#: the URL schemes redis-py connects with
REDIS_SCHEMES = ("redis", "rediss", "unix")
_URL_FORMS = "redis://HOST[:PORT][/DB], rediss://... (TLS) or unix:///PATH"


def check_redis_url(url: str, source: str = "redis_url") -> str:
    """``url`` if redis-py can connect with it, else an
    :class:`~vecserve.errors.InvalidSetting` naming ``source`` (a variable, an argument,
    a flag; empty: the value alone) and the forms expected.

    >>> check_redis_url("unix:///tmp/valkey.sock")
    'unix:///tmp/valkey.sock'
    >>> check_redis_url("redis://u:secret@h:x/0")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    vecserve.errors.InvalidSetting: redis_url='redis://u:***@h:x/0': the port is not a number ...
    >>> check_redis_url("redis://r:port", "--redis-url")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    vecserve.errors.InvalidSetting: --redis-url='redis://r:port': the port is not a number ...
    """
    shown = re.sub(r"(//[^/@]*?:)[^/@]*@", r"\1***@", url)  # never a password
    where = f"{source}={shown!r}" if source else repr(shown)
    if "://" not in url:
        guess = f" (try redis://{url})" if re.fullmatch(r"[\w.-]+(:\d+)?", url) else ""
        raise InvalidSetting(f"{where} has no scheme: expected {_URL_FORMS}{guess}")
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in REDIS_SCHEMES:
            why = f"unknown scheme {parts.scheme + '://'!r}"
        elif scheme == "unix":
            why = "" if parts.path else "no socket path"
        elif not parts.hostname:
            why = "no host"
        else:
            try:
                parts.port  # noqa: B018  (raises ValueError when it is not a port number)
                why = ""
            except ValueError:
                why = "the port is not a number 0-65535"
            db = parts.path.strip("/")
            if not why and db and not db.isdigit():
                why = f"the database {db!r} is not a number"
    except ValueError as exc:  # urlsplit's own refusals (a bad IPv6 literal)
        why = str(exc)
    if why:
        raise InvalidSetting(f"{where}: {why}; expected {_URL_FORMS}")
    return url


def similarity_url(explicit: str | None = None) -> str | None:
    """``explicit``, else ``$VECSERVE_SIMILARITY_URL``, else None (= a local snapshot);
    anything but an http(s) URL raises :class:`~vecserve.errors.InvalidSetting`.

    >>> similarity_url("vecserve-api:8000")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    vecserve.errors.InvalidSetting: similarity_url='vecserve-api:8000' is not an http(s) URL ...
    """
    url, source = (explicit, "similarity_url") if explicit else (env("SIMILARITY_URL"), None)
    if url is None:
        return None
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018  (a port that is not a number raises ValueError)
    except ValueError:
        ok = False
    if not ok:
        raise InvalidSetting(
            f"{source or PREFIX + 'SIMILARITY_URL'}={url!r} is not an http(s) URL of the "
            "vecserve service (expected http://HOST:PORT)"
        )
    return url


def api_key(explicit: str | None = None) -> str | None:
    """``explicit``, else ``$VECSERVE_API_KEY``: the key for the similarity service."""
    return explicit or env("API_KEY")


def model_ttl(explicit: float | None = None) -> float:
    """``explicit``, else ``$VECSERVE_MODEL_TTL``, else 1.0 seconds: how long a model's
    registry entry answers metadata calls (``len``, ``vector_size``) before it is read
    again. Reads of rows never wait for it: each carries the entry.

    >>> model_ttl(0.5)
    0.5
    """
    if explicit is not None:
        return float(explicit)
    raw = env("MODEL_TTL")
    if raw is None:
        return DEFAULT_MODEL_TTL
    try:
        value = float(raw)
    except ValueError:
        raise InvalidSetting(f"VECSERVE_MODEL_TTL={raw!r} is not a number of seconds") from None
    if value < 0:
        raise InvalidSetting(f"VECSERVE_MODEL_TTL={raw!r} is negative")
    return value


def data_dir(explicit: str | os.PathLike | None = None) -> Path:
    """``explicit``, else ``$VECSERVE_DATA_DIR``, else ``<user data dir>/vecserve``."""
    chosen = explicit or env("DATA_DIR")
    if chosen:
        return _dir_path(chosen, "data dir", "--data-dir or $VECSERVE_DATA_DIR")
    from platformdirs import user_data_dir

    return Path(user_data_dir("vecserve", appauthor=False))


def cache_dir(explicit: str | os.PathLike | None = None) -> Path:
    """``explicit``, else ``$VECSERVE_CACHE_DIR``, else ``<user cache dir>/vecserve``.

    >>> cache_dir("/dev/null/cache")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    vecserve.errors.InvalidSetting: the cache dir /dev/null/cache cannot be made: /dev/null is ...
    """
    chosen = explicit or env("CACHE_DIR")
    if chosen:
        return _dir_path(chosen, "cache dir", "$VECSERVE_CACHE_DIR")
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("vecserve", appauthor=False))


def _dir_path(chosen: str | os.PathLike, what: str, setting: str) -> Path:
    """``chosen`` as a path, refused (naming ``setting``) when it, or the nearest part of it
    that exists, is not a directory: it could never be made. Nothing is created here."""
    path = Path(chosen).expanduser()
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise InvalidSetting(
            f"the {what} {path} cannot be made: {existing} is not a directory; set {setting} "
            "to a directory you can write"
        )
    return path


def make_dir(path: Path, what: str, setting: str) -> Path:
    """Make directory ``path`` (and its parents) if need be; one that cannot be made or is
    not a directory raises :class:`~vecserve.errors.InvalidSetting` naming ``what`` it is,
    why, and the ``setting`` that chooses it.

    >>> make_dir(Path("/dev/null/x"), "data dir", "--data-dir")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    vecserve.errors.InvalidSetting: the data dir /dev/null/x cannot be made: /dev/null is not ...
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
        return path
    except OSError as exc:
        why = exc.strerror or str(exc)
        if isinstance(exc, (NotADirectoryError, FileExistsError)):
            blocker = next((p for p in (path, *path.parents) if p.exists()), path)
            why = f"{blocker} is not a directory"
        elif isinstance(exc, PermissionError):
            why = f"permission denied ({exc.filename or path})"
        raise InvalidSetting(
            f"the {what} {path} cannot be made: {why}; set {setting} to a directory you can write"
        ) from exc


def keep_generations(explicit: int | None = None) -> int:
    """``explicit``, else ``$VECSERVE_KEEP_GENERATIONS``, else 0: how many retired
    generations of a model a load keeps without pins, for rollback.

    >>> keep_generations(2)
    2
    """
    return _number("KEEP_GENERATIONS", explicit, 0, int, "a whole number >= 0", lo=0)


def pin_lease(explicit: float | None = None) -> float:
    """``explicit``, else ``$VECSERVE_PIN_LEASE``, else 30: seconds a pin lives unless
    its holder renews it.

    >>> pin_lease(1.5)
    1.5
    """
    return _number("PIN_LEASE", explicit, 30.0, float, "a number of seconds >= 0.1", lo=0.1)


def _number(name, explicit, default, kind, what, *, lo):
    """A numeric setting; a bad value raises InvalidSetting (a ValueError) naming the
    variable."""
    raw = explicit if explicit is not None else env(name)
    if raw is None:
        return default
    try:
        value = kind(raw)
    except (TypeError, ValueError):
        value = None
    if value is None or value < lo or value != value:
        source = name.lower() if explicit is not None else PREFIX + name
        raise InvalidSetting(f"{source} must be {what}, got {raw!r}")
    return value
