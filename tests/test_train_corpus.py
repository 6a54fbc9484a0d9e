"""Corpus readers, the vocabulary pass and the encoding pass."""

from __future__ import annotations

import bz2
import gzip

import numpy as np
import pytest

from vecserve.errors import TrainingError
from vecserve.train import corpus as corpus_mod
from vecserve.train.corpus import iter_sentences
from vecserve.train.vocab import build_vocab, encode_corpus, scan_corpus

TEXT = "the cat sat on the mat\nthe dog sat\n\non the log the end\n"


def as_str(sentences):
    return [[t.decode() for t in s] for s in sentences]


def test_line_sentences(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text(TEXT)
    expected = [line.split() for line in TEXT.splitlines() if line.split()]
    got = [s for s in as_str(iter_sentences(p)) if s]
    assert got == expected


@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
def test_chunk_boundaries_do_not_split_tokens(tmp_path, chunk):
    p = tmp_path / "c.txt"
    p.write_text(TEXT)
    got = [s for s in as_str(iter_sentences(p, chunk_bytes=chunk)) if s]
    assert got == [line.split() for line in TEXT.splitlines() if line.split()]


def test_text8_style_line_is_cut_into_pseudo_sentences(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_mod, "MAX_SENTENCE", 4)
    words = [f"w{i}" for i in range(10)]
    p = tmp_path / "text8"
    p.write_text(" " + " ".join(words))  # one line, no newline, leading space like text8
    for chunk in (5, 1 << 20):
        got = as_str(iter_sentences(p, chunk_bytes=chunk))
        assert got == [words[0:4], words[4:8], words[8:10]]


@pytest.mark.parametrize("opener,suffix", [(gzip.open, ".gz"), (bz2.open, ".bz2")])
def test_compressed(tmp_path, opener, suffix):
    p = tmp_path / f"c.txt{suffix}"
    with opener(p, "wt") as f:
        f.write(TEXT)
    first = next(s for s in as_str(iter_sentences(p)) if s)
    assert first == ["the", "cat", "sat", "on", "the", "mat"]


def test_scan_gz_file_matches_plain(tmp_path):
    plain = tmp_path / "c.txt"
    plain.write_text(TEXT * 50)
    with gzip.open(tmp_path / "c.txt.gz", "wt") as f:
        f.write(TEXT * 50)
    v1, e1 = scan_corpus(plain, min_count=2)
    v2, e2 = scan_corpus(tmp_path / "c.txt.gz", min_count=2)
    assert v1.words == v2.words and e1.words.tolist() == e2.words.tolist()


def test_directory_reads_files_in_order(tmp_path):
    (tmp_path / "b.txt").write_text("three four\n")
    (tmp_path / "a.txt").write_text("one two\n")
    assert as_str(iter_sentences(tmp_path)) == [["one", "two"], ["three", "four"]]


def test_iterable_passes_through_and_rejects_strings():
    assert list(iter_sentences([["a", "b"], ["c"]])) == [["a", "b"], ["c"]]
    with pytest.raises(TrainingError, match="lists of tokens"):
        list(iter_sentences(["a b c"]))


def test_bad_paths(tmp_path):
    with pytest.raises(TrainingError, match="no such file"):
        list(iter_sentences(tmp_path / "missing.txt"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrainingError, match="no files"):
        list(iter_sentences(tmp_path / "empty"))
    b = tmp_path / "model.bin"
    b.write_bytes(b"12 3\n\x00\x01\x02\x03" * 10)
    with pytest.raises(TrainingError, match="binary"):
        list(iter_sentences(b))


def test_vocab_counts_sorted_and_min_count():
    v = build_vocab([["a", "b", "a", "c"], ["c", "a", "d"]], min_count=2)
    assert v.words == ["a", "c"]
    assert v.counts.tolist() == [3, 2]
    assert v.raw_words == 7


def test_vocab_ties_keep_first_seen_order():
    assert build_vocab([["z", "y", "x", "y", "z", "x"]], min_count=1).words == ["z", "y", "x"]


def test_max_final_vocab_raises_min_count():
    sents = [["a"] * 5 + ["b"] * 4 + ["c"] * 3 + ["d"] * 3]
    assert build_vocab(sents, min_count=1, max_final_vocab=2).words == ["a", "b"]
    assert build_vocab(sents, min_count=1, max_final_vocab=3).words == ["a", "b"]  # c/d tie


def test_max_vocab_size_prunes_rare_words(monkeypatch):
    import vecserve.train.vocab as vocab_mod

    monkeypatch.setattr(vocab_mod, "BATCH_TOKENS", 4)
    sents = [["a", "a", "b", "c"], ["a", "d", "e", "f"], ["a", "b", "g", "h"]]
    v = build_vocab(sents, min_count=1, max_vocab_size=4)
    assert v.words[0] == "a" and "c" not in v.words


def test_vocab_errors():
    with pytest.raises(TrainingError, match="empty"):
        build_vocab([], min_count=1)
    with pytest.raises(TrainingError, match="min_count=5"):
        build_vocab([["a", "b", "a"]], min_count=5)
    with pytest.raises(TrainingError, match="UTF-8"):
        build_vocab([[b"\xff\xfe", b"\xff\xfe"]], min_count=1)


@pytest.mark.parametrize("memmap_bytes", [0, 1 << 30])
def test_encode_drops_oov_and_empty_sentences(memmap_bytes):
    sents = [["a", "b", "a"], ["x"], ["b", "y", "a"]]
    v = build_vocab(sents, min_count=2)
    enc = encode_corpus(sents, v, memmap_bytes=memmap_bytes)
    assert isinstance(enc.words, np.memmap) == (memmap_bytes == 0)
    assert enc.words.tolist() == [0, 1, 0, 1, 0]
    assert enc.bounds.tolist() == [0, 3, 5]


def test_encode_across_batches(monkeypatch):
    import vecserve.train.vocab as vocab_mod

    monkeypatch.setattr(vocab_mod, "BATCH_TOKENS", 3)
    sents = [["a", "b"], ["q"], ["b", "a", "b"], ["a"]]
    v = build_vocab(sents, min_count=2)
    enc = encode_corpus(sents, v)
    assert enc.bounds.tolist() == [0, 2, 5, 6]
    assert [v.words[i] for i in enc.words] == ["a", "b", "b", "a", "b", "a"]


@pytest.mark.parametrize("memmap_bytes", [0, 1 << 30])
@pytest.mark.parametrize("batch_tokens", [5, 1 << 20])
def test_one_pass_scan_equals_two_passes(monkeypatch, memmap_bytes, batch_tokens):
    import vecserve.train.vocab as vocab_mod

    monkeypatch.setattr(vocab_mod, "BATCH_TOKENS", batch_tokens)
    monkeypatch.setattr(vocab_mod, "_BLOCK", 7)
    monkeypatch.setattr(vocab_mod, "_token_bound", lambda corpus: 3)  # the buffer grows
    rng = np.random.default_rng(3)
    sents = [[f"w{int(x)}" for x in rng.zipf(1.5, rng.integers(0, 9))] for _ in range(200)]
    for min_count, max_final in ((1, None), (3, None), (1, 5)):
        v1 = build_vocab(sents, min_count=min_count, max_final_vocab=max_final)
        e1 = encode_corpus(sents, v1)
        v2, e2 = scan_corpus(
            iter(sents), min_count=min_count, max_final_vocab=max_final, memmap_bytes=memmap_bytes
        )
        assert v2.words == v1.words and v2.counts.tolist() == v1.counts.tolist()
        assert e2.words.tolist() == e1.words.tolist()
        assert e2.bounds.tolist() == e1.bounds.tolist()
        assert isinstance(e2.words, np.memmap) == (memmap_bytes == 0)
    with pytest.raises(TrainingError, match="empty"):
        scan_corpus([[], []])
