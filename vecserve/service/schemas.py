"""Request and response bodies of the HTTP API (pydantic models), and query-item parsing.

A most_similar query item is a word, an int (a position in the vocabulary), a vector,
or ``[item, weight]`` -- the forms gensim accepts, in the JSON of
:func:`vecserve.search.snapshot.encode_items`: a vector is ``{"vector": [...], "dtype": "<f4"}``
(``dtype`` optional, default ``<f8``, kept so the arithmetic is gensim's); a bare list of
``dim`` numbers is accepted too (as ``<f8``). :func:`parse_item` turns the JSON form into
what :mod:`vecserve.search.snapshot` takes, and raises :class:`BadQuery` (-> 422) naming the
item otherwise.

>>> parse_item(["king", 2.0], dim=3)
('king', 2.0)
>>> parse_item({"vector": [1, 0, 0], "dtype": "<f4"}, dim=3)
array([1., 0., 0.], dtype=float32)
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from ..errors import BadQuery

__all__ = [
    "AnalogyResponse",
    "BatchRequest",
    "BatchResponse",
    "DoesntMatchRequest",
    "DoesntMatchResponse",
    "ErrorBody",
    "MissingPolicy",
    "MostSimilarQuery",
    "MostSimilarRequest",
    "MostSimilarResponse",
    "NSimilarityRequest",
    "SimilarityResponse",
    "VectorsRequest",
    "VectorsResponse",
    "parse_item",
]

MissingPolicy = Literal["omit", "zeros", "error"]

_VECTOR_SCHEMA = {
    "type": "object",
    "properties": {
        "vector": {"type": "array", "items": {"type": "number"}},
        "dtype": {"type": "string", "enum": ["<f2", "<f4", "<f8"]},
    },
    "required": ["vector"],
    "additionalProperties": False,
    "description": "a vector of dim numbers",
}
_ITEM_SCHEMA = {
    "anyOf": [
        {"type": "string", "description": "a word"},
        {"type": "integer", "minimum": 0, "description": "a position in the vocabulary"},
        _VECTOR_SCHEMA,
        {"type": "array", "items": {"type": "number"}, "description": "a bare vector (<f8)"},
        {
            "type": "array",
            "prefixItems": [
                {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0}, _VECTOR_SCHEMA]},
                {"type": "number"},
            ],
            "minItems": 2,
            "maxItems": 2,
            "description": "[word or position, weight]",
        },
    ]
}
QueryItem = Annotated[Any, WithJsonSchema(_ITEM_SCHEMA)]


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


_DTYPES = {"<f2": np.float16, "<f4": np.float32, "<f8": np.float64}


def _vector(values: Any, dim: int, dtype: Any = "<f8") -> np.ndarray:
    if not isinstance(values, list) or not all(_is_number(x) for x in values):
        raise BadQuery("a vector must be a list of numbers")
    if len(values) != dim:
        raise BadQuery(f"a vector must have {dim} components (the model's dim), got {len(values)}")
    if dtype not in _DTYPES:
        raise BadQuery(f"vector dtype {dtype!r:.20} is not one of {sorted(_DTYPES)}")
    vec = np.asarray(values, dtype=np.float64)
    if not np.isfinite(vec).all():
        raise BadQuery("vector components must be finite numbers")
    with np.errstate(over="ignore"):
        out = vec.astype(_DTYPES[dtype])
    if not np.isfinite(out).all():
        raise BadQuery(f"vector components overflow {dtype}")
    return out


def parse_item(item: Any, *, dim: int, weighted_ok: bool = True):
    """One JSON query item -> a word, an int position, a float32 vector or (item, weight)."""
    if isinstance(item, str):
        return item
    if isinstance(item, int) and not isinstance(item, bool):
        return item
    if isinstance(item, dict) and set(item) <= {"vector", "dtype"} and "vector" in item:
        return _vector(item["vector"], dim, item.get("dtype", "<f8"))
    if isinstance(item, list) and item:
        first = item[0]
        pair = (
            weighted_ok
            and len(item) == 2
            and _is_number(item[1])
            and (
                isinstance(first, (str, list, dict))
                or (isinstance(first, int) and not isinstance(first, bool) and dim != 2)
            )
        )
        if pair:
            if not math.isfinite(item[1]):
                raise BadQuery(f"weight of {first!r} must be a finite number")
            return (parse_item(first, dim=dim, weighted_ok=False), float(item[1]))
        if all(_is_number(x) for x in item):
            return _vector(item, dim)
    raise BadQuery(
        f"query item {item!r:.80} is not a word, a vocabulary position, a vector of {dim} "
        "numbers, or [item, weight]"
    )


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(None, description="Model name; default: the service's default.")


class VectorsRequest(_Body):
    words: list[str] = Field(..., min_length=1, description="Words to look up.")
    missing: MissingPolicy = Field(
        "omit", description="omit: drop missing words; zeros: a zero row; error: 404."
    )


class VectorsResponse(BaseModel):
    model: str
    generation: int
    dim: int
    words: list[str] = Field(description="The word of each row of `vectors`.")
    vectors: list[list[float]]
    missing: list[str] = Field(description="Requested words not in the model.")
    subwords: list[str] | None = Field(
        None, description="fastText models: the words whose vectors were built from their "
        "character n-grams (not in the vocabulary).")  # fmt: skip


class MostSimilarQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    positive: list[QueryItem] | str | None = Field(
        None, description="Items to add: words, positions, vectors, [item, weight]."
    )
    negative: list[QueryItem] | str | None = Field(None, description="Items to subtract.")
    topn: int | None = Field(10, ge=0, description="null = similarities of every key.")
    restrict_vocab: int | None = Field(None, ge=0)
    cosmul: bool = Field(False, description="3CosMul (most_similar_cosmul).")
    approx: bool = Field(False, description="Use the ANN index when one is built.")


class MostSimilarRequest(MostSimilarQuery):
    model: str | None = None


class BatchRequest(_Body):
    queries: list[MostSimilarQuery] = Field(..., min_length=1)


class MostSimilarResponse(BaseModel):
    model: str
    generation: int
    results: list[tuple[str, float]] | None = None
    similarities: list[float] | None = None
    approximate: bool = False
    approximate_status: str | None = Field(
        None,
        description="When approx was asked but the answer is exact: why (building, "
        "absent, disabled, failed, or not applicable to this query).",
    )
    subwords: list[str] | None = Field(
        None, description="fastText models: the words whose vectors were built from their "
        "character n-grams (not in the vocabulary).")  # fmt: skip


class BatchResponse(BaseModel):
    model: str
    generation: int
    results: list[list[tuple[str, float]] | list[float]]
    approximate: list[bool] = Field(
        description="Per query: answered by the ANN index (asked with `approx` and built)."
    )


class SimilarityResponse(BaseModel):
    model: str
    generation: int
    similarity: float
    missing: list[str] = []
    subwords: list[str] | None = Field(
        None, description="fastText models: the words whose vectors were built from their "
        "character n-grams (not in the vocabulary).")  # fmt: skip


class NSimilarityRequest(_Body):
    ws1: list[str] = Field(..., min_length=1)
    ws2: list[str] = Field(..., min_length=1)


class DoesntMatchRequest(_Body):
    words: list[str] = Field(..., min_length=1)


class DoesntMatchResponse(BaseModel):
    model: str
    generation: int
    word: str
    ignored: list[str] = Field(description="Words not in the model (gensim skips them).")


class AnalogyResponse(MostSimilarResponse):
    answer: str | None = Field(description="The best candidate (first result).")


class ErrorBody(BaseModel):
    error: str = Field(description="Error class, e.g. ModelNotFound, TokenNotFound.")
    detail: str
