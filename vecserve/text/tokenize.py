"""Text to tokens: one :class:`Cut` per batch of texts, the batch's distinct tokens once.

Two tokenizers, one answer shape:

- :class:`StaticTokenizer` runs a `tokenizers` JSON (a static model's, from the model's
  text blob) exactly as the reference libraries call it: no special tokens, no padding,
  the model's truncation, Model2Vec's character cut and dropped unknown id.
- :class:`WordTokenizer` cuts words with a regular expression, applies the case rule, and
  joins greedy longest-match phrases of the vocabulary (``New York Times`` ->
  ``New_York_Times`` where the vocabulary has it).

A :class:`Cut` holds the batch's distinct tokens (what one round trip reads), for every
token occurrence its index into them, and per text where its occurrences start and how
many tokens the tokenizer dropped.

>>> tok = WordTokenizer(TextSpec(kind="words", joiner="_", max_phrase=3),
...                     phrases=["New_York", "New_York_Times"])
>>> cut = tok.cut(["the New York Times", "New York"])
>>> cut.distinct, cut.index.tolist(), cut.offsets.tolist()
(['the', 'New_York_Times', 'New_York'], [0, 1, 2], [0, 2, 3])
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from .spec import TextSpec

__all__ = ["Cut", "StaticTokenizer", "WordTokenizer", "fit_words"]


class Cut(NamedTuple):
    """One batch of texts as tokens."""

    distinct: list[str]  # the batch's distinct tokens, in first-seen order
    index: np.ndarray  # int64: every occurrence's index into ``distinct``, text by text
    offsets: np.ndarray  # int64, len(texts) + 1: text i's occurrences are index[o[i]:o[i+1]]
    dropped: np.ndarray  # int64 per text: tokens the tokenizer dropped (unknown)


def _cut_of(texts_tokens: list[list[str]], dropped: np.ndarray | None = None) -> Cut:
    seen: dict[str, int] = {}
    index: list[int] = []
    offsets = np.zeros(len(texts_tokens) + 1, np.int64)
    for i, tokens in enumerate(texts_tokens):
        for t in tokens:
            j = seen.get(t)
            if j is None:
                j = seen[t] = len(seen)
            index.append(j)
        offsets[i + 1] = len(index)
    if dropped is None:
        dropped = np.zeros(len(texts_tokens), np.int64)
    return Cut(list(seen), np.asarray(index, np.int64), offsets, dropped)


class StaticTokenizer:
    """A static model's `tokenizers` tokenizer, called as its reference library does.

    Parameters
    ----------
    blob : bytes
        The tokenizer's JSON (``tokenizer.json``).
    spec : TextSpec
        Truncation (``max_tokens``, ``max_chars``) and ``drop_ids``.
    """

    def __init__(self, blob: bytes, spec: TextSpec):
        from tokenizers import Tokenizer

        self.spec = spec
        self.tokenizer = Tokenizer.from_str(blob.decode("utf-8"))
        self.tokenizer.no_padding()
        if spec.max_tokens is None:
            self.tokenizer.no_truncation()
        else:
            self.tokenizer.enable_truncation(spec.max_tokens)
        vocab = self.tokenizer.get_vocab(with_added_tokens=True)
        size = max(vocab.values(), default=-1) + 1
        names = np.empty(size, dtype=object)
        for token, i in vocab.items():
            names[i] = token
        self.names = names  # id -> token string (None where the vocabulary has a hole)
        self._drop = np.asarray(spec.drop_ids, np.int64)

    def ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids, truncated as the model's spec says (nothing dropped)."""
        cap = self.spec.max_chars
        if cap is not None:
            texts = [t[:cap] for t in texts]
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        return [e.ids for e in encode(list(texts), add_special_tokens=False)]

    def cut(self, texts: Sequence[str]) -> Cut:
        ids = self.ids(texts)
        lengths = np.fromiter((len(x) for x in ids), np.int64, len(ids))
        flat = np.fromiter((i for x in ids for i in x), np.int64, int(lengths.sum()))
        keep = np.ones(len(flat), bool)
        if len(self._drop):
            keep &= ~np.isin(flat, self._drop)
        keep &= flat < len(self.names)
        text_of = np.repeat(np.arange(len(ids)), lengths)
        dropped = np.bincount(text_of[~keep], minlength=len(ids)).astype(np.int64)
        flat, text_of = flat[keep], text_of[keep]
        uniq, inverse = np.unique(flat, return_inverse=True)
        names = self.names[uniq]
        hole = np.array([n is None for n in names], bool)
        if hole.any():  # ids the vocabulary does not name: unknown
            bad = hole[inverse]
            dropped += np.bincount(text_of[bad], minlength=len(ids)).astype(np.int64)
            remap = np.cumsum(~hole) - 1
            inverse, text_of = remap[inverse[~bad]], text_of[~bad]
            names = names[~hole]
        offsets = np.zeros(len(ids) + 1, np.int64)
        offsets[1:] = np.cumsum(np.bincount(text_of, minlength=len(ids)))
        return Cut(names.tolist(), inverse.astype(np.int64).reshape(-1), offsets, dropped)


