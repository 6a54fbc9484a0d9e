"""The query string's word lists, declared once for the routes and the fast routes.

``?words=a,b&words=c`` is ``['a', 'b', 'c']``: a parameter holds comma-separated words
and may be repeated (:func:`split_words`); the aliases below declare that to FastAPI and
the OpenAPI document. :func:`check_words` is the limit every list of words meets.

>>> split_words(["king,queen", "man"])
['king', 'queen', 'man']
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Query

from ..errors import BadQuery
from .schemas import WORDS_ITEM, ErrorBody
from .settings import Settings

__all__ = [
    "ERRORS",
    "FORMAT",
    "NegativeQuery",
    "WordsQuery",
    "check_words",
    "split_words",
]

#: the error bodies every route declares
ERRORS = {404: {"model": ErrorBody}, 422: {"model": ErrorBody}, 503: {"model": ErrorBody}}

#: ``?format=``: the body of a vectors answer, instead of the ``Accept`` header
FORMAT = Literal["json", "binary", "npy"]

WordsQuery = Annotated[
    list[str],
    Query(
        description="Comma-separated words (repeat the parameter for more).",
        min_length=1,
        json_schema_extra=WORDS_ITEM,
    ),
]
NegativeQuery = Annotated[
    list[str],
    Query(
        description="Comma-separated words to subtract (repeat the parameter for more).",
        json_schema_extra=WORDS_ITEM,
    ),
]


def check_words(words: list[str], settings: Settings) -> list[str]:
    """``words`` if there are some, no more than ``settings.max_words``, each UTF-8 text."""
    if not words:
        raise BadQuery("no words given")
    if len(words) > settings.max_words:
        raise BadQuery(f"{len(words)} words in one request; the limit is {settings.max_words}")
    for w in words:
        try:
            w.encode("utf-8")
        except UnicodeEncodeError:
            raise BadQuery(f"word {w!r:.60} is not valid UTF-8 text") from None
    return words


def split_words(values: list[str] | None, name: str = "words") -> list[str]:
    """``?words=a,b&words=c`` -> ``['a', 'b', 'c']`` (empty words between commas dropped);
    a repeat of the parameter with no word at all (``?words=a&words=,``) is refused."""
    out = []
    for v in values or ():
        words = [w for w in v.split(",") if w]
        if not words:
            raise BadQuery(f"{name}={v!r:.40} holds no word")
        out += words
    return out
