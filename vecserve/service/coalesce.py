"""Requests that arrive together, answered together: the single-query ``most_similar``
routes coalesced into batches while the service is busy.

No request waits for company. The first request of a model leads: it answers at once,
alone. Requests that arrive while a batch is being answered queue; when the batch ends,
the first queued request leads the next batch, which takes every queued request (up to
``max_batch``). Under no load every request is answered alone, as before; under load,
a batch is as large as the requests that came while the previous one ran, and its work
is shared (an approximate batch reads each inverted list once for all its queries and
uses both cores; an exact batch is one GEMM instead of one pass over the matrix each).

Each caller gets its own answer, or its own error: ``run(items)`` returns one result per
item, an exception standing for that item's error. The handlers that call
:meth:`Coalescer.submit` run in worker threads (FastAPI's pool for ``def`` routes): a
queued request's thread waits on an event, without the GIL.

>>> c = Coalescer(max_batch=8)
>>> c.submit("m", 3, lambda items: [i * 10 for i in items])
30
>>> c.submit("m", -1, lambda items: [ValueError("negative") for i in items])
Traceback (most recent call last):
ValueError: negative
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any

__all__ = ["Coalescer"]

_PENDING = object()


class _Slot:
    __slots__ = ("item", "result", "wake")

    def __init__(self, item: Any):
        self.item = item
        self.result: Any = _PENDING
        self.wake = threading.Event()


class Coalescer:
    """Batches of queued calls per ``key`` (a model): see the module docstring."""

    def __init__(self, max_batch: int = 256):
        self.max_batch = max(1, max_batch)
        self._lock = threading.Lock()
        self._queues: dict[Hashable, list[_Slot]] = {}
        self._leading: set[Hashable] = set()  # keys whose batch is being answered
        #: batches answered and calls in them, for the metrics and the tests
        self.batches = 0
        self.calls = 0

    def submit(self, key: Hashable, item: Any, run: Callable[[Sequence[Any]], Sequence[Any]]):
        """``item``'s result: ``run([..., item, ...])`` answers it with the calls queued
        beside it (``run`` depends on ``key`` only: the leader's answers everyone).
        Raises the exception that stands for ``item``'s result."""
        slot = _Slot(item)
        with self._lock:
            queue = self._queues.setdefault(key, [])
            queue.append(slot)
            lead = key not in self._leading
            if lead:
                self._leading.add(key)
        if not lead:
            slot.wake.wait()  # answered, or handed the lead
        if slot.result is _PENDING:
            self._lead(key, run)
        if isinstance(slot.result, BaseException):
            raise slot.result
        return slot.result

    def _lead(self, key: Hashable, run) -> None:
        with self._lock:
            queue = self._queues[key]
            batch, rest = queue[: self.max_batch], queue[self.max_batch :]
            self._queues[key] = rest
        try:
            results = list(run([s.item for s in batch]))
            if len(results) != len(batch):
                raise RuntimeError(f"{len(results)} results for {len(batch)} calls")
        except Exception as exc:  # not one caller's error: every caller of the batch sees it
            results = [exc] * len(batch)
        for s, r in zip(batch, results, strict=True):
            s.result = r
        with self._lock:
            self.batches += 1
            self.calls += len(batch)
            rest = self._queues.get(key)
            heir = rest[0] if rest else None
            if heir is None:
                self._queues.pop(key, None)
                self._leading.discard(key)
        for s in batch:
            s.wake.set()
        if heir is not None:
            heir.wake.set()  # its result is pending: it leads the next batch
