"""The word tokenizer's phrases and a batch's :class:`Cut`, against plain definitions.

No server: :class:`~vecserve.text.tokenize.WordTokenizer` is pure Python. Random texts over
a small alphabet (so phrases meet, overlap and nest) are cut by the tokenizer and by the
definition written out word by word: at each position, the longest phrase of the
vocabulary that starts there, else the word.
"""

from __future__ import annotations

import random

import numpy as np

from vecserve.text.spec import TextSpec
from vecserve.text.tokenize import WordTokenizer


def _greedy(words: list[str], phrases: set[str], longest: int) -> list[str]:
    out, i = [], 0
    while i < len(words):
        for n in range(min(longest, len(words) - i), 1, -1):
            cand = "_".join(words[i : i + n])
            if cand in phrases:
                out.append(cand)
                i += n
                break
        else:
            out.append(words[i])
            i += 1
    return out


def test_phrases_are_the_greedy_longest_match_from_the_left():
    rng = random.Random(7)
    alphabet = ["a", "b", "c", "d", "A", "New", "York"]
    for _ in range(40):
        phrases = {
            "_".join(rng.choice(alphabet) for _ in range(rng.randint(2, 4))) for _ in range(12)
        }
        tok = WordTokenizer(TextSpec(kind="words", joiner="_", max_phrase=4), sorted(phrases))
        for _ in range(25):
            words = [rng.choice(alphabet) for _ in range(rng.randint(0, 14))]
            assert tok.words(" ".join(words)) == _greedy(words, phrases, 4), (phrases, words)


def test_a_phrase_needs_every_part_and_a_joiner():
    tok = WordTokenizer(TextSpec(kind="words", joiner="_"), ["_x", "y_", "New_York", "solo"])
    assert tok.words("New York _x y_ solo York New") == [
        "New_York",
        "_x",
        "y_",
        "solo",
        "York",
        "New",
    ]
    plain = WordTokenizer(TextSpec(kind="words"), ["New_York"])  # no joiner: no phrases
    assert plain.words("New York") == ["New", "York"]


def test_cut_indexes_each_occurrence_into_the_batchs_distinct_tokens():
    rng = random.Random(3)
    texts = [" ".join(rng.choice("abcdefg") for _ in range(rng.randint(0, 9))) for _ in range(60)]
    cut = WordTokenizer(TextSpec(kind="words")).cut(texts)
    flat = " ".join(texts).split()
    assert cut.distinct == list(dict.fromkeys(flat))  # first-seen order, each once
    assert [cut.distinct[i] for i in cut.index] == flat
    for i, text in enumerate(texts):
        got = cut.index[cut.offsets[i] : cut.offsets[i + 1]]
        assert [cut.distinct[k] for k in got] == text.split()
    assert cut.offsets[0] == 0 and not cut.dropped.any()
    empty = WordTokenizer(TextSpec(kind="words")).cut([])
    assert empty.distinct == [] and empty.offsets.tolist() == [0] and len(empty.index) == 0
    assert empty.index.dtype == np.int64
