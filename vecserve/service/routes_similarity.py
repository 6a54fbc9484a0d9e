"""The similarity routes: ``/similarity``, ``/n_similarity``, ``/most_similar`` (GET, POST,
``/batch``), ``/doesnt_match``, ``/analogy``.

most_similar's answers are :mod:`vecserve.service.similar`'s (one
:class:`~vecserve.search.query.Query` to the planner); the small questions of a few words
(``similarity``, ``n_similarity``, ``doesnt_match``) are gensim's own calls on a
KeyedVectors of just those words, for exact parity.

The most_similar contract (``POST {similarity_url}/most_similar``), which
:class:`vecserve.keyedvectors.RedisKeyedVectors` speaks when a similarity URL is
configured (:mod:`vecserve.wholematrix`); its items are :mod:`vecserve.search.wire`'s and
``/openapi.json`` declares all of it. Request::

    {"model": "GOOGLE_W2V",                  # optional: the service's default model
     "positive": ["king", "woman"],          # items: a word, an int (vocab position),
     "negative": ["man"],                    #   {"vector": [floats], "dtype": "<f4"}
                                             #   (dtype optional, default "<f8"),
                                             #   a bare list of dim numbers,
                                             #   {"text": "..."} (the vector POST /embed
                                             #   gives it; no known token: 404),
                                             #   or [item, weight]; a string: one word
     "topn": 10,                             # int, or null = all similarities
     "restrict_vocab": null,                 # int or null
     "cosmul": false,                        # true = most_similar_cosmul
     "approx": false}                        # true = the ANN index, when it is ready

Response 200::

    {"model": "GOOGLE_W2V", "generation": 3, "approximate": false,
     "results": [["queen", 0.7118192911148071], ...]}     # when topn is an int
    {"model": "GOOGLE_W2V", "generation": 3, "approximate": false,
     "similarities": [0.1, ...]}                           # when topn is null

plus ``approximate_status`` (approx asked, answered exactly: why) and ``subwords``
(fastText: the words built from n-grams) where they apply. Similarities are float32
values sent as JSON doubles (exact); NaN is ``null``.

Errors: 404 ``{"error": "TokenNotFound", "detail": "Key 'x' not present in vocabulary",
"token": "x", "model": ..., "missing": [...]}`` or ``{"error": "ModelNotFound", ...}``;
422 ``{"error": "BadQuery", ...}`` for an item that is none of the forms, a vector of the
wrong length, a limit; 400 ``{"error": "ValueError", "detail": ...}`` for a query gensim
refuses (nothing positive for cosmul, no input at all); 503 ``{"error":
"StoreUnavailable", ...}`` with ``Retry-After``. ``POST /most_similar/batch`` takes
``{"model", "queries": [...]}`` and answers each query's result or, in its slot of
``errors``, the error it alone would have got.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response

from ..search.query import Query as SearchQuery
from . import similar
from .deps import AppContext, ContextDep, ModelName, ModelQuery, fetch_vectors, model_of
from .params import ERRORS, NegativeQuery, WordsQuery, check_words, split_words
from .responses import json_response, missing_error
from .schemas import (
    AnalogyResponse,
    BatchRequest,
    BatchResponse,
    DoesntMatchRequest,
    DoesntMatchResponse,
    ErrorBody,
    MostSimilarRequest,
    MostSimilarResponse,
    NSimilarityRequest,
    SimilarityResponse,
)

__all__ = ["router"]

router = APIRouter()

_RESPONSES = {400: {"model": ErrorBody}, **ERRORS}


def _small_kv(ctx: AppContext, name: str, words: list[str], *, checked: bool = False):
    """A gensim KeyedVectors of just ``words`` (as stored), for exact-parity small queries
    (``words`` checked against the limits here unless ``checked``)."""
    from gensim.models import KeyedVectors

    if not checked:
        check_words(words, ctx.settings)
    unique = list(dict.fromkeys(words))
    info, matrix, found, built = fetch_vectors(ctx, name, unique)
    kv = KeyedVectors(info.dim, count=0)
    present = [w for w, ok in zip(unique, found, strict=True) if ok]
    if present:
        kv.add_vectors(present, matrix[found])
    missing = [w for w, ok in zip(unique, found, strict=True) if not ok]
    return info, kv, missing, (built if info.subwords else None)


@router.get("/similarity", response_model=SimilarityResponse, responses=_RESPONSES)
def similarity(ctx: ContextDep, name: ModelName, w1: str, w2: str):
    """Cosine similarity of two words (gensim's ``similarity``)."""
    info, kv, missing, built = _small_kv(ctx, name, [w1, w2])
    if missing:
        raise missing_error(name, missing)
    out = {
        "model": info.name,
        "generation": info.generation,
        "similarity": float(kv.similarity(w1, w2)),
    }
    if built is not None:
        out["subwords"] = built
    return json_response(out)


@router.post("/n_similarity", response_model=SimilarityResponse, responses=_RESPONSES)
def n_similarity(ctx: ContextDep, body: NSimilarityRequest, model: ModelQuery = None):
    """Cosine of the means of two word lists; missing words are skipped, as gensim does."""
    name = model_of(body.model, model, ctx.settings)
    check_words(body.ws1, ctx.settings)  # each list within the limit
    check_words(body.ws2, ctx.settings)
    info, kv, missing, _ = _small_kv(ctx, name, body.ws1 + body.ws2, checked=True)
    if not any(w in kv for w in body.ws1) or not any(w in kv for w in body.ws2):
        raise missing_error(name, missing)
    value = float(kv.n_similarity(body.ws1, body.ws2))
    return json_response(
        {
            "model": info.name,
            "generation": info.generation,
            "similarity": value,
            "missing": missing,
        }
    )


@router.get("/most_similar", response_model=MostSimilarResponse, responses=_RESPONSES)
def most_similar_get(
    ctx: ContextDep,
    name: ModelName,
    positive: WordsQuery,
    negative: NegativeQuery = (),
    topn: Annotated[int, Query(ge=0)] = 10,
    restrict_vocab: Annotated[int | None, Query(ge=0)] = None,
    cosmul: bool = False,
    approx: bool = False,
):
    """Words most similar to ``positive`` minus ``negative`` (gensim ``most_similar``);
    a query of ``negative`` words only: ``POST /most_similar``."""
    q = SearchQuery(
        positive=split_words(list(positive), "positive"),
        negative=split_words(list(negative), "negative"),
        topn=topn,
        restrict_vocab=restrict_vocab,
        cosmul=cosmul,
        approx=approx,
    )
    return json_response(similar.most_similar(ctx, name, q))


@router.post("/most_similar", response_model=MostSimilarResponse, responses=_RESPONSES)
def most_similar_post(ctx: ContextDep, body: MostSimilarRequest, model: ModelQuery = None):
    """most_similar with words, positions, vectors and ``[item, weight]`` pairs."""
    name = model_of(body.model, model, ctx.settings)
    return json_response(similar.most_similar(ctx, name, body.query()))


@router.post("/most_similar/batch", response_model=BatchResponse, responses=_RESPONSES)
def most_similar_batch(ctx: ContextDep, body: BatchRequest, model: ModelQuery = None):
    """Many most_similar queries answered together (one matrix multiply per group;
    ``approx`` queries in one approximate-index search)."""
    name = model_of(body.model, model, ctx.settings)
    return json_response(similar.most_similar_batch(ctx, name, body))


def _doesnt_match(ctx: AppContext, name: str, words: list[str]) -> Response:
    info, kv, missing, _ = _small_kv(ctx, name, words)
    if len(kv) == 0:
        raise missing_error(name, missing)
    present = [w for w in words if w in kv]
    word = kv.doesnt_match(present)
    return json_response(
        {"model": info.name, "generation": info.generation, "word": word, "ignored": missing}
    )


@router.get("/doesnt_match", response_model=DoesntMatchResponse, responses=_RESPONSES)
def doesnt_match_get(ctx: ContextDep, name: ModelName, words: WordsQuery):
    """The word that does not go with the others (gensim ``doesnt_match``)."""
    return _doesnt_match(ctx, name, split_words(words))


@router.post("/doesnt_match", response_model=DoesntMatchResponse, responses=_RESPONSES)
def doesnt_match_post(ctx: ContextDep, body: DoesntMatchRequest, model: ModelQuery = None):
    """The word that does not go with the others, words in a JSON body."""
    return _doesnt_match(ctx, model_of(body.model, model, ctx.settings), body.words)


@router.get("/analogy", response_model=AnalogyResponse, responses=_RESPONSES)
def analogy(
    ctx: ContextDep,
    name: ModelName,
    a: str,
    b: str,
    c: str,
    topn: Annotated[int, Query(ge=1)] = 1,
    cosmul: bool = False,
    approx: bool = False,
):
    """a is to b as c is to ?  (``most_similar(positive=[b, c], negative=[a])``)."""
    q = SearchQuery(positive=[b, c], negative=[a], topn=topn, cosmul=cosmul, approx=approx)
    out = similar.most_similar(ctx, name, q)
    results = out.get("results") or []
    out["answer"] = results[0][0] if results else None
    return json_response(out)
