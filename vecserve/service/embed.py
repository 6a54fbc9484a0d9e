"""``POST /embed`` and ``GET /embed``: text in, one vector per text out.

=================  ==============================================================
``POST /embed``    body ``{"model": "M", "texts": ["...", ...], "normalize": null,
                   "dims": null, "pooling": "mean"}`` (``"sif"``: word models with counts)
``GET /embed``     ``?text=...&model=M``: one text
=================  ==============================================================

The answer is ``{"model", "generation", "dim", "vectors": [[...]], "tokens": [...],
"unknown": [...]}`` (per text, tokens pooled and tokens without a row); a text with no
token used has the zero vector. ``Accept: application/octet-stream`` (or ``format=binary``)
answers raw little-endian float32 rows, ``application/x-npy`` (``format=npy``) an ``.npy``,
as ``/vectors`` does: shape and counts in ``X-Vecserve-*`` headers.

Bad input is a JSON 4xx: a model without a tokenizer, a text over
:data:`~vecserve.text.embed.MAX_TEXT_CHARS`, a batch over
:data:`~vecserve.text.embed.MAX_TEXTS`, ``dims`` past the model's (400); a body that is
not JSON of strings, not UTF-8 (422); a body over ``max_body_bytes`` (413). ``/metrics``
counts ``vecserve_texts_embedded_total`` and ``vecserve_text_tokens_total``.

The router is included by :func:`vecserve.api.create_app`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field, StrictBool
from starlette.concurrency import run_in_threadpool

from .deps import AppContext, ContextDep, ModelName, ModelQuery, embed_texts, model_of
from .params import FORMAT
from .responses import JSON, NPY, json_response, negotiate, rows_response
from .schemas import ErrorBody, ModelBody

__all__ = ["EmbedRequest", "EmbedResponse", "router"]

router = APIRouter(tags=["text"])

_RESPONSES = {
    200: {
        "description": "JSON by default; raw little-endian float32 rows or .npy on request "
        "(shape and per-text counts in X-Vecserve-* headers).",
        "content": {"application/octet-stream": {}, NPY: {}},
    },
    400: {"model": ErrorBody},
    404: {"model": ErrorBody},
    406: {"model": ErrorBody},
    413: {"model": ErrorBody},
    422: {"model": ErrorBody},
    503: {"model": ErrorBody},
}
#: a batch longer than this (characters) is cut and pooled in a pool thread, not inline
_INLINE_CHARS = 20_000


class EmbedRequest(ModelBody):
    """The body of ``POST /embed``."""

    texts: list[str] = Field(description="The texts, one vector each.")
    normalize: StrictBool | None = Field(None, description="Unit vectors; default: the model's.")
    dims: int | None = Field(
        None, ge=1, description="Keep the first dims (Matryoshka): 1 to the model's dimension."
    )
    pooling: Literal["mean", "sif"] = Field(
        "mean", description="sif: weight words by a/(a+p) from the model's counts."
    )


class EmbedResponse(BaseModel):
    model: str
    generation: int
    dim: int
    vectors: list[list[float]]
    tokens: list[int] = Field(description="Per text: tokens pooled.")
    unknown: list[int] = Field(description="Per text: tokens without a row (not pooled).")


async def _answer(request: Request, ctx: AppContext, name, texts, options: dict, fmt):
    media = negotiate(request.headers.get("accept"), fmt)
    if sum(map(len, texts)) > _INLINE_CHARS:
        got = await run_in_threadpool(embed_texts, ctx, name, texts, options)
    else:
        got = await ctx.run(embed_texts, ctx, name, texts, options)
    info, rows = got.info, got.vectors
    if media == JSON:
        return json_response(
            {
                "model": info.name,
                "generation": info.generation,
                "dim": rows.shape[1],
                "vectors": rows,
                "tokens": got.used,
                "unknown": got.unknown,
            }
        )
    counts = {
        "X-Vecserve-Tokens": ",".join(map(str, got.used.tolist())),
        "X-Vecserve-Unknown": ",".join(map(str, got.unknown.tolist())),
    }
    return rows_response(info, rows, media, counts)


@router.post("/embed", response_model=EmbedResponse, responses=_RESPONSES)
async def post_embed(
    request: Request,
    ctx: ContextDep,
    body: EmbedRequest,
    model: ModelQuery = None,
    format: FORMAT | None = None,
):
    """One vector per text: the texts cut into the model's tokens, their rows averaged."""
    name = model_of(body.model, model, ctx.settings)
    options = {"normalize": body.normalize, "dims": body.dims, "pooling": body.pooling}
    return await _answer(request, ctx, name, body.texts, options, format)


@router.get("/embed", response_model=EmbedResponse, responses=_RESPONSES)
async def get_embed(
    request: Request,
    ctx: ContextDep,
    name: ModelName,
    text: Annotated[str, Query(description="The text.")],
    normalize: bool | None = None,
    dims: Annotated[
        int | None, Query(ge=1, description="Keep the first dims: 1 to the model's dimension.")
    ] = None,
    pooling: Literal["mean", "sif"] = "mean",
    format: FORMAT | None = None,
):
    """The vector of one text (``POST /embed`` for a batch)."""
    options = {"normalize": normalize, "dims": dims, "pooling": pooling}
    return await _answer(request, ctx, name, [text], options, format)
