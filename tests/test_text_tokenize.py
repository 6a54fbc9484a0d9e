"""The word tokenizer's phrases and a batch's :class:`Cut`, against plain definitions.

No server: :class:`~vecserve.text.tokenize.WordTokenizer` needs none. Random texts over
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


def test_a_batch_is_cut_as_its_texts_one_by_one_and_no_phrase_crosses_two():
    """``cut`` joins a whole batch's words in one pass: a phrase never spans the end of one
    text and the start of the next, and each text's tokens are its ``words``."""
    phrases = ["New_York", "New_York_Times", "York_Times_Square", "a_b_c_d", "b_c"]
    tok = WordTokenizer(TextSpec(kind="words", joiner="_", max_phrase=4), phrases)
    texts = ["I read the New", "York Times", "", "New York Times Square", "a b c", "a b c d"]
    texts += ["x New", "York", "b c", "New York Times"]
    cut = tok.cut(texts)
    for i, text in enumerate(texts):
        got = [cut.distinct[k] for k in cut.index[cut.offsets[i] : cut.offsets[i + 1]]]
        assert got == tok.words(text), (i, text)
    assert tok.words("I read the New") == ["I", "read", "the", "New"]
    assert tok.words("New York Times Square") == ["New_York_Times", "Square"]
    assert tok.words("a b c") == ["a", "b_c"]  # a_b_c is only a prefix of a_b_c_d
    assert "New_York" not in cut.distinct  # only ever part of a longer match here
    # a text may hold a phrase as one word already: one token, however it was written
    cut = tok.cut(["New_York", "x New York", "New_York_Times New York Times"])
    assert cut.distinct == ["New_York", "x", "New_York_Times"]
    assert cut.index.tolist() == [0, 1, 0, 2, 2] and cut.offsets.tolist() == [0, 1, 3, 5]
    assert cut.distinct == list(dict.fromkeys(cut.distinct[k] for k in cut.index))
    rng = random.Random(11)  # and against the plain definition, batch by batch
    alphabet = ["a", "b", "c", "New", "York"]
    for _ in range(20):
        phrases = {
            "_".join(rng.choice(alphabet) for _ in range(rng.randint(2, 4))) for _ in range(8)
        }
        tok = WordTokenizer(TextSpec(kind="words", joiner="_", max_phrase=4), sorted(phrases))
        batch = [[rng.choice(alphabet) for _ in range(rng.randint(0, 6))] for _ in range(12)]
        cut = tok.cut([" ".join(w) for w in batch])
        want = [t for words in batch for t in _greedy(words, phrases, 4)]
        assert [cut.distinct[k] for k in cut.index] == want
        assert np.diff(cut.offsets).tolist() == [len(_greedy(w, phrases, 4)) for w in batch]


def test_the_phrase_index_is_left_alone_by_the_garbage_collector():
    """A GoogleNews-sized index is millions of strings: held in dicts of str and int (which
    the collector does not track), a full collection does not walk them in every worker."""
    import gc

    tok = WordTokenizer(TextSpec(kind="words", joiner="_"), ["a_b", "a_b_c_d", "x_y_z"])
    assert tok.words("a b c d x y z") == ["a_b_c_d", "x_y_z"]
    gc.collect()
    assert not gc.is_tracked(tok.longer)
    assert not any(map(gc.is_tracked, tok.follow.values()))
