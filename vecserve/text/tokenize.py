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
from itertools import chain, repeat
from typing import NamedTuple

import numpy as np

from ..errors import NoTokenizer
from ..subwords import word_hashes
from ._phrases import GROWS, PHRASE, join_phrases
from .spec import TextSpec

__all__ = [
    "Cut",
    "StaticTokenizer",
    "WordTokenizer",
    "fit_words",
    "pack_words",
    "sif_weights",
    "unpack_words",
]

#: a word model's text blob: this line, the phrases' byte length (8 bytes, little-endian),
#: the phrases (UTF-8, one a line), then for SIF the vocabulary's sorted word hashes
#: (``<u8``, :func:`vecserve.subwords.word_hashes`) and each one's frequency (``<f4``)
_WORDS_MAGIC = b"vecserve-words/1\n"
#: WordTokenizer's flags for a word pair (or a longer prefix): it is a phrase; a longer
#: phrase goes on from it
_PHRASE, _GROWS = PHRASE, GROWS
#: what follows each text's words in a batch's one list of words (no word, no phrase)
_END = (None,)


class Cut(NamedTuple):
    """One batch of texts as tokens."""

    distinct: list[str]  # the batch's distinct tokens, in first-seen order
    index: np.ndarray  # int64: every occurrence's index into ``distinct``, text by text
    offsets: np.ndarray  # int64, len(texts) + 1: text i's occurrences are index[o[i]:o[i+1]]
    dropped: np.ndarray  # int64 per text: tokens the tokenizer dropped (unknown)


def _cut_of(texts_tokens: list[list[str]], dropped: np.ndarray | None = None) -> Cut:
    # C-level passes only: the flat tokens, their distinct ones in first-seen order (a
    # dict keeps insertion order), each occurrence's index by one dict lookup
    flat = list(chain.from_iterable(texts_tokens))
    distinct = list(dict.fromkeys(flat))
    at = dict(zip(distinct, range(len(distinct)), strict=True))
    index = np.fromiter(map(at.__getitem__, flat), np.int64, len(flat))
    offsets = np.zeros(len(texts_tokens) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, texts_tokens), np.int64, len(texts_tokens)), out=offsets[1:])
    if dropped is None:
        dropped = np.zeros(len(texts_tokens), np.int64)
    return Cut(distinct, index, offsets, dropped)


def _ended(texts_tokens: list[list[str]]):
    """Each text's tokens, then ``None`` (for one ``chain.from_iterable``)."""
    return chain.from_iterable(zip(texts_tokens, repeat(_END)))


def _cut_ended(tokens: list, n: int) -> Cut:
    """:func:`_cut_of` of ``n`` texts' tokens written end to end, ``None`` after each."""
    # None is one more distinct "token": its occurrences mark where each text ends, and
    # it leaves the index by one vectorised pass (indices past it move down by one)
    distinct = list(dict.fromkeys(tokens))
    at = dict(zip(distinct, range(len(distinct)), strict=True))
    index = np.fromiter(map(at.__getitem__, tokens), np.int64, len(tokens))
    end = at[None]
    del distinct[end]
    is_end = index == end
    offsets = np.zeros(n + 1, np.int64)
    offsets[1:] = np.flatnonzero(is_end) - np.arange(n)
    index = index[~is_end]
    index[index > end] -= 1
    return Cut(distinct, index, offsets, np.zeros(n, np.int64))


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
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise NoTokenizer(
                "a static model's tokenizer needs the 'tokenizers' package in this "
                "process: pip install 'vecserve[text]'"
            ) from None

        self.spec = spec
        self.tokenizer = Tokenizer.from_str(blob.decode("utf-8"))
        self.tokenizer.no_padding()
        if self.tokenizer.pre_tokenizer is None:
            # no pre-tokenizer (Llama's, WordLlama's): each whole text is one "word" to
            # the model, and a BPE model caches every word it met, 10,000 whole texts of
            # any length: ~80 MB more per worker after 20,000 sentences, never hit again
            # by new text. Words split by a pre-tokenizer keep the cache (it pays there).
            resize = getattr(self.tokenizer.model, "_resize_cache", None)
            if resize is not None:
                resize(0)
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
        self._named = np.fromiter((n is not None for n in names), bool, size)
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
        n = len(ids)
        lengths = np.fromiter(map(len, ids), np.int64, n)
        flat = np.fromiter(chain.from_iterable(ids), np.int64, int(lengths.sum()))
        # kept: ids the vocabulary names (a hole or an id past it: unknown), not dropped
        keep = flat < len(self.names)
        keep[keep] = self._named[flat[keep]]
        if len(self._drop):
            keep &= ~np.isin(flat, self._drop)
        text_of = np.repeat(np.arange(n), lengths)
        dropped = np.bincount(text_of[~keep], minlength=n).astype(np.int64)
        flat, text_of = flat[keep], text_of[keep]
        # the batch's distinct ids in id order and each occurrence's index into them: one
        # pass over a vocabulary-sized mask (no sort of the occurrences)
        present = np.zeros(len(self.names), bool)
        present[flat] = True
        uniq = np.flatnonzero(present)
        inverse = (np.cumsum(present) - 1)[flat]
        offsets = np.zeros(n + 1, np.int64)
        offsets[1:] = np.cumsum(np.bincount(text_of, minlength=n))
        return Cut(self.names[uniq].tolist(), inverse.astype(np.int64), offsets, dropped)


