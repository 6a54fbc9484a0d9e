"""The wire format of most_similar's query items, defined once: what a client sends
(:func:`encode_items`, used by :class:`vecserve.keyedvectors.RedisKeyedVectors` towards the
HTTP service) and what the service reads (:func:`parse_item`, used by
:mod:`vecserve.search.planner` for every route), and the JSON schema the API publishes
(:data:`ITEM_SCHEMA`).

An item is a word, an int (a position in the vocabulary), a vector, or ``[item,
weight]`` -- the forms gensim accepts. A vector is ``{"vector": [...], "dtype": "<f4"}``
(``dtype`` optional, default ``<f8``, kept so the arithmetic is gensim's); a bare list of
``dim`` numbers is accepted too (as ``<f8``). :func:`parse_item` raises
:class:`~vecserve.errors.BadQuery` (-> 422) naming an item it cannot read.

>>> parse_item(["king", 2.0], dim=3)
('king', 2.0)
>>> parse_item({"vector": [1, 0, 0], "dtype": "<f4"}, dim=3)
array([1., 0., 0.], dtype=float32)
>>> [parse_item(i, dim=2) for i in encode_items([("king", 2.0), np.ones(2, np.float32), 3])]
[('king', 2.0), array([1., 1.], dtype=float32), 3]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import BadQuery
from .arith import ensure_list

__all__ = [
    "COSMUL_ITEM_SCHEMA",
    "ITEM_SCHEMA",
    "check_form",
    "encode_items",
    "parse_item",
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
_BARE_VECTOR_SCHEMA = {
    "type": "array",
    "items": {"type": "number"},
    "minItems": 1,
    "description": "a bare vector of dim numbers (<f8)",
}
#: what most_similar_cosmul takes: words and vectors (no positions, no weights)
COSMUL_ITEM_SCHEMA = {"anyOf": [_WORD_SCHEMA, _VECTOR_SCHEMA, _BARE_VECTOR_SCHEMA]}
ITEM_SCHEMA = {
    "anyOf": [
        _WORD_SCHEMA,
        {"type": "integer", "minimum": 0, "description": "a position in the vocabulary"},
        _VECTOR_SCHEMA,
        _BARE_VECTOR_SCHEMA,
        {
            "type": "array",
            "prefixItems": [
                {
                    "anyOf": [
                        {"type": "string"},
                        {"type": "integer", "minimum": 0},
                        _VECTOR_SCHEMA,
                        _BARE_VECTOR_SCHEMA,
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


def _vector_form(values: Any, dtype: Any = "<f8") -> bool:
    return (
        isinstance(values, list)
        and len(values) > 0
        and isinstance(dtype, str)
        and dtype in _LARGEST
        and all(_is_number(x) and abs(x) <= _LARGEST[dtype] for x in values)
    )


def check_form(item: Any, *, head: bool = False) -> Any:
    """``item`` if it has one of the forms of :data:`ITEM_SCHEMA` (whatever the model:
    a vector's length is checked by :func:`parse_item`), else :class:`BadQuery`.

    >>> check_form(["king", 2.0])
    ['king', 2.0]
    """
    ok = False
    if isinstance(item, str) or _is_position(item):
        ok = True
    elif isinstance(item, dict):
        ok = set(item) <= {"vector", "dtype"} and _vector_form(
            item.get("vector"), item.get("dtype", "<f8")
        )
    elif isinstance(item, list):
        ok = _vector_form(item) or (
            not head and len(item) == 2 and _is_number(item[1]) and _is_ok(item[0], head=True)
        )
    if not ok:
        raise BadQuery(
            f"query item {item!r:.80} is not a word, a vocabulary position, a vector, "
            "or [item, weight]"
        )
    return item


def _is_position(x: Any) -> bool:
    """A vocabulary position: an int >= 0, or a float with an integer value (JSON's
    ``3.0`` is the integer 3)."""
    if isinstance(x, bool):
        return False
    return (isinstance(x, int) or (isinstance(x, float) and x.is_integer())) and x >= 0


def _is_ok(item: Any, *, head: bool) -> bool:
    try:
        check_form(item, head=head)
    except BadQuery:
        return False
    return True


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
    if isinstance(item, float) and _is_position(item):  # JSON's 3.0 is the integer 3
        return int(item)
    if isinstance(item, dict) and set(item) <= {"vector", "dtype"} and "vector" in item:
        return _vector(item["vector"], dim, item.get("dtype", "<f8"))
    if isinstance(item, list) and item:
        first = item[0]
        pair = (
            weighted_ok
            and len(item) == 2
            and _is_number(item[1])
            and (isinstance(first, (str, list, dict)) or (_is_position(first) and dim != 2))
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
