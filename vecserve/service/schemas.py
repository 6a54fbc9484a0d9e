"""Request and response bodies of the HTTP API (pydantic models). A most_similar body
validates the JSON of :class:`vecserve.search.query.Query` (its items read by
:func:`~vecserve.search.wire.read_item`, once) and builds that query in one step
(:meth:`MostSimilarQuery.query`); its items' JSON is :mod:`vecserve.search.wire`'s.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    WithJsonSchema,
)

from ..search.query import Query
from ..search.wire import COSMUL_ITEM_SCHEMA, ITEM_SCHEMA, read_item

__all__ = [
    "MODEL_NAME",
    "MODEL_PATH",
    "WORDS_ITEM",
    "AnalogyResponse",
    "BatchRequest",
    "BatchResponse",
    "DoesntMatchRequest",
    "DoesntMatchResponse",
    "ErrorBody",
    "MissingPolicy",
    "ModelBody",
    "MostSimilarQuery",
    "MostSimilarRequest",
    "MostSimilarResponse",
    "NSimilarityRequest",
    "QueryError",
    "SimilarityResponse",
    "VectorsRequest",
    "VectorsResponse",
    "declare_limits",
]

#: what a response's ``subwords`` lists
SUBWORDS = (
    "fastText models: the words whose vectors were built from their character n-grams "
    "(not in the vocabulary)."
)

MissingPolicy = Literal["omit", "zeros", "error"]

# What the service enforces, declared in the OpenAPI document so that a client generated
# from it sends nothing the service refuses. Limits that are settings (``max_words``,
# ``max_topn``, ``max_batch``) are written into the document by :func:`declare_limits`.

_NAME = r"(?![Vv][Ee][Cc][Ss][Ee][Rr][Vv][Ee]$)[A-Za-z0-9][A-Za-z0-9_.-]{0,127}"
#: a model name (``validate_model_name``: 1-128 letters, digits, ``_.-``, not the reserved
#: ``vecserve``), or empty for the service's default model
MODEL_NAME = {"pattern": f"^(?:{_NAME})?$", "maxLength": 128}
#: a model name in a path (never empty)
MODEL_PATH = {"pattern": f"^{_NAME}$", "minLength": 1, "maxLength": 128}
#: one repeat of a comma-separated query parameter: at least one word
WORDS_ITEM = {"items": {"type": "string", "pattern": "[^,]"}}

_SOME = {"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1}]}
#: a most_similar query needs input: ``positive`` or ``negative`` not empty (gensim:
#: "cannot compute mean with no input"); cosmul needs ``positive`` and takes words and
#: vectors only (an absent ``cosmul`` is false)
QUERY_NEEDS_INPUT = [
    {"required": ["positive"], "properties": {"positive": _SOME, "cosmul": {"const": False}}},
    {"required": ["negative"], "properties": {"negative": _SOME, "cosmul": {"const": False}}},
    {
        "required": ["positive", "cosmul"],
        "properties": {
            "cosmul": {"const": True},
            "positive": {
                "anyOf": [
                    {"type": "string"},
                    {"type": "array", "minItems": 1, "items": COSMUL_ITEM_SCHEMA},
                ]
            },
            "negative": {
                "anyOf": [
                    {"type": "string"},
                    {"type": "null"},
                    {"type": "array", "items": COSMUL_ITEM_SCHEMA},
                ]
            },
        },
    },
]

#: where the settings' limits apply: component schema -> {property: setting}
_BODY_LIMITS = {
    "VectorsRequest": {"words": "max_words"},
    "DoesntMatchRequest": {"words": "max_words"},
    "NSimilarityRequest": {"ws1": "max_words", "ws2": "max_words"},
    "MostSimilarQuery": {"positive": "max_words", "negative": "max_words", "topn": "max_topn"},
    "MostSimilarRequest": {"positive": "max_words", "negative": "max_words", "topn": "max_topn"},
    "BatchRequest": {"queries": "max_batch"},
}
#: query parameters: name -> setting
_PARAM_LIMITS = {
    "words": "max_words",
    "positive": "max_words",
    "negative": "max_words",
    "topn": "max_topn",
}


def declare_limits(openapi: dict, settings) -> dict:
    """``openapi`` with the service's limits (``settings.max_words``: ``maxItems`` of each
    word or item list; ``max_topn``: ``maximum`` of ``topn``; ``max_batch``: ``maxItems``
    of a batch's queries) written where they apply; what the service refuses past them is
    a 422 for the whole request. Operations with a body also declare its 400 (unreadable)
    and 413 (too large)."""

    def limit(schema: dict, setting: str) -> None:
        key = "maximum" if setting == "max_topn" else "maxItems"
        schema[key] = getattr(settings, setting)

    components = openapi.get("components", {}).get("schemas", {})
    for name, fields in _BODY_LIMITS.items():
        props = components.get(name, {}).get("properties", {})
        for field, setting in fields.items():
            if field in props:
                limit(props[field], setting)
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    body_errors = {
        "400": "The body cannot be read (not JSON, not UTF-8).",
        "413": f"The body is over {settings.max_body_bytes} bytes.",
    }
    for operations in openapi.get("paths", {}).values():
        for op in operations.values():
            if "requestBody" in op:
                for status, text in body_errors.items():
                    op["responses"].setdefault(status, {"description": text, "content": error})
            for param in op.get("parameters", ()):
                setting = _PARAM_LIMITS.get(param["name"])
                if setting and param.get("in") == "query":
                    limit(param["schema"], setting)
    return openapi


#: a query item: read when the request is read (a malformed item is the whole request's
#: 422, also in a batch); its fit to the model (a vector's length) when planned
QueryItem = Annotated[Any, AfterValidator(read_item), WithJsonSchema(ITEM_SCHEMA)]
NOT_A_NUMBER = (
    "null where the arithmetic gives no number (NaN or infinity: a zero vector, a query "
    "vector whose components overflow float32), as gensim's answer holds it"
)
#: a score: gensim's float, or null for NaN and infinities (JSON has neither)
Score = Annotated[
    float | None,
    WithJsonSchema({"type": ["number", "null"], "description": f"A cosine; {NOT_A_NUMBER}."}),
]
#: ``[word, cosine]`` (declared without ``prefixItems``: Schemathesis 4.32 cannot check a
#: response against a tuple schema)
Pair = Annotated[
    tuple[str, float | None],
    WithJsonSchema(
        {
            "type": "array",
            "items": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "null"}]},
            "minItems": 2,
            "maxItems": 2,
            "description": f"[word, cosine]; the cosine {NOT_A_NUMBER}",
        }
    ),
]


class ModelBody(BaseModel):
    """A request body: no unknown fields, and the model it asks (else the default)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(
        None,
        description="Model name; default: the service's default.",
        json_schema_extra=MODEL_NAME,
    )


