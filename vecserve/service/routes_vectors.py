"""The vectors routes: ``GET /vectors`` (``?words=a,b``) and ``POST /vectors`` (a JSON list
of words, any characters), as JSON, raw float32 rows or ``.npy``.

``GET /vectors`` is answered first by :class:`vecserve.service.fastpath.VectorsFastRoute`
when the query is plain; it calls :func:`answer_vectors` as these routes do.
"""

from __future__ import annotations

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import Response

from .deps import AppContext, ContextDep, ModelName, ModelQuery, fetch_vectors, model_of
from .params import ERRORS, FORMAT, WordsQuery, check_words, split_words
from .responses import NPY, OCTET, missing_error, negotiate, vectors_response
from .schemas import ErrorBody, MissingPolicy, VectorsRequest, VectorsResponse

__all__ = ["answer_vectors", "router"]

router = APIRouter()

_VECTOR_RESPONSES = {
    200: {
        "description": "JSON by default; raw little-endian float32 rows or .npy on request "
        "(shape and missing words in X-Vecserve-* headers).",
        "content": {OCTET: {}, NPY: {}},
    },
    406: {"model": ErrorBody},
    **ERRORS,
}


def answer_vectors(
    ctx: AppContext, name: str, words: list[str], policy: str, media: str
) -> Response:
    """The rows of ``words`` in model ``name`` as a response of ``media``, missing words
    by ``policy`` (omit, zeros, error: a 404); what both routes and the fast route answer."""
    words = check_words(words, ctx.settings)
    info, rows, found, built = fetch_vectors(ctx, name, words)
    n_found = int(found.sum())
    missing_idx = [] if n_found == len(words) else np.flatnonzero(~found).tolist()
    missing = [words[i] for i in missing_idx]
    if missing and policy == "error":
        raise missing_error(name, missing)
    if policy == "omit" and missing:
        words, rows = [w for w, ok in zip(words, found, strict=True) if ok], rows[found]
    ctx.metrics.inc("vecserve_vectors_served_total", n_found)
    if missing:
        ctx.metrics.inc("vecserve_words_missing_total", len(missing))
    return vectors_response(
        info,
        words,
        rows,
        missing=missing,
        missing_idx=missing_idx,
        media=media,
        subwords=built if info.subwords else None,
    )


@router.get("/vectors", response_model=VectorsResponse, responses=_VECTOR_RESPONSES)
async def get_vectors(
    request: Request,
    ctx: ContextDep,
    name: ModelName,
    words: WordsQuery,
    missing: MissingPolicy = "omit",
    format: FORMAT | None = None,
):
    """Vectors of words; `Accept: application/octet-stream` or `x-npy` for binary."""
    media = negotiate(request.headers.get("accept"), format)
    return await ctx.run(answer_vectors, ctx, name, split_words(words), missing, media)


@router.post("/vectors", response_model=VectorsResponse, responses=_VECTOR_RESPONSES)
async def post_vectors(
    request: Request,
    ctx: ContextDep,
    body: VectorsRequest,
    model: ModelQuery = None,
    format: FORMAT | None = None,
):
    """Vectors of a JSON list of words (any characters, commas included)."""
    name = model_of(body.model, model, ctx.settings)
    media = negotiate(request.headers.get("accept"), format)
    return await ctx.run(answer_vectors, ctx, name, body.words, body.missing, media)