class WordTokenizer:
    """A word model's tokenizer: pattern, case rule, greedy longest-match phrases.

    Parameters
    ----------
    spec : TextSpec
        ``pattern``, ``lowercase``, ``joiner``, ``max_phrase``.
    phrases : iterable of str
        The vocabulary's multi-word tokens (joined by ``spec.joiner``).
    freq : (ndarray, ndarray), optional
        The vocabulary's sorted word hashes and frequencies (:func:`unpack_words`).
    """

    def __init__(self, spec: TextSpec, phrases: Iterable[str] = (), freq=None):
        self.spec = spec
        self.freq = freq  # (sorted word hashes, frequencies) for SIF, or None
        self.pattern = re.compile(spec.pattern)
        self.joiner = j = spec.joiner
        # A first-word index: each word a phrase starts with -> the words that can follow
        # it there -> the two-word phrase itself (its str, as the vocabulary writes it)
        # where no longer phrase goes on from the pair, else flags: whether the pair is a
        # phrase (_PHRASE) and whether a longer one goes on (_GROWS). ``join_phrases``
        # walks it in C: where a phrase can start and nearly every decision are dict
        # lookups, no string built for a two-word phrase. Only where a pair grows is
        # ``longer`` met: each phrase of 3+ words and each proper prefix of 3+ words of
        # one -> the same two flags, one lookup a word. Dicts of str and int only, never
        # a set: the garbage collector leaves them alone (a set of 3M strings is walked
        # by every full collection, ~0.2 s of a worker's time, whoever is waiting).
        self.follow: dict[str, dict[str, str | int]] = {}
        self.longer: dict[str, int] = {}
        if j:
            same: dict[str, str] = {}  # one str object per distinct word across the dicts
            for p in phrases:
                parts = p.split(j)
                if len(parts) < 2 or not all(parts):
                    continue
                first = same.setdefault(parts[0], parts[0])
                second = same.setdefault(parts[1], parts[1])
                nexts = self.follow.get(first)
                if nexts is None:
                    nexts = self.follow[first] = {}
                was = nexts.get(second)
                if len(parts) == 2:  # the pair is a phrase
                    if was is None or was.__class__ is str:
                        nexts[second] = p
                    else:
                        nexts[second] = was | _PHRASE
                    continue
                if was is None:
                    nexts[second] = _GROWS
                elif was.__class__ is str:
                    nexts[second] = _PHRASE | _GROWS
                else:
                    nexts[second] = was | _GROWS
                longer = self.longer
                longer[p] = longer.get(p, 0) | _PHRASE
                for n in range(3, len(parts)):
                    grown = j.join(parts[:n])
                    longer[grown] = longer.get(grown, 0) | _GROWS

    def _find(self, texts: Sequence[str]) -> list[list[str]]:
        """Each text's words (the pattern's matches, after the case rule)."""
        findall = self.pattern.findall
        if self.spec.lowercase:
            return [findall(t.lower()) for t in texts]
        return list(map(findall, texts))

    def words(self, text: str) -> list[str]:
        """One text's tokens (phrases joined, greedy longest match from the left)."""
        words = self._find((text,))[0]
        if not self.follow or len(words) < 2:
            return words
        return join_phrases(words, self.follow, self.longer, self.joiner)

    def cut(self, texts: Sequence[str]) -> Cut:
        per = self._find(texts)
        if not self.follow or not per:
            return _cut_of(per)
        # the whole batch in one compiled pass: its words end to end, None after each text
        flat = list(chain.from_iterable(_ended(per)))
        return _cut_ended(join_phrases(flat, self.follow, self.longer, self.joiner), len(per))