class WordTokenizer:
    """A word model's tokenizer: pattern, case rule, greedy longest-match phrases.

    Parameters
    ----------
    spec : TextSpec
        ``pattern``, ``lowercase``, ``joiner``, ``max_phrase``.
    phrases : iterable of str
        The vocabulary's multi-word tokens (joined by ``spec.joiner``).
    """

    def __init__(self, spec: TextSpec, phrases: Iterable[str] = ()):
        self.spec = spec
        self.pattern = re.compile(spec.pattern)
        self.joiner = spec.joiner
        # every proper prefix of a phrase (as a tuple of words) -> True, the phrases -> their token
        self.prefixes: set[tuple[str, ...]] = set()
        self.phrases: dict[tuple[str, ...], str] = {}
        if self.joiner:
            for p in phrases:
                parts = tuple(p.split(self.joiner))
                if len(parts) < 2 or not all(parts):
                    continue
                self.phrases[parts] = p
                for n in range(1, len(parts)):
                    self.prefixes.add(parts[:n])

    def words(self, text: str) -> list[str]:
        """One text's tokens (phrases joined)."""
        if self.spec.lowercase:
            text = text.lower()
        words = self.pattern.findall(text)
        if not self.phrases:
            return words
        out, i, n = [], 0, len(words)
        prefixes, phrases = self.prefixes, self.phrases
        while i < n:
            best, best_end = words[i], i + 1
            j = i + 1
            key: tuple[str, ...] = (words[i],)
            while key in prefixes and j < n:
                key = (*key, words[j])
                j += 1
                hit = phrases.get(key)
                if hit is not None:
                    best, best_end = hit, j
            out.append(best)
            i = best_end
        return out

    def cut(self, texts: Sequence[str]) -> Cut:
        return _cut_of([self.words(t) for t in texts])


def fit_words(tokens: Iterable[str], *, joiner: str = "_") -> tuple[TextSpec, list[str]]:
    """The word rule that fits a vocabulary, and its phrases (the text blob).

    Case: lowercase only when no token has an upper-case letter (a vocabulary holding
    ``King`` is case-sensitive). Phrases: tokens made of 2+ non-empty parts joined by
    ``joiner`` (GoogleNews's ``New_York_Times``), unless the vocabulary has none.

    >>> spec, phrases = fit_words(["new_york", "new", "york", "the"])
    >>> spec.lowercase, spec.joiner, spec.max_phrase, phrases
    (True, '_', 2, ['new_york'])
    """
    upper = False
    phrases: list[str] = []
    longest = 1
    for t in tokens:
        if not upper and t != t.lower():
            upper = True
        if joiner and joiner in t:
            parts = t.split(joiner)
            if len(parts) >= 2 and all(parts):
                phrases.append(t)
                longest = max(longest, len(parts))
    spec = TextSpec(
        kind="words",
        family="words",
        pre_normalize=True,
        lowercase=not upper,
        joiner=joiner if phrases else "",
        max_phrase=longest,
    )
    return spec, phrases
