"""The query planner: one typed most_similar query in, one answer out.

:class:`Query` (:mod:`vecserve.search.query`) is a most_similar query as a caller states
it, its items read once; :class:`Planner` checks it against the limits and the snapshot
of one model generation (each item fitted to the model:
:func:`~vecserve.search.wire.fit_item`), replaces a fastText model's out-of-vocabulary
words by their vectors, and answers it by the cheapest path that gives the asked-for
answer:

- approximate (asked with ``approx``, the index met its recall target, a plain top-n
  query): the approximate index, its candidates re-scored exactly;
- exact, plain top-n, an IVF index ready: its stored rows scanned and the answer proven
  the full scan's (:meth:`AnnIndex.exact_most_similar`), else the snapshot;
- anything else (``restrict_vocab``, ``cosmul``, ``topn=None``): the snapshot.

Errors of the query are the caller's (:class:`~vecserve.errors.BadQuery` 422,
:class:`~vecserve.errors.QueryRejected` 400, :class:`~vecserve.errors.TokenNotFound`
404; together :data:`QUERY_ERRORS`) and are raised before any search; an error inside a
search is not the caller's and propagates as it is (a 500, never a 400). A batch
(:meth:`Planner.answer_batch`) reports each query's own error in that query's slot and
answers the others.

Vectors of out-of-vocabulary words and of text items come from a :class:`RowSource` (the
service's reader of the model): the planner never reads Redis itself. The snapshot
(``index``) and the approximate indexes (``ann``, an
:class:`~vecserve.search.ann.AnnManager`) are given; nothing here knows of HTTP.

>>> import numpy as np
>>> from vecserve.search.snapshot import SimilarityIndex
>>> sim = SimilarityIndex.from_arrays(["a", "b", "c"], np.eye(3, dtype=np.float32) + 0.1)
>>> Planner(sim).answer(Query(positive=("a",), topn=1)).results
[('b', 0.18699...)]
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..errors import BadQuery, GenerationChanged, QueryRejected, TokenNotFound
from ..subwords import swap_oov, unit_rows
from .arith import require_input
from .query import Query
from .wire import Text, Weighted, fit_item

__all__ = ["QUERY_ERRORS", "Answer", "Limits", "Planner", "Query", "RowSource"]

#: the errors that are one query's own (its words, items, limits), raised by
#: :meth:`Planner.plan` before any search: a batch reports them in the query's slot
QUERY_ERRORS = (BadQuery, QueryRejected, TokenNotFound)


def _quiet_overflow(method):
    """Run ``method`` with NumPy's floating-point warnings off: a caller's vector whose
    components overflow float32 makes gensim's arithmetic give NaN scores (the answer
    holds them: null in JSON), not a warning per query in the service's log."""

    @functools.wraps(method)
    def quiet(*args, **kwargs):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return method(*args, **kwargs)

    return quiet


class RowSource(Protocol):
    """Where a planner reads what its snapshot does not hold: the rows of a fastText
    model's out-of-vocabulary words (built from their n-grams by the reader core) and the
    vectors of texts (the model's text rule); the service's
    :class:`~vecserve.service.deps.ModelRows`."""

    def subword_rows(self, words: list[str]) -> tuple[int, np.ndarray]:
        """``(generation read, one float32 row per word)``."""
        ...

    def text_rows(self, texts: list[str]) -> tuple[int, np.ndarray, np.ndarray]:
        """``(generation read, one float32 vector per text, tokens used per text)``."""
        ...


@dataclass(frozen=True)
class Limits:
    """The most a query may ask (the service's settings)."""

    max_words: int = 1000
    max_topn: int = 1000
    max_batch: int = 256


@dataclass
class Answer:
    """``results`` (``[(key, cosine)]``) or ``similarities`` (``topn=None``), and how:
    one model generation's answer (``model``, ``generation``)."""

    model: str
    generation: int
    results: list | None = None
    similarities: np.ndarray | None = None
    approximate: bool = False
    approximate_status: str | None = None  # approx asked, answered exactly: why
    subwords: list[str] | None = None  # fastText: the words built from n-grams


@dataclass
class _Plan:
    query: Query
    positive: list = field(default_factory=list)
    negative: list = field(default_factory=list)
    subwords: list[str] | None = None


