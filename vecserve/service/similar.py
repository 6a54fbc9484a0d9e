"""most_similar's answers over HTTP: one :class:`~vecserve.search.query.Query` in (as
FastAPI validated it, or as the fast route built it), the model's planner, one JSON body
out (:func:`answer_body`, for single, coalesced and analogy answers alike).

The routes (:mod:`vecserve.service.routes_similarity`) and the fast route
(:mod:`vecserve.service.fastpath`) call these; the planning itself (exact or approximate,
the IVF shortcut, fastText subword items) is :mod:`vecserve.search.planner`'s.
"""

from __future__ import annotations

from ..errors import BadQuery
from ..search.planner import Answer, Limits, Planner
from ..search.query import Query
from ..search.snapshot import SimilarityIndex
from .deps import AppContext, ModelRows
from .responses import query_error
from .schemas import BatchRequest

__all__ = [
    "answer_body",
    "approx_at_once",
    "most_similar",
    "most_similar_batch",
    "most_similar_many",
    "planner_of",
    "ready_approx",
]


def planner_of(ctx: AppContext, info, index: SimilarityIndex) -> Planner:
    """The planner of generation ``info``'s snapshot; out-of-vocabulary words of a
    fastText model are read through the service's reader (:class:`ModelRows`)."""
    s = ctx.settings
    return Planner(
        index,
        name=info.name,
        ann=ctx.search.ann,
        subwords=info.subwords,
        rows=ModelRows(ctx, info.name),
        limits=Limits(max_words=s.max_words, max_topn=s.max_topn, max_batch=s.max_batch),
    )


def ready_approx(ctx: AppContext, info, q: Query) -> bool:
    """Whether ``q`` is answered by the ready ANN index of generation ``info``, already
    open here: a scan of ~1 ms, no snapshot to map or build."""
    ann = ctx.search.ann
    if ann is None or not q.approx or not q.plain:
        return False
    index = ctx.search.loaded_index(info)
    return index is not None and ann.ready(index)


def approx_at_once(ctx: AppContext, name: str, q: Query) -> tuple:
    """``(info, answer)``: the answer if a ready ANN index gives it at once (on the event
    loop), else None; ``info``, the registry entry read, either way."""
    info = ctx.model(name)
    return info, most_similar(ctx, name, q, info) if ready_approx(ctx, info, q) else None


def answer_body(answer: Answer) -> dict:
    """One most_similar answer as its JSON body (:class:`MostSimilarResponse`)."""
    out: dict = {
        "model": answer.model,
        "generation": answer.generation,
        "approximate": answer.approximate,
    }
    if answer.subwords is not None:
        out["subwords"] = answer.subwords
    if answer.approximate_status is not None:
        out["approximate_status"] = answer.approximate_status
    if answer.similarities is not None:
        out["similarities"] = answer.similarities
    else:
        out["results"] = answer.results
    return out


def most_similar(ctx: AppContext, name: str, q: Query, info=None) -> dict:
    """One most_similar answer (of ``info``, the model's registry entry, if read); with
    others that arrive meanwhile in one batch, when the service coalesces."""
    info = info if info is not None else ctx.model(name)
    index = ctx.search.index(info)
    planner = planner_of(ctx, info, index)
    coalescer = ctx.search.coalescer
    if coalescer is not None and planner.gains_from_batch(q):
        return coalescer.submit(name, (planner, q), most_similar_many)
    return answer_body(planner.answer(q))


def most_similar_many(items: list[tuple[Planner, Query]]) -> list:
    """Coalesced single queries of one model, answered by the first one's planner (its
    generation's snapshot): each its own answer or error."""
    planner = items[0][0]
    answers = planner.answer_many([q for _, q in items])
    return [a if isinstance(a, Exception) else answer_body(a) for a in answers]


def most_similar_batch(ctx: AppContext, name: str, body: BatchRequest) -> dict:
    """Exact queries in one matrix multiply per group; approximate ones in one index call.
    A query's own error (unknown word, empty query, ...) fills its slot of ``errors``
    (``results`` null there); the others are answered."""
    s = ctx.settings
    if len(body.queries) > s.max_batch:  # before the snapshot is mapped
        raise BadQuery(f"{len(body.queries)} queries in one batch; the limit is {s.max_batch}")
    for i, q in enumerate(body.queries):  # the schema's limits: the whole request's error
        if q.topn is not None and q.topn > s.max_topn:
            raise BadQuery(f"queries[{i}]: topn={q.topn} is over the limit of {s.max_topn}")
        for field in ("positive", "negative"):
            items = getattr(q, field)
            if isinstance(items, list) and len(items) > s.max_words:
                raise BadQuery(
                    f"queries[{i}]: {len(items)} {field} items; the limit is {s.max_words}"
                )
    info = ctx.model(name)
    index = ctx.search.index(info)
    answers = planner_of(ctx, info, index).answer_batch([q.query() for q in body.queries])
    results, approximate, errors = [], [], []
    for a in answers:
        failed = isinstance(a, Exception)
        errors.append(query_error(a) if failed else None)
        approximate.append(False if failed else a.approximate)
        if failed:
            results.append(None)
        else:
            results.append(a.similarities if a.similarities is not None else a.results)
    return {
        "model": info.name,
        "generation": index.generation,
        "results": results,
        "approximate": approximate,
        "errors": errors,
    }