class VectorsRequest(ModelBody):
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


def _json_integer(value: Any) -> Any:
    """A JSON integer as the schema's ``integer`` means it (``10`` or ``10.0``), not a
    string or a boolean (which pydantic's lax mode would take)."""
    if isinstance(value, (bool, str)):
        raise ValueError("must be an integer")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: an integer >= 0 in a JSON body: exactly what the schema's ``integer`` accepts
Count = Annotated[int, Field(ge=0), BeforeValidator(_json_integer)]


class MostSimilarQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    positive: list[QueryItem] | str | None = Field(
        None, description="Items to add: words, positions, vectors, [item, weight]."
    )
    negative: list[QueryItem] | str | None = Field(None, description="Items to subtract.")
    topn: Count | None = Field(10, description="null = similarities of every key.")
    restrict_vocab: Count | None = None
    cosmul: StrictBool = Field(False, description="3CosMul (most_similar_cosmul).")
    approx: StrictBool = Field(False, description="Use the ANN index when one is built.")

    def query(self) -> Query:
        """The planner's :class:`~vecserve.search.query.Query` (its items already read)."""
        return Query(
            self.positive, self.negative, self.topn, self.restrict_vocab, self.cosmul, self.approx
        )


class MostSimilarRequest(MostSimilarQuery):
    """One most_similar query: ``positive`` and/or ``negative`` not empty; with
    ``cosmul``, ``positive`` not empty and every item a word or a vector."""

    model_config = ConfigDict(json_schema_extra={"anyOf": QUERY_NEEDS_INPUT})

    model: str | None = Field(None, json_schema_extra=MODEL_NAME)


class BatchRequest(ModelBody):
    queries: list[MostSimilarQuery] = Field(..., min_length=1)


class MostSimilarResponse(BaseModel):
    model: str
    generation: int
    results: list[Pair] | None = None
    similarities: list[Score] | None = None
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
    results: list[list[Pair] | list[Score] | None] = Field(
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
    similarity: Score
    missing: list[str] = []
    subwords: list[str] | None = Field(None, description=SUBWORDS)


class NSimilarityRequest(ModelBody):
    ws1: list[str] = Field(..., min_length=1)
    ws2: list[str] = Field(..., min_length=1)


class DoesntMatchRequest(ModelBody):
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
