"""The wire format of most_similar's query items, defined once: what a client sends
(:func:`encode_items`, used by :class:`vecserve.keyedvectors.RedisKeyedVectors` towards the
HTTP service), what the service reads (:func:`read_item`, once, when the request is read:
:class:`~vecserve.search.query.Query` validates with it), how a read item meets a model
(:func:`fit_item`, when :mod:`vecserve.search.planner` plans the query), and the JSON
schema the API publishes (:data:`ITEM_SCHEMA`).

An item is a word, an int (a position in the vocabulary), a vector, or ``[item,
weight]`` -- the forms gensim accepts -- or a text. A vector is ``{"vector": [...],
"dtype": "<f4"}`` (``dtype`` optional, default ``<f8``, kept so the arithmetic is
gensim's); a bare list of ``dim`` numbers is accepted too (as ``<f8``). A text is
``{"text": "..."}``: it counts as the vector the model's text rule gives it (``POST
/embed``'s), wherever a vector may stand. Both steps raise
:class:`~vecserve.errors.BadQuery` (-> 422) naming what they cannot take.

>>> parse_item(["king", 2.0], dim=3)
('king', 2.0)
>>> parse_item({"vector": [1, 0, 0], "dtype": "<f4"}, dim=3)
array([1., 0., 0.], dtype=float32)
>>> [parse_item(i, dim=2) for i in encode_items([("king", 2.0), np.ones(2, np.float32), 3])]
[('king', 2.0), array([1., 1.], dtype=float32), 3]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import BadQuery
from .arith import ensure_list

__all__ = [
    "COSMUL_ITEM_SCHEMA",
    "ITEM_SCHEMA",
    "Item",
    "Vector",
    "Weighted",
    "encode_items",
    "fit_item",
    "parse_item",
    "read_item",
]

_F2_MAX, _F4_MAX = 65504.0, 3.4028234663852886e38
_VECTOR_SCHEMA = {
    "type": "object",
    "properties": {
        "vector": {"type": "array", "items": {"type": "number"}, "minItems": 1},
        "dtype": {"type": "string", "enum": ["<f2", "<f4", "<f8"]},
    },
    "required": ["vector"],
    "additionalProperties": False,
    "description": "a vector of dim numbers (each within its dtype's range)",
    "anyOf": [
        {"not": {"required": ["dtype"]}},
        {"properties": {"dtype": {"const": "<f8"}}},
        {
            "properties": {
                "dtype": {"const": "<f4"},
                "vector": {"items": {"minimum": -_F4_MAX, "maximum": _F4_MAX}},
            }
        },
        {
            "properties": {
                "dtype": {"const": "<f2"},
                "vector": {"items": {"minimum": -_F2_MAX, "maximum": _F2_MAX}},
            }
        },
    ],
}
_WORD_SCHEMA = {"type": "string", "description": "a word"}
_TEXT_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
    "description": "a text: the vector POST /embed gives it (the model's text rule)",
}
_BARE_VECTOR_SCHEMA = {
    "type": "array",
    "items": {"type": "number"},
    "minItems": 1,
    "description": "a bare vector of dim numbers (<f8)",
}
#: what most_similar_cosmul takes: words and vectors (no positions, no weights)
COSMUL_ITEM_SCHEMA = {"anyOf": [_WORD_SCHEMA, _VECTOR_SCHEMA, _BARE_VECTOR_SCHEMA, _TEXT_SCHEMA]}
ITEM_SCHEMA = {
    "anyOf": [
        _WORD_SCHEMA,
        {"type": "integer", "minimum": 0, "description": "a position in the vocabulary"},
        _VECTOR_SCHEMA,
        _BARE_VECTOR_SCHEMA,
        _TEXT_SCHEMA,
        {
            "type": "array",
            "prefixItems": [
                {
                    "anyOf": [
                        {"type": "string"},
                        {"type": "integer", "minimum": 0},
                        _VECTOR_SCHEMA,
                        _BARE_VECTOR_SCHEMA,
                        _TEXT_SCHEMA,
                    ]
                },
                {"type": "number"},
            ],
            "minItems": 2,
            "maxItems": 2,
            "description": "[word or position, weight]",
        },
    ]
}


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


#: the largest component of a vector of each dtype (finite)
_LARGEST = {"<f2": _F2_MAX, "<f4": _F4_MAX, "<f8": math.inf}
_DTYPES = {"<f2": np.float16, "<f4": np.float32, "<f8": np.float64}


@dataclass(frozen=True, slots=True)
class Vector:
    """A query vector as sent: its components (float64) and the dtype they are meant in;
    its length is the model's business (:func:`fit_item`)."""

    values: np.ndarray
    dtype: str = "<f8"


@dataclass(frozen=True, slots=True)
class Text:
    """``{"text": "..."}``: a text, counted as its vector by the model's text rule (the
    vector ``POST /embed`` gives it); the planner has it embedded."""

    text: str


