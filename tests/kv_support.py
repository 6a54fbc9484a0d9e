"""Both clients behind one interface, so the same parity cases run against each.

``Blocking`` runs an :class:`~vecserve.AsyncRedisKeyedVectors`' calls to completion on an
event loop of its own: a case written against the sync API (``m[w]``, ``m.similarity``,
``len(m)``, ``w in m``) runs unchanged against the asyncio client, which is the point:
one set of cases, two clients, the same answers.
"""

from __future__ import annotations

import asyncio
import inspect

from vecserve import AsyncRedisKeyedVectors, RedisKeyedVectors

CLIENTS = ["sync", "async"]
_OPEN: list = []  # asyncio clients made by make_kv, closed by close_all


class Blocking:
    def __init__(self, akv: AsyncRedisKeyedVectors):
        self._akv = akv
        self._loop = asyncio.new_event_loop()

    def _wait(self, value):
        return self._loop.run_until_complete(value) if inspect.isawaitable(value) else value

    def __getattr__(self, name):
        attr = getattr(self._akv, name)
        if callable(attr) and not inspect.isawaitable(attr):
            return lambda *a, **k: self._wait(attr(*a, **k))
        return self._wait(attr)

    def __getitem__(self, key):
        return self._wait(self._akv[key])

    def __contains__(self, key) -> bool:
        return self._wait(self._akv.contains(key))

    def __len__(self) -> int:
        self._wait(self._akv.info)  # the entry as of now, as the sync client's len()
        return len(self._akv)

    @property
    def vector_size(self) -> int:
        return self._wait(self._akv.info).dim

    def close(self) -> None:
        if not self._loop.is_closed():
            self._wait(self._akv.aclose())
            self._loop.close()


def make_kv(kind: str, name: str, **kwargs):
    """A sync client, or an asyncio one behind :class:`Blocking`."""
    if kind == "sync":
        return RedisKeyedVectors(name, **kwargs)
    kv = Blocking(AsyncRedisKeyedVectors(name, **kwargs))
    _OPEN.append(kv)
    return kv


def close_all() -> None:
    """Close every asyncio client :func:`make_kv` made (their event loops too)."""
    while _OPEN:
        kv = _OPEN.pop()
        if not kv._loop.is_closed():
            kv.close()
