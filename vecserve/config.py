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
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "api_key",
    "cache_dir",
    "data_dir",
    "env",
    "keep_generations",
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
    """``explicit``, else ``$VECSERVE_REDIS_URL``, else None (= the embedded server)."""
    return explicit or env("REDIS_URL")


def similarity_url(explicit: str | None = None) -> str | None:
    """``explicit``, else ``$VECSERVE_SIMILARITY_URL``, else None (= a local snapshot)."""
    return explicit or env("SIMILARITY_URL")


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
        raise ValueError(f"VECSERVE_MODEL_TTL={raw!r} is not a number of seconds") from None
    if value < 0:
        raise ValueError(f"VECSERVE_MODEL_TTL={raw!r} is negative")
    return value


def data_dir(explicit: str | os.PathLike | None = None) -> Path:
    """``explicit``, else ``$VECSERVE_DATA_DIR``, else ``<user data dir>/vecserve``."""
    chosen = explicit or env("DATA_DIR")
    if chosen:
        return Path(chosen).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("vecserve", appauthor=False))


def cache_dir(explicit: str | os.PathLike | None = None) -> Path:
    """``explicit``, else ``$VECSERVE_CACHE_DIR``, else ``<user cache dir>/vecserve``."""
    chosen = explicit or env("CACHE_DIR")
    if chosen:
        return Path(chosen).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("vecserve", appauthor=False))


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
    """A numeric setting; a bad value raises ValueError naming the variable."""
    raw = explicit if explicit is not None else env(name)
    if raw is None:
        return default
    try:
        value = kind(raw)
    except (TypeError, ValueError):
        value = None
    if value is None or value < lo or value != value:
        source = name.lower() if explicit is not None else PREFIX + name
        raise ValueError(f"{source} must be {what}, got {raw!r}")
    return value