class Planner:
    """Answers :class:`Query` objects against one snapshot ``index`` of model ``name``.

    ``ann``: the approximate indexes (or None); ``rows``: a :class:`RowSource`, needed
    for a fastText model's out-of-vocabulary words (``subwords=True``); ``limits``:
    :class:`Limits`.
    """

    def __init__(
        self,
        index,
        *,
        name: str = "",
        ann=None,
        rows: RowSource | None = None,
        subwords: bool = False,
        limits: Limits | None = None,
    ):
        self.index = index
        self.name = name or index.name
        self.ann = ann
        self.rows = rows
        self.subwords = subwords and rows is not None
        self.limits = limits or Limits()

    # -- planning -------------------------------------------------------------------------

    def _items(self, raw, q: Query, oov: list | None, texts: dict) -> list:
        if raw is None:
            return []
        if isinstance(raw, str):
            raw = [raw]
        out = []
        for item in raw:
            key = item.key if isinstance(item, Weighted) else item
            if isinstance(key, Text):  # its vector, embedded by _texts
                item = Weighted(texts[key], item.weight) if item is not key else texts[key]
            parsed = fit_item(item, dim=self.index.dim)
            key = parsed[0] if isinstance(parsed, tuple) else parsed
            if isinstance(key, (str, int)) and key not in self.index:
                if oov is None or not isinstance(key, str):
                    raise TokenNotFound(str(key), self.name)
                oov.append(key)
            if q.cosmul and isinstance(parsed, (tuple, int)):
                raise BadQuery("cosmul takes words and vectors only (no positions or weights)")
            out.append(parsed)
        return out

    def plan(self, q: Query) -> _Plan:
        """Check ``q`` against the limits and the snapshot; its items resolved."""
        if q.topn is not None and q.topn > self.limits.max_topn:
            raise BadQuery(f"topn={q.topn} is over the limit of {self.limits.max_topn}")
        oov: list[str] | None = [] if self.subwords else None
        texts = self._texts(q)
        pos = self._items(q.positive, q, oov, texts)
        neg = self._items(q.negative, q, oov, texts)
        if oov:
            pos, neg = self._subword_items(oov, pos, neg)
        for name, items in (("positive", pos), ("negative", neg)):
            if len(items) > self.limits.max_words:  # each list: what the schema declares
                raise BadQuery(f"{len(items)} {name} items; the limit is {self.limits.max_words}")
        require_input(pos, neg, cosmul=q.cosmul)  # gensim's ValueError, and its message
        built = list(dict.fromkeys(oov)) if oov is not None else None
        return _Plan(q, pos, neg, built)

    def _texts(self, q: Query) -> dict:
        """The vector of each text item of ``q`` (``{Text: row}``): every text of the
        query embedded in one read, from the snapshot's generation; a text with no token
        the model knows is :class:`TokenNotFound`, as an unknown word is."""
        lists = [x for x in (q.positive, q.negative) if not isinstance(x, str)]
        keys = (i.key if isinstance(i, Weighted) else i for items in lists for i in items)
        texts = list(dict.fromkeys(k.text for k in keys if isinstance(k, Text)))
        if not texts:
            return {}
        for name, items in zip(("positive", "negative"), (q.positive, q.negative), strict=True):
            if not isinstance(items, str) and len(items) > self.limits.max_words:  # before a read
                raise BadQuery(f"{len(items)} {name} items; the limit is {self.limits.max_words}")
        if self.rows is None:
            raise QueryRejected("text items need the model's text rule (no reader here)")
        generation, rows, used = self.rows.text_rows(texts)
        if generation != self.index.generation:
            raise GenerationChanged(f"model {self.name!r} changed generation; retry")
        for text, n in zip(texts, used, strict=True):
            if not n:
                raise TokenNotFound(text, self.name)
        return {Text(t): row for t, row in zip(texts, rows, strict=True)}

    def _subword_items(self, oov: list[str], pos, neg):
        """Out-of-vocabulary words replaced by their unit vectors (gensim normalises each
        word's vector), read from the snapshot's generation."""
        words = list(dict.fromkeys(oov))
        generation, rows = self.rows.subword_rows(words)  # type: ignore[union-attr]
        if generation != self.index.generation:
            raise GenerationChanged(f"model {self.name!r} changed generation; retry")
        vecs = dict(zip(words, unit_rows(rows), strict=True))
        return swap_oov(pos, vecs), swap_oov(neg, vecs)

    def _approximate(self, q: Query):
        """The approximate index that answers ``q``, or None (answered exactly)."""
        if q.approx and q.plain and self.ann is not None:
            return self.ann.approximate(self.index)
        return None

    def _why_exact(self, q: Query) -> str:
        if q.plain and self.ann is not None:
            return self.ann.pending(self.index)
        return "not applicable"

    # -- answering ------------------------------------------------------------------------

    @_quiet_overflow
    def answer(self, q: Query) -> Answer:
        """One query's answer (raises the query's errors before searching)."""
        plan = self.plan(q)
        index = self.index
        ann = self._approximate(q)
        if ann is not None:
            result = ann.most_similar(index, plan.positive, plan.negative, q.topn)
        elif q.cosmul:
            result = index.most_similar_cosmul(plan.positive, plan.negative, topn=q.topn)
        else:
            result = None
            ready = self.ann.ready_index(index) if q.plain and self.ann is not None else None
            if ready is not None:
                result = ready.exact_most_similar(index, plan.positive, plan.negative, q.topn)
            if result is None:
                result = index.most_similar(
                    plan.positive, plan.negative, topn=q.topn, restrict_vocab=q.restrict_vocab
                )
        out = Answer(
            self.name, index.generation, approximate=ann is not None, subwords=plan.subwords
        )
        if q.approx and ann is None:
            out.approximate_status = self._why_exact(q)
        if isinstance(result, np.ndarray):
            out.similarities = result.astype(np.float64)
        else:
            out.results = result
        return out

    @_quiet_overflow
    def answer_batch(self, queries: Sequence[Query]) -> list[Answer | Exception]:
        """Many queries: exact ones in one matrix multiply per group, approximate ones in
        one index call; each query's own error (:data:`QUERY_ERRORS`: an unknown word,
        an empty query, a malformed item, a limit) in its slot instead of an answer, the
        others answered. Errors that are not one query's (a batch over the limit, the
        store, a search) raise."""
        if len(queries) > self.limits.max_batch:
            raise BadQuery(
                f"{len(queries)} queries in one batch; the limit is {self.limits.max_batch}"
            )
        out: list[Answer | Exception] = [None] * len(queries)  # type: ignore[list-item]
        plans: dict[int, _Plan] = {}
        for i, q in enumerate(queries):
            try:
                plans[i] = self.plan(q)
            except QUERY_ERRORS as exc:
                out[i] = exc
        anns = {i: self._approximate(queries[i]) for i in plans}
        for i, a in anns.items():
            out[i] = Answer(self.name, self.index.generation, approximate=a is not None)
        exact = [i for i, a in anns.items() if a is None]
        approx = [i for i, a in anns.items() if a is not None]
        if exact:
            asked = [
                {
                    "positive": plans[i].positive,
                    "negative": plans[i].negative,
                    "topn": queries[i].topn,
                    "restrict_vocab": queries[i].restrict_vocab,
                    "cosmul": queries[i].cosmul,
                }
                for i in exact
            ]
            for i, r in zip(exact, self.index.most_similar_batch(asked), strict=True):
                if isinstance(r, np.ndarray):
                    out[i].similarities = r.astype(np.float64)  # type: ignore[union-attr]
                else:
                    out[i].results = r  # type: ignore[union-attr]
        if approx:
            asked = [(plans[i].positive, plans[i].negative, queries[i].topn) for i in approx]
            got = anns[approx[0]].most_similar_batch(self.index, asked)
            for i, r in zip(approx, got, strict=True):
                out[i].results = r  # type: ignore[union-attr]
        return out

    def gains_from_batch(self, q: Query) -> bool:
        """Whether ``q`` is answered faster among others (:meth:`answer_many`) than
        alone: an approximate query of a ready index, or an exact plain top-n one that
        no IVF index's stored-row shortcut answers (measured: bench/bench_coalesce.py)."""
        if not q.plain:
            return False
        if q.approx and self._approximate(q) is not None:
            return True
        return self.ann is None or self.ann.ready_index(self.index) is None

    @_quiet_overflow
    def answer_many(self, queries: Sequence[Query]) -> list[Answer | Exception]:
        """Each query's :meth:`answer`, the same answer (fields, words, scores to the bit)
        or the error it raises, as if asked alone; unrelated callers' queries coalesced
        (the service's :class:`~vecserve.service.coalesce.Coalescer`) share the work:

        - approximate ones: one index call (:meth:`AnnIndex.most_similar_batch`: each
          list read once for all, a query's answer the same alone or in a batch);
        - exact plain top-n ones, when no IVF index would shortcut them: one blocked GEMM
          (:meth:`SimilarityIndex.most_similar_batch`, proven equal to single answers);
        - anything else: one at a time.
        """
        out: list[Answer | Exception | None] = [None] * len(queries)
        plans: dict[int, _Plan] = {}
        for i, q in enumerate(queries):
            try:
                plans[i] = self.plan(q)
            except Exception as exc:  # this caller's error, not the others'
                out[i] = exc
        approx = {i: a for i in plans if (a := self._approximate(queries[i])) is not None}
        ready = self.ann.ready_index(self.index) if self.ann is not None else None
        gemm = [i for i in plans if i not in approx and queries[i].plain and ready is None]
        if approx:
            ann = next(iter(approx.values()))
            asked = [(plans[i].positive, plans[i].negative, queries[i].topn) for i in approx]
            for i, r in zip(approx, ann.most_similar_batch(self.index, asked), strict=True):
                out[i] = Answer(
                    self.name,
                    self.index.generation,
                    results=r,
                    approximate=True,
                    subwords=plans[i].subwords,
                )
        if len(gemm) > 1:
            asked = [
                {
                    "positive": plans[i].positive,
                    "negative": plans[i].negative,
                    "topn": queries[i].topn,
                }
                for i in gemm
            ]
            for i, r in zip(gemm, self.index.most_similar_batch(asked), strict=True):
                out[i] = Answer(
                    self.name, self.index.generation, results=r, subwords=plans[i].subwords
                )
                if queries[i].approx:
                    out[i].approximate_status = self._why_exact(queries[i])
        for i, q in enumerate(queries):
            if out[i] is None:
                try:
                    out[i] = self.answer(q)
                except Exception as exc:
                    out[i] = exc
        return out  # type: ignore[return-value]
