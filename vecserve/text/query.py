"""``Text``: a piece of text where a similarity query takes a vector.

gensim's ``most_similar`` and ``similarity`` take keys (a ``str`` is a word) and, in
``most_similar``, vectors. vecserve keeps that: a plain ``str`` stays one key, as in
gensim, and a text is said so by wrapping it, ``Text("a job title")``. Wherever a vector is
accepted a ``Text`` is too (``most_similar``, ``most_similar_cosmul``,
``most_similar_batch``, ``similar_by_vector``, ``similarity``, ``distance``,
``distances``): it is embedded by the model's own text rule (``kv.embed``: its tokenizer,
phrases and pooling), then used as that vector. Every ``Text`` of one call is embedded in
one batch (one round trip; the cache applies).

>>> kv.most_similar(positive=[Text("the king and the queen")], topn=2)  # doctest: +SKIP
[('king', 0.83), ('queen', 0.81)]
>>> kv.most_similar("the king")   # a str is a word, as in gensim  # doctest: +SKIP
Traceback (most recent call last):
...
KeyError: "Key 'the king' not present in vocabulary"

A text none of whose tokens the model has (or an empty one) has no vector to query with:
:class:`~vecserve.errors.TextRejected`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import TextRejected
from ..store.wire import Steps

__all__ = ["Text", "has_text", "text_terms_steps", "text_vectors_steps"]


@dataclass(frozen=True, slots=True)
class Text:
    """A text to be embedded by the model's text rule and used as a vector.

    >>> Text("New York") == Text("New York"), Text("x").text
    (True, 'x')
    """

    text: str

    def __post_init__(self):
        if not isinstance(self.text, str):
            raise TypeError(f"Text takes a str, got {type(self.text).__name__}")


def _items(terms) -> list:
    """``most_similar``'s ``positive`` / ``negative`` as a list (None: empty), as gensim
    reads them: a key, a vector or a Text alone is one term."""
    if terms is None:
        return []
    if isinstance(terms, (str, int, np.integer, Text)) or (
        isinstance(terms, np.ndarray) and terms.ndim == 1
    ):
        return [terms]
    return list(terms)


def has_text(*terms) -> bool:
    """Whether any term (or any item of a term list, weighted or not) is a Text."""
    for t in terms:
        if isinstance(t, Text):
            return True
        if isinstance(t, (list, tuple)):
            for item in t:
                if isinstance(item, Text) or (
                    isinstance(item, tuple) and item and isinstance(item[0], Text)
                ):
                    return True
    return False


def text_vectors_steps(reader, texts) -> Steps[dict[Text, np.ndarray]]:
    """Each distinct Text's vector (one ``embed`` batch, the model's text rule), or
    TextRejected for a text none of whose tokens the model has."""
    from .embed import embed_steps

    distinct = list(dict.fromkeys(texts))
    got = yield from embed_steps(reader, [t.text for t in distinct])
    for t, used in zip(distinct, got.used.tolist(), strict=True):
        if not used:
            raise TextRejected(
                f"text {t.text[:80]!r} has no token model {got.info.name!r} knows: "
                "no vector to query with"
            )
    return dict(zip(distinct, got.vectors, strict=True))


def text_terms_steps(reader, positive, negative) -> Steps[tuple]:
    """``most_similar``'s arguments with every Text replaced by its vector (weights kept);
    unchanged, with no I/O, when there is none."""
    if not has_text(positive, negative):
        return positive, negative
    positive, negative = _items(positive), _items(negative)
    texts = [t[0] if isinstance(t, tuple) else t for t in positive + negative]
    vecs = yield from text_vectors_steps(reader, [t for t in texts if isinstance(t, Text)])

    def swap(terms):
        out = []
        for t in terms:
            if isinstance(t, Text):
                t = vecs[t]
            elif isinstance(t, tuple) and t and isinstance(t[0], Text):
                t = (vecs[t[0]], *t[1:])
            out.append(t)
        return out

    return swap(positive), swap(negative)
