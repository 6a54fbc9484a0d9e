"""Request and response bodies of the HTTP API (pydantic models). A most_similar query
item's JSON is :mod:`vecserve.search.wire`'s (its schema is published here).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from ..search.wire import ITEM_SCHEMA

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
    "QueryError",
    "SimilarityResponse",
    "VectorsRequest",
    "VectorsResponse",
]

#: what a response's ``subwords`` lists
SUBWORDS = (
    "fastText models: the words whose vectors were built from their character n-grams "
    "(not in the vocabulary)."
)

MissingPolicy = Literal["omit", "zeros", "error"]

QueryItem = Annotated[Any, WithJsonSchema(ITEM_SCHEMA)]


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
    subwords: list[str] | None = Field(None, description=SUBWORDS)


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
    subwords: list[str] | None = Field(None, description=SUBWORDS)


class QueryError(BaseModel):
    """One query of a batch that failed: what the single call would have answered."""

    error: str = Field(
        description="The error's class: TokenNotFound (a word not in the model), "
        "ValueError (a query gensim refuses: no input, cosmul without positive), "
        "BadQuery (an item that is no word, position or vector; a limit)."
    )
    detail: str = Field(description="The error's message (gensim's, where gensim raises).")
    status: int = Field(description="The HTTP status the query alone would have got.")
    token: str | None = Field(None, description="TokenNotFound: the first unknown word.")
    model: str | None = Field(None, description="TokenNotFound: the model asked.")
    missing: list[str] | None = Field(None, description="TokenNotFound: every unknown word.")


class BatchResponse(BaseModel):
    """Answers in the order of the queries; a query that failed on its own (an unknown
    word, an empty query, ...) has ``null`` in ``results`` and its error in ``errors``,
    and does not fail the others. Errors of the whole request (unknown model, too many
    queries, a malformed body, the store down) are answered as by every endpoint."""

    model: str
    generation: int
    results: list[list[tuple[str, float]] | list[float] | None] = Field(
        description="Per query: `[word, cosine]` pairs best first, every similarity "
        "(`topn` null), or null where the query failed (see `errors`)."
    )
    approximate: list[bool] = Field(
        description="Per query: answered by the ANN index (asked with `approx` and built)."
    )
    errors: list[QueryError | None] = Field(
        description="Per query: null where answered, else the query's own error."
    )


class SimilarityResponse(BaseModel):
    model: str
    generation: int
    similarity: float
    missing: list[str] = []
    subwords: list[str] | None = Field(None, description=SUBWORDS)


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