@dataclass(frozen=True, slots=True)
class Weighted:
    """``[key, weight]``. ``either``: sent as ``[position, number]``, which on a 2-d model
    is a bare vector (gensim cannot tell them apart either; :func:`fit_item` decides)."""

    key: str | int | Vector | Text
    weight: float
    either: bool = False


#: a query item once read: a word, a vocabulary position, a vector, a text, or a weighted one
Item = str | int | Vector | Text | Weighted


def _is_position(x: Any) -> bool:
    """A vocabulary position: an int >= 0, or a float with an integer value (JSON's
    ``3.0`` is the integer 3)."""
    if isinstance(x, bool):
        return False
    return (isinstance(x, int) or (isinstance(x, float) and x.is_integer())) and x >= 0


def _vector_form(values: Any, dtype: Any = "<f8") -> bool:
    return (
        isinstance(values, list)
        and len(values) > 0
        and isinstance(dtype, str)
        and dtype in _LARGEST
        and all(_is_number(x) and abs(x) <= _LARGEST[dtype] for x in values)
    )


def _read(item: Any, head: bool) -> Item | None:
    if isinstance(item, (str, Vector, Text, Weighted)):
        return item
    if _is_position(item):
        return int(item)
    if isinstance(item, dict) and set(item) == {"text"}:
        return Text(item["text"]) if isinstance(item["text"], str) else None
    if isinstance(item, dict):
        dtype = item.get("dtype", "<f8")
        if set(item) <= {"vector", "dtype"} and _vector_form(item.get("vector"), dtype):
            return Vector(np.asarray(item["vector"], dtype=np.float64), dtype)
        return None
    if not isinstance(item, list):
        return None
    if not head and len(item) == 2 and _is_number(item[1]):
        first = item[0]
        key = _read(first, True) if isinstance(first, (str, list, dict)) else None
        if key is not None:
            return Weighted(key, float(item[1]))
        if _is_position(first):
            return Weighted(int(first), float(item[1]), either=True)
    if _vector_form(item):
        return Vector(np.asarray(item, dtype=np.float64))
    return None


def read_item(item: Any) -> Item:
    """One JSON query item read once, when the request is read: a word, a position, a
    :class:`Vector` or a :class:`Weighted` one; anything else is :class:`BadQuery` (the
    whole request's 422). What depends on the model (a vector's length) is checked by
    :func:`fit_item` when the query is planned.

    >>> read_item(["king", 2.0])
    Weighted(key='king', weight=2.0, either=False)
    >>> read_item(3.0)
    3
    """
    out = _read(item, False)
    if out is None:
        raise BadQuery(
            f"query item {item!r:.80} is not a word, a vocabulary position, a vector, "
            "a text, or [item, weight]"
        )
    return out


def _vector(vec: Vector, dim: int) -> np.ndarray:
    if len(vec.values) != dim:
        raise BadQuery(
            f"a vector must have {dim} components (the model's dim), got {len(vec.values)}"
        )
    if not np.isfinite(vec.values).all():
        raise BadQuery("vector components must be finite numbers")
    with np.errstate(over="ignore"):
        out = vec.values.astype(_DTYPES[vec.dtype])
    if not np.isfinite(out).all():
        raise BadQuery(f"vector components overflow {vec.dtype}")
    return out


def fit_item(item: Item, *, dim: int):
    """A read item as the snapshot takes it (gensim's forms: a word, an int position, a
    vector of its dtype, ``(key, weight)``), fitted to a model of ``dim`` dimensions."""
    if isinstance(item, Vector):
        return _vector(item, dim)
    if isinstance(item, Text):  # the planner embeds texts before it fits items
        raise BadQuery("a text item needs the model's text rule; this search has none")
    if isinstance(item, Weighted):
        if item.either and dim == 2:
            return _vector(Vector(np.array([item.key, item.weight], dtype=np.float64)), dim)
        if not math.isfinite(item.weight):
            key = item.key.values.tolist() if isinstance(item.key, Vector) else item.key
            raise BadQuery(f"weight of {key!r} must be a finite number")
        return (fit_item(item.key, dim=dim), item.weight)
    return item


def parse_item(item: Any, *, dim: int):
    """One JSON query item -> a word, an int position, a vector or (item, weight):
    :func:`read_item` then :func:`fit_item`.

    >>> parse_item([3, 0.5], dim=4), parse_item([3, 0.5], dim=2)
    ((3, 0.5), array([3. , 0.5]))
    """
    return fit_item(read_item(item), dim=dim)


def encode_items(value) -> list:
    """most_similar's ``positive``/``negative`` argument as JSON (see the module docstring).

    >>> import numpy as np
    >>> encode_items([("king", 2.0), np.array([0.5, 1.0], dtype=np.float32), 3])
    [['king', 2.0], {'vector': [0.5, 1.0], 'dtype': '<f4'}, 3]
    """

    def one(item):
        if isinstance(item, str):
            return item
        if isinstance(item, (int, np.integer)):
            return int(item)
        if isinstance(item, np.ndarray):
            return {"vector": item.astype(np.float64).tolist(), "dtype": item.dtype.str}
        key, weight = item
        return [one(key), float(weight)]

    return [one(item) for item in ensure_list(value)]
