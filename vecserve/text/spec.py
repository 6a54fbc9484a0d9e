"""`TextSpec`: how a model's text is cut into tokens and pooled, recorded with the model.

A spec rides in the model's registry entry (``ModelInfo.text``, JSON); what is too big for
the entry (a static model's tokenizer, a word model's phrase list) is the generation's
*text blob* (``vecserve:text:P``, read once per generation by each worker).

============  ===========================================================================
kind          what cuts the text
============  ===========================================================================
tokenizer     a `tokenizers` JSON (the blob): static embedding models (Model2Vec,
              WordLlama, sentence-transformers' StaticEmbedding); their rows are keyed by
              the tokenizer's token strings, so ``kv[token]`` works
words         a regular expression, a case rule and greedy longest-match phrases (the
              blob: the vocabulary's multi-word tokens, one a line): word2vec, GloVe,
              fastText models
============  ===========================================================================

Pooling is the mean of the rows of the tokens used (each token as often as it occurs),
or with ``pooling="sif"`` their mean weighted by ``a / (a + p(token))`` (smooth inverse
frequency, ``a`` = 1e-3, ``p`` from the model's counts; gensim's ``get_mean_vector`` with
those ``weights``: divided by the weights' sum; no principal component is removed);
``pre_normalize`` unit-normalises each row first (gensim's ``get_mean_vector`` default,
the word models' default), ``normalize`` the result. A text with no token used has the
zero vector (normalised or not): that is the one answer for empty and all-unknown text.

>>> spec = TextSpec(kind="words", lowercase=True)
>>> TextSpec.from_json(spec.to_json()) == spec
True
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace

__all__ = ["KINDS", "WORD_PATTERN", "TextSpec"]

KINDS = ("tokenizer", "words")

#: the default token pattern of word models: runs of letters/digits/underscores, inner
#: apostrophes, hyphens and dots kept ("don't", "e-mail", "U.S"), or one other symbol
WORD_PATTERN = r"\w+(?:['\-.]\w+)*|[^\w\s]"


@dataclass(frozen=True)
class TextSpec:
    """How text becomes one model's tokens, and how their rows are pooled.

    Parameters
    ----------
    kind : {"tokenizer", "words"}
    family : str
        Where the rule came from (``model2vec``, ``wordllama``, ``sentence-transformers``,
        ``words``): informative.
    normalize : bool
        Unit-normalise each text's vector (the model's default; ``embed`` may override).
    pre_normalize : bool
        Unit-normalise each token's row before pooling (gensim's ``get_mean_vector``).
    max_tokens : int, optional
        Keep only the first ``max_tokens`` tokens of a text (the tokenizer's truncation).
    max_chars : int, optional
        Cut a text to this many characters before tokenizing (Model2Vec's
        ``max_length * median_token_length``).
    drop_ids : tuple of int
        Token ids never pooled (Model2Vec drops its tokenizer's unknown token): counted as
        unknown.
    pattern : str
        Words: the token regular expression.
    lowercase : bool
        Words: lowercase the text first (the vocabulary has no upper-case letters).
    joiner : str
        Words: how the vocabulary joins phrases (``_`` in GoogleNews); "" for none.
    max_phrase : int
        Words: the most words a phrase of the vocabulary has.
    dims : tuple of int
        Truncated (Matryoshka) dimensions the model was trained for; any ``dims`` up to the
        model's is accepted by ``embed``.
    sif : bool
        Words: the text blob holds each word's frequency, so ``embed(pooling="sif")`` can
        weight a word by ``a / (a + p(word))`` (the model's counts).
    """

    kind: str = "words"
    family: str = ""
    normalize: bool = False
    pre_normalize: bool = False
    max_tokens: int | None = None
    max_chars: int | None = None
    drop_ids: tuple[int, ...] = ()
    pattern: str = WORD_PATTERN
    lowercase: bool = False
    joiner: str = ""
    max_phrase: int = 1
    dims: tuple[int, ...] = ()
    sif: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"text kind must be one of {KINDS}, got {self.kind!r}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> TextSpec:
        data = json.loads(raw)
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        for key in ("drop_ids", "dims"):
            if key in data:
                data[key] = tuple(data[key])
        return cls(**data)

    def but(self, **changes) -> TextSpec:
        """This spec with ``changes`` (an override: ``embed(..., tokenizer={...})``)."""
        return replace(self, **changes)