def pack_words(phrases: Sequence[str], tokens=None, counts=None) -> bytes:
    """A word model's text blob: its phrases and, with ``counts``, each token's frequency.

    >>> phrases, freq = unpack_words(pack_words(["a_b"], ["a", "a_b"], [3, 1]))
    >>> phrases, freq[1].tolist()
    (['a_b'], [0.75, 0.25])
    """
    text = "\n".join(phrases).encode("utf-8")
    out = [_WORDS_MAGIC, len(text).to_bytes(8, "little"), text]
    if counts is not None and tokens is not None and len(tokens):
        counts = np.asarray(counts, np.float64)
        hashes = word_hashes([t.encode("utf-8") for t in tokens])
        order = np.argsort(hashes, kind="stable")
        probs = counts / max(counts.sum(), 1.0)
        out += [hashes[order].astype("<u8").tobytes(), probs[order].astype("<f4").tobytes()]
    return b"".join(out)


def unpack_words(blob: bytes) -> tuple[list[str], tuple[np.ndarray, np.ndarray] | None]:
    """``(phrases, (sorted word hashes, frequencies) or None)`` of :func:`pack_words`."""
    if not blob.startswith(_WORDS_MAGIC):
        return [], None
    at = len(_WORDS_MAGIC)
    n = int.from_bytes(blob[at : at + 8], "little")
    text = blob[at + 8 : at + 8 + n].decode("utf-8")
    rest = memoryview(blob)[at + 8 + n :]
    phrases = text.split("\n") if text else []
    if not len(rest):
        return phrases, None
    m = len(rest) // 12
    hashes = np.frombuffer(rest[: 8 * m], "<u8").astype(np.uint64, copy=False)
    return phrases, (hashes, np.frombuffer(rest[8 * m :], "<f4"))


def sif_weights(freq: tuple[np.ndarray, np.ndarray], tokens: Sequence[str], a: float = 1e-3):
    """``a / (a + p(token))`` for each token (``p`` = 0 for a token the counts lack).

    >>> freq = unpack_words(pack_words([], ["a", "b"], [3, 1]))[1]
    >>> sif_weights(freq, ["a", "zz"], a=0.25).round(3).tolist()
    [0.25, 1.0]
    """
    hashes, probs = freq
    h = word_hashes([t.encode("utf-8") for t in tokens])
    at = np.minimum(np.searchsorted(hashes, h), max(len(hashes) - 1, 0))
    p = np.where(hashes[at] == h, probs[at], 0.0) if len(hashes) else np.zeros(len(h))
    return a / (a + p.astype(np.float64))


def fit_words(tokens: Sequence[str], *, joiner: str = "_", counts=None) -> tuple[TextSpec, bytes]:
    """The word rule that fits a vocabulary, and its text blob (:func:`pack_words`).

    Case: lowercase only when no token has an upper-case letter (a vocabulary holding
    ``King`` is case-sensitive). Phrases: tokens made of 2+ non-empty parts joined by
    ``joiner`` (GoogleNews's ``New_York_Times``), unless the vocabulary has none.
    ``counts`` (the model's, in ``tokens``' order): frequencies for SIF pooling.

    >>> spec, blob = fit_words(["new_york", "new", "york", "the"])
    >>> spec.lowercase, spec.joiner, spec.max_phrase, unpack_words(blob)
    (True, '_', 2, (['new_york'], None))
    """
    tokens = list(tokens)
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
        sif=counts is not None and len(tokens) > 0,
    )
    return spec, pack_words(phrases, tokens, counts)
