"""One round trip to Redis, described without doing it: the sans-I/O seam of every read.

A read is written once, as a generator of *steps*: it yields a :class:`Round` (the
commands of one round trip and what they are for, for error messages), receives the
list of their replies, and finally ``return`` s its result. Steps compose with
``yield from``. The drivers only move bytes: :func:`~.syncwire.run` drives steps on a
redis-py client (:mod:`.syncwire`), :func:`~.asyncwire.arun` on a ``redis.asyncio`` one
(:mod:`.asyncwire`), so the code that decides what to send and how to read the replies
is the same for the sync client, the asyncio client and the service.

This module is that contract alone (no I/O, no redis-py): :class:`Round`, :data:`PAUSE`,
:func:`drive` on any function that executes a round, and the two helpers every driver
shares (:func:`checked`, :func:`advance`).

>>> def steps():
...     (pong,) = yield Round([("PING",)], "pinging")
...     return pong
>>> drive(steps(), lambda rnd: [b"PONG"])
b'PONG'
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, TypeVar

__all__ = ["PAUSE", "Round", "Steps", "advance", "checked", "drive"]

T = TypeVar("T")
Steps = Generator["Round", list, T]


class Round:
    """The commands of one round trip. ``tolerate``: a command's ``ResponseError`` comes
    back as its reply instead of being raised (the steps decide)."""

    __slots__ = ("commands", "keys", "tolerate", "what")

    def __init__(self, commands: list[tuple], what: str, *, tolerate: bool = False):
        self.commands = commands
        self.what = what
        self.tolerate = tolerate
        self.keys = sum(len(c) for c in commands if type(c) is not bytes)


#: What steps yield between chunks of long work (decoding 10,000 rows): no round trip;
#: :func:`~.asyncwire.arun` lets the event loop run, :func:`drive` goes straight on. Its
#: reply: [].
PAUSE = Round([], "pausing")


def drive(steps: Steps[T], execute: Callable[[Round], list]) -> T:
    """Run ``steps`` to their result, each round through ``execute``."""
    try:
        rnd = next(steps)
        while True:
            rnd = steps.send([] if rnd is PAUSE else execute(rnd))
    except StopIteration as stop:
        return stop.value


def checked(replies: list, rnd: Round) -> list:
    """``replies`` of ``rnd``, its first error reply raised unless the round tolerates them.

    >>> checked([b"x", ValueError("no")], Round([], "reading", tolerate=True))
    [b'x', ValueError('no')]
    """
    if not rnd.tolerate:
        for r in replies:
            if isinstance(r, Exception):
                raise r
    return replies


def advance(steps: Steps, replies: list | None) -> tuple[bool, Any]:
    """Send ``replies`` into ``steps`` (None: start them): ``(False, next round)`` or
    ``(True, result)``; for a driver that cannot block in :func:`drive` (a coroutine)."""
    try:
        return False, steps.send(replies)
    except StopIteration as stop:
        return True, stop.value
