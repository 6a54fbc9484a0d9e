"""A most_similar query: the one type from the HTTP request to the planner.

:class:`Query` is what :class:`~vecserve.search.planner.Planner` answers, what the
service's routes and fast route hand it, and what the library's callers build. Its items
are read once, when it is built (:func:`~vecserve.search.wire.read_item`: words,
positions, :class:`~vecserve.search.wire.Vector`, :class:`~vecserve.search.wire.Text`,
:class:`~vecserve.search.wire.Weighted` items); what depends on the model (a vector's
length, a text's vector) is settled when it is planned.

A plain dataclass: the base install (``RedisKeyedVectors`` imports the planner) has no
pydantic. The service's request bodies (:mod:`vecserve.service.schemas`) validate the
same JSON, items read by the same :func:`~vecserve.search.wire.read_item`, and build a
:class:`Query` in one step (``body.query()``); reading an item already read returns it.

>>> Query(positive=["king", ["woman", 2.0]], topn=3).positive
('king', Weighted(key='woman', weight=2.0, either=False))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .wire import Item, read_item

__all__ = ["Query"]


def _read(items: Sequence[Any] | str | None) -> tuple[Item, ...] | str:
    if items is None:
        return ()
    if isinstance(items, str):  # a string, even "", is one word (gensim's _ensure_list)
        return items
    return tuple(read_item(i) for i in items)


@dataclass(frozen=True)
class Query:
    """One most_similar query: ``positive`` / ``negative`` items (a string is one word,
    as in gensim), ``topn`` (None: every similarity), ``restrict_vocab``, ``cosmul``
    (3CosMul), ``approx`` (the approximate index when one is ready). A malformed item
    is :class:`~vecserve.errors.BadQuery` when the query is built."""

    positive: Sequence[Any] | str = ()
    negative: Sequence[Any] | str = ()
    topn: int | None = 10
    restrict_vocab: int | None = None
    cosmul: bool = False
    approx: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "positive", _read(self.positive))
        object.__setattr__(self, "negative", _read(self.negative))

    @property
    def plain(self) -> bool:
        """A top-n query an index can answer (no ``restrict_vocab``, no cosmul)."""
        return bool(self.topn) and not self.restrict_vocab and not self.cosmul
