"""Tests for vecserve.readers: gensim parity, resume, duplicates, bad input.

Parity means: the tokens, their order and the float32 bits are those of gensim 4.4's
``load_word2vec_format`` on the same file with the same options.
"""

from __future__ import annotations

import bz2
import gc
import gzip
import hashlib
import logging
import os
import shutil
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
from gensim.models import KeyedVectors
from gensim.test.utils import datapath

from vecserve.errors import CorruptVectorFile, DimensionMismatch, UnknownFormat, VectorFileError
from vecserve.readers import (
    FORMATS,
    ResumePoint,
    VectorBatch,
    _binary,
    _source,
    detect_format,
    open_vectors,
)
from vecserve.readers._dedup import TokenSet

# ------------------------------------------------------------------------------ helpers

RNG = np.random.default_rng(20240501)

# gensim's own vector files: name -> the format vecserve must detect
GENSIM_FILES = {
    "euclidean_vectors.bin": "w2v-bin",
    "poincare_vectors.bin": "w2v-bin",
    "high_precision.kv.bin": "w2v-bin",
    "high_precision.kv.txt": "w2v-text",
    "word2vec_pre_kv_c": "w2v-text",
    "EN.1-10.cbow1_wind5_hs0_neg10_size300_smpl1e-05.txt": "w2v-text",
    "toy-model.vec": "fasttext",
    "lee_fasttext.vec": "fasttext",
    "crime-and-punishment.vec": "fasttext",
    "test_glove.txt": "glove",
}

NON_ASCII = ["café", "naïve", "日本語", "😀", "Straße", "ﬁ", "a\tb", "x\u00a0y", "é" * 40]


def read_all(path, **kw):
    """(tokens, vectors, counts, batches, reader) of a whole file."""
    with open_vectors(path, **kw) as reader:
        batches = list(reader)
    tokens = [t for b in batches for t in b.tokens]
    vectors = (
        np.concatenate([b.vectors for b in batches])
        if batches
        else np.zeros((0, reader.dim), np.float32)
    )
    counts = [b.counts for b in batches]
    return tokens, vectors, counts, batches, reader


def gensim_load(path, fmt, **kw):
    with warnings.catch_warnings():  # with no_header=True gensim 4.4 leaks a file handle
        warnings.simplefilter("ignore", ResourceWarning)
        kv = KeyedVectors.load_word2vec_format(
            str(path), binary=fmt == "w2v-bin", no_header=fmt == "glove", **kw
        )
        gc.collect()
    return kv


def assert_parity(path, fmt, **kw):
    """vecserve's reading of ``path`` equals gensim's, bit for bit."""
    limit = kw.pop("limit", None)
    batch_size = kw.pop("batch_size", 2000)
    kv = gensim_load(path, fmt, limit=limit, **kw)
    tokens, vectors, _, batches, reader = read_all(path, limit=limit, batch_size=batch_size, **kw)
    assert reader.format == fmt or (fmt == "w2v-text" and reader.format == "fasttext")
    assert reader.dim == kv.vector_size
    # with duplicates gensim 4.4 keeps a None key and a zero row per duplicate at the end
    n = len(kv.key_to_index)
    assert all(k is None for k in kv.index_to_key[n:])
    assert tokens == kv.index_to_key[:n]
    assert vectors.dtype == np.float32
    assert vectors.view(np.uint32).tolist() == kv.vectors[:n].view(np.uint32).tolist()
    for b in batches:
        assert b.vectors.flags.c_contiguous and b.vectors.shape == (len(b.tokens), reader.dim)
        assert b.counts is None
    return batches, reader


def write_bin(path: Path, tokens, vectors, *, newline=False, count=None) -> Path:
    """A word2vec binary file; ``tokens`` may be bytes (written as is)."""
    with open(path, "wb") as f:
        f.write(f"{len(tokens) if count is None else count} {vectors.shape[1]}\n".encode())
        for t, v in zip(tokens, vectors, strict=True):
            raw = t if isinstance(t, bytes) else t.encode()
            f.write((b"\n" if newline else b"") + raw + b" " + v.astype("<f4").tobytes())
        if newline:
            f.write(b"\n")
    return path


def write_text(path: Path, tokens, rows, *, header=True, trailing=" ", count=None) -> Path:
    """A word2vec text / GloVe file; ``rows`` are lists of number strings (or floats)."""
    with open(path, "wb") as f:
        if header:
            dim = len(rows[0]) if rows else 1
            f.write(f"{len(tokens) if count is None else count} {dim}\n".encode())
        for t, row in zip(tokens, rows, strict=True):
            raw = t if isinstance(t, bytes) else t.encode()
            nums = " ".join(x if isinstance(x, str) else repr(float(x)) for x in row)
            f.write(raw + b" " + nums.encode() + trailing.encode() + b"\n")
    return path


def compress(path: Path, how: str) -> Path:
    out = path.with_name(path.name + (".gz" if how == "gzip" else ".bz2"))
    opener = gzip.open if how == "gzip" else bz2.open
    with open(path, "rb") as src, opener(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def vecs(n, dim=5):
    return RNG.standard_normal((n, dim)).astype(np.float32)


@pytest.fixture
def small_chunks(monkeypatch):
    """Read 7 bytes at a time, so records straddle every kind of chunk boundary."""
    monkeypatch.setattr(_source, "CHUNK", 7)


# ------------------------------------------------------------------------------ parity


@pytest.mark.parametrize("name", sorted(GENSIM_FILES))
def test_parity_with_gensim_test_files(name):
    fmt = GENSIM_FILES[name]
    assert detect_format(datapath(name)) == fmt
    assert_parity(datapath(name), "w2v-text" if fmt == "fasttext" else fmt)


@pytest.mark.parametrize("name", ["euclidean_vectors.bin", "lee_fasttext.vec", "test_glove.txt"])
@pytest.mark.parametrize("limit", [1, 7, 0])
def test_parity_with_limit(name, limit):
    fmt = GENSIM_FILES[name]
    if fmt == "glove" and limit == 0:
        pytest.skip("gensim 4.4 raises TypeError for no_header=True, limit=0")
    _, reader = assert_parity(
        datapath(name), "w2v-text" if fmt == "fasttext" else fmt, limit=limit, batch_size=3
    )
    if fmt != "glove":
        assert reader.count == (limit or int(Path(datapath(name)).read_bytes().split()[0]))
    else:
        assert reader.count is None


def _generated(tmp_path: Path, kind: str) -> tuple[Path, str]:
    """Files gensim can read, with the hard cases: non-ASCII, duplicates, newlines."""
    toks = [*NON_ASCII, "dup", "the", "dup", "café", "\u0301", "end"]
    v = vecs(len(toks), 7)
    if kind == "bin":
        return write_bin(tmp_path / "g.bin", toks, v), "w2v-bin"
    if kind == "bin-newlines":  # word2vec.c writes a newline after each vector
        return write_bin(tmp_path / "g.bin", toks, v, newline=True), "w2v-bin"
    # text: every float32 written with 9 significant digits, some with many more
    rows = [[f"{x:.9g}" for x in row] for row in v.tolist()]
    rows[0] = ["0.1000000000000000055511151231257827", "1e-50", "-0", "3", "5.", "+.5", "1_0"]
    rows[1] = [repr(float(np.float32(x))) for x in v[1]]
    if kind == "text":
        return write_text(tmp_path / "g.txt", toks, rows), "w2v-text"
    if kind == "vec":
        return write_text(tmp_path / "g.vec", toks, rows, trailing=" "), "w2v-text"
    if kind == "crlf":
        return write_text(tmp_path / "g.txt", toks, rows, trailing="\r"), "w2v-text"
    assert kind == "glove"
    return write_text(tmp_path / "g.txt", toks, rows, header=False, trailing=""), "glove"


GENERATED = ["bin", "bin-newlines", "text", "vec", "crlf", "glove"]


@pytest.mark.parametrize("compression", [None, "gzip", "bz2"])
@pytest.mark.parametrize("kind", GENERATED)
def test_parity_generated(tmp_path, kind, compression, caplog):
    path, fmt = _generated(tmp_path, kind)
    if compression:
        path = compress(path, compression)
    with caplog.at_level(logging.WARNING, logger="vecserve.readers"):
        _, reader = assert_parity(path, fmt, batch_size=4)
    assert reader.duplicates == 2
    dup_logs = [r for r in caplog.records if r.name == "vecserve.readers"]
    assert len(dup_logs) == 2 and all("duplicate word" in r.getMessage() for r in dup_logs)
    assert reader.size_bytes == os.path.getsize(path)
    assert reader.bytes_read == reader.size_bytes
    assert reader.sha256() == hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("kind", GENERATED)
def test_parity_across_chunk_boundaries(tmp_path, kind, small_chunks):
    path, fmt = _generated(tmp_path, kind)
    for batch_size in (1, 3, 100):
        assert_parity(path, fmt, batch_size=batch_size)
    assert_parity(compress(path, "gzip"), fmt, batch_size=5)


@pytest.mark.parametrize("kind", ["bin", "text"])
@pytest.mark.parametrize("limit", [1, 11, 12, 13, 100])
def test_parity_limit_counts_duplicates(tmp_path, kind, limit):
    path, fmt = _generated(tmp_path, kind)  # "dup" repeats at records 12 and 13 (from 1)
    assert_parity(path, fmt, limit=limit, batch_size=2)


@pytest.mark.parametrize("errors", ["ignore", "replace"])
@pytest.mark.parametrize("kind", ["bin", "text"])
def test_parity_unicode_errors(tmp_path, kind, errors):
    # a UTF-8 character cut in half (word2vec.c truncates tokens at a byte count), a
    # stray byte, a newline before a dropped byte; "ab\xff" and "ab" collide under ignore
    toks = [b"caf\xc3", b"ab\xff", b"ab", b"\xff\rx", b"ok", "日本".encode()[:4]]
    if kind == "bin":
        toks[3] = b"\xff\nx"  # decodes to "\nx" under ignore: gensim strips the newline
        path = write_bin(tmp_path / "u.bin", toks, vecs(len(toks), 3), newline=True)
    else:
        path = write_text(tmp_path / "u.txt", toks, vecs(len(toks), 3).tolist())
    fmt = "w2v-bin" if kind == "bin" else "w2v-text"
    assert_parity(path, fmt, unicode_errors=errors)
    with pytest.raises(UnicodeDecodeError):  # gensim raises on strict; vecserve too:
        gensim_load(path, fmt)
    with pytest.raises(CorruptVectorFile, match="not valid utf-8") as exc:
        read_all(path)
    assert exc.value.record == 1 and str(path) in str(exc.value)


def test_text_numbers_are_bit_identical_to_gensim(tmp_path):
    # halfway points between neighbouring float32 values, written with 17-40 digits:
    # the cases where parsing straight to float32 and float-then-float32 could differ
    x = RNG.standard_normal(3000).astype(np.float32)
    mid = (x.astype(np.float64) + np.nextafter(x, np.float32(np.inf)).astype(np.float64)) / 2
    fields = [repr(float(m)) for m in mid[:1500]] + [f"{m:.40f}" for m in mid[1500:]]
    rows = [fields[i : i + 30] for i in range(0, 3000, 30)]
    path = write_text(tmp_path / "mid.txt", [f"w{i}" for i in range(100)], rows)
    assert_parity(path, "w2v-text")


def test_overflow_becomes_inf_without_a_warning(tmp_path):
    path = write_text(tmp_path / "o.txt", ["big"], [["1e39", "-1e39", "nan"]])
    _, vectors, *_ = read_all(path)
    assert np.isposinf(vectors[0, 0]) and np.isneginf(vectors[0, 1]) and np.isnan(vectors[0, 2])


def test_glove_tokens_may_contain_spaces(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("new york 0.5 1.5\nthe 1 2\nsan jose ca 3 4\n")
    tokens, vectors, *_ = read_all(path)
    assert tokens == ["new york", "the", "san jose ca"]
    assert vectors.tolist() == [[0.5, 1.5], [1, 2], [3, 4]]
    path.write_text("the 1 2\nsix 6 7 8\n")  # three numbers: not a token with a space
    with pytest.raises(DimensionMismatch, match="3 numbers"):
        read_all(path)


# ------------------------------------------------------------------------ gensim .kv files


def _saved_kv(tmp_path, *, counts=True, sep_limit=10 * 1024**2):
    kv = KeyedVectors(6)
    kv.add_vectors([f"w{i}" for i in range(50)] + NON_ASCII, vecs(50 + len(NON_ASCII), 6))
    if counts:
        for i, key in enumerate(kv.index_to_key):
            kv.set_vecattr(key, "count", 1000 - i)
    path = tmp_path / "model.kv"
    kv.save(str(path), sep_limit=sep_limit)
    return kv, path


@pytest.mark.parametrize("sep_limit", [10 * 1024**2, 0])  # vectors in the pickle / in .npy
def test_gensim_kv(tmp_path, sep_limit):
    kv, path = _saved_kv(tmp_path, sep_limit=sep_limit)
    assert detect_format(path) == "gensim"
    tokens, vectors, counts, batches, reader = read_all(path, batch_size=8)
    assert reader.format == "gensim" and reader.dim == 6 and reader.count == len(kv)
    assert tokens == kv.index_to_key
    assert vectors.view(np.uint32).tolist() == kv.vectors.view(np.uint32).tolist()
    assert np.concatenate(counts).tolist() == [kv.get_vecattr(k, "count") for k in tokens]
    assert batches[-1].resume == ResumePoint(len(kv), len(kv))
    files = [path, *sorted(tmp_path.glob("model.kv.*.npy"))]
    assert (len(files) > 1) == (sep_limit == 0)
    assert reader.size_bytes == sum(f.stat().st_size for f in files)
    assert reader.sha256() == hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()
    tokens, _, _, _, reader = read_all(path, limit=10, resume=batches[0].resume)
    assert tokens == kv.index_to_key[8:10] and reader.count == 10


def test_gensim_kv_without_counts_and_full_models(tmp_path):
    from gensim.models import Word2Vec

    _, path = _saved_kv(tmp_path, counts=False)
    assert all(c is None for c in read_all(path)[2])
    model = Word2Vec([["a", "b", "c"]] * 20, vector_size=4, min_count=1, epochs=1, workers=1)
    model.save(str(tmp_path / "w2v.model"))
    tokens, vectors, *_ = read_all(tmp_path / "w2v.model")
    assert tokens == model.wv.index_to_key and np.array_equal(vectors, model.wv.vectors)


def test_gensim_kv_missing_its_npy_file(tmp_path):
    _, path = _saved_kv(tmp_path, sep_limit=0)
    for npy in tmp_path.glob("model.kv.*.npy"):
        npy.unlink()
    with pytest.raises(VectorFileError, match="missing"):
        open_vectors(path)


def test_corrupt_gensim_pickle(tmp_path):
    path = tmp_path / "bad.kv"
    path.write_bytes(b"\x80\x04\x95garbage")
    with pytest.raises(CorruptVectorFile, match="gensim"):
        open_vectors(path)


# ---------------------------------------------------------------------------- resume


@pytest.mark.parametrize("kind", ["bin", "bin-newlines", "text", "glove"])
def test_resume_continues_exactly(tmp_path, kind):
    path, _ = _generated(tmp_path, kind)
    path = compress(path, "gzip")
    all_tokens, all_vectors, _, batches, full = read_all(path, batch_size=3)
    sha = full.sha256()
    for k, batch in enumerate(batches):
        seen = [t for b in batches[: k + 1] for t in b.tokens]
        tokens, vectors, _, rest, reader = read_all(
            path, batch_size=3, resume=batch.resume, seen_tokens=iter(seen)
        )
        assert seen + tokens == all_tokens
        assert np.array_equal(vectors, all_vectors[len(seen) :])
        assert [b.resume for b in rest] == [b.resume for b in batches[k + 1 :]]
        assert reader.sha256() == sha


def test_resume_errors(tmp_path):
    path, _ = _generated(tmp_path, "bin")
    with pytest.raises(ValueError, match="before the first record"):
        open_vectors(path, resume=ResumePoint(offset=2, records=0))
    with pytest.raises(CorruptVectorFile, match="resume point"):
        open_vectors(path, resume=ResumePoint(offset=10**9, records=3))


# ------------------------------------------------------------------------ duplicates


def test_token_set_matches_a_python_set():
    rng = np.random.default_rng(7)
    s, ref = TokenSet(), set()
    for _ in range(200):
        batch = [f"t{i}" for i in rng.integers(0, 30000, rng.integers(1, 2500))]
        keep = s.add_new(batch)
        expected = []
        for i, t in enumerate(batch):
            if t not in ref:
                ref.add(t)
                expected.append(i)
        assert (list(range(len(batch))) if keep is None else keep.tolist()) == expected
    assert len(s) == len(ref)


def test_token_set_memory_is_at_most_16_bytes_per_token():
    s = TokenSet()
    for start in range(0, 300_000, 2000):
        assert s.add_new([f"tok{i}" for i in range(start, start + 2000)]) is None
        assert s.nbytes <= 16 * len(s) + 8192
    assert s.add_new(["tok5", "new", "tok299999"]).tolist() == [1]


def test_duplicates_are_logged_not_warned(tmp_path, caplog):
    path = write_bin(tmp_path / "d.bin", ["a", "b", "a", "c", "b", "a"], vecs(6))
    with caplog.at_level(logging.WARNING, logger="vecserve.readers"):
        tokens, _, _, _, reader = read_all(path, batch_size=2)
    assert tokens == ["a", "b", "c"] and reader.duplicates == 3
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(messages) == 3 and "duplicate word 'a'" in messages[0] and "#3" in messages[0]


@pytest.mark.parametrize("kind", ["bin", "text"])
def test_batches_carry_the_tokens_key_bytes(tmp_path, kind):
    """``VectorBatch.raw`` is each token's UTF-8, the bytes of its key: a UTF-8 .bin's
    as cut from the file, others encoded from the decoded token; duplicates are found on
    them, and a token that only ``surrogatepass`` reads stays the token it read."""
    toks = ["λ".encode(), b"\xed\xa0\x80", b"b", b"\xed\xa0\x80", "λ".encode()]
    if kind == "bin":
        path = write_bin(tmp_path / "s.bin", toks, vecs(len(toks), 2))
    else:
        path = write_text(tmp_path / "s.txt", toks, vecs(len(toks), 2).tolist())
    with open_vectors(path, batch_size=2, unicode_errors="surrogatepass") as reader:
        batches = list(reader)
    assert [t for b in batches for t in b.tokens] == ["λ", "\ud800", "b"]
    assert [t for b in batches for t in b.raw] == ["λ".encode(), b"\xed\xa0\x80", b"b"]
    assert reader.duplicates == 2


# ------------------------------------------------------------------- reader behaviour


def test_reader_metadata_and_batches(tmp_path):
    path = write_bin(tmp_path / "m.bin", [f"w{i}" for i in range(10)], vecs(10, 4))
    with open_vectors(path, batch_size=4) as reader:
        assert (reader.format, reader.dim, reader.count) == ("w2v-bin", 4, 10)
        assert reader.size_bytes == path.stat().st_size
        sizes, offsets = [], []
        for batch in reader:
            assert isinstance(batch, VectorBatch)
            sizes.append(len(batch.tokens))
            offsets.append(batch.resume.offset)
            assert reader.bytes_read >= batch.resume.offset
        assert sizes == [4, 4, 2] and offsets[-1] == path.stat().st_size
        assert reader.sha256() == hashlib.sha256(path.read_bytes()).hexdigest()
    assert "w2v-bin" in repr(reader)


def test_sha256_covers_the_whole_file_whenever_asked(tmp_path):
    path = compress(write_bin(tmp_path / "s.bin", [f"w{i}" for i in range(500)], vecs(500)), "bz2")
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    with open_vectors(path, limit=3) as reader:
        assert reader.sha256() == expected  # before reading
        list(reader)
        assert reader.sha256() == expected  # after reading only 3 of 500


def test_format_override_and_limit_zero(tmp_path):
    path = write_text(tmp_path / "x.vec", ["a", "b"], [[1, 2], [3, 4]])
    assert detect_format(path) == "fasttext"
    tokens, _, _, _, reader = read_all(path, format="w2v-text", limit=0)
    assert reader.format == "w2v-text" and tokens == ["a", "b"]
    assert FORMATS == ("w2v-bin", "w2v-text", "glove", "fasttext", "fasttext-bin", "gensim")


def test_bad_arguments(tmp_path):
    path = write_text(tmp_path / "x.txt", ["a"], [[1, 2]])
    with pytest.raises(UnknownFormat, match="unknown format 'word2vec'"):
        open_vectors(path, format="word2vec")
    with pytest.raises(ValueError, match="limit"):
        open_vectors(path, limit=-1)
    with pytest.raises(ValueError, match="batch_size"):
        open_vectors(path, batch_size=0)
    with pytest.raises(VectorFileError, match="unknown --unicode-errors 'nonsense'"):
        open_vectors(path, unicode_errors="nonsense")
    with pytest.raises(VectorFileError, match="unknown encoding 'nope'"):
        open_vectors(path, encoding="nope")


def test_no_thread_is_left_behind(tmp_path):
    path = write_bin(tmp_path / "t.bin", [f"w{i}" for i in range(2000)], vecs(2000, 50))
    before = threading.active_count()
    with open_vectors(path, batch_size=10) as reader:
        next(iter(reader))  # stop early: the read-ahead thread must still end
    assert threading.active_count() == before


# ---------------------------------------------------------------------------- bad input


def _good_then_error(path, exc_type, **kw):
    """Tokens yielded before ``exc_type`` was raised, and the exception."""
    got: list[str] = []
    with pytest.raises(exc_type) as info, open_vectors(path, **kw) as reader:
        for batch in reader:
            got += batch.tokens
    assert str(path) in str(info.value)
    return got, info.value


@pytest.mark.parametrize("newline", [False, True])
def test_truncated_bin(tmp_path, newline, small_chunks):
    path = write_bin(tmp_path / "t.bin", [f"w{i}" for i in range(9)], vecs(9), newline=newline)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 10 - newline])  # the last vector loses 10 bytes
    got, exc = _good_then_error(path, CorruptVectorFile, batch_size=4)
    assert got == [f"w{i}" for i in range(8)]  # both good batches came first
    assert exc.record == 9 and "truncated" in str(exc) and "vector #9" in str(exc)
    assert exc.offset == len(data) - newline - (newline + len("w8 ") + 20)  # where w8 starts
    path.write_bytes(data[: len(data) - newline - len("8 ") - 20])  # ends inside a token
    _, exc = _good_then_error(path, CorruptVectorFile)
    assert "inside a token" in str(exc) and exc.record == 9


@pytest.mark.parametrize("kind", ["bin", "text"])
def test_header_promises_more_vectors(tmp_path, kind):
    if kind == "bin":
        path = write_bin(tmp_path / "p.bin", ["a", "b", "c"], vecs(3), count=5)
    else:
        path = write_text(tmp_path / "p.txt", ["a", "b", "c"], vecs(3).tolist(), count=5)
    got, exc = _good_then_error(path, CorruptVectorFile, batch_size=2)
    assert got == ["a", "b", "c"] and exc.record == 4
    assert "promises 5 vectors but the file ends after 3" in str(exc)
    assert exc.offset == path.stat().st_size
    # gensim's own test file pretrained.vec promises 3 vectors and holds 1
    _, exc = _good_then_error(datapath("pretrained.vec"), CorruptVectorFile)
    assert "promises 3" in str(exc)


def test_wrong_number_of_floats(tmp_path):
    path = write_text(tmp_path / "w.txt", ["a", "b", "c"], [[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    path.write_bytes(path.read_bytes().replace(b"c 7.0 8.0 9.0", b"c 7.0 8.0"))
    got, exc = _good_then_error(path, DimensionMismatch, batch_size=1)
    assert got == ["a", "b"] and exc.line == 4 and exc.record == 3
    assert "2 numbers after the token 'c'" in str(exc) and "line 4" in str(exc)
    assert exc.offset == path.read_bytes().index(b"c 7")


def test_text_line_that_does_not_parse(tmp_path):
    path = write_text(tmp_path / "n.txt", ["a", "b", "c"], [[1, 2], ["4", "x5"], [7, 8]])
    got, exc = _good_then_error(path, CorruptVectorFile)
    assert type(exc) is CorruptVectorFile and got == ["a"]
    assert "'x5' is not a number" in str(exc) and exc.line == 3 and exc.record == 2


@pytest.mark.parametrize("header", [b"3 x", b"3", b"3 5 7", b"-1 5", b"\xff\xfe 5"])
def test_header_that_is_not_two_ints(tmp_path, header):
    path = tmp_path / "h.txt"
    path.write_bytes(header + b"\na 1 2 3 4 5\n")
    with pytest.raises(CorruptVectorFile, match="not a 'count dim' header") as exc:
        open_vectors(path, format="w2v-text")
    assert exc.value.line == 1 and str(path) in str(exc.value)
    with pytest.raises(CorruptVectorFile, match="not a 'count dim' header"):
        open_vectors(path, format="w2v-bin")


def test_undetectable_format(tmp_path):
    path = tmp_path / "u.txt"
    path.write_bytes(b"hello world\nthis is prose\n")
    with pytest.raises(UnknownFormat, match="line 1"):
        open_vectors(path)
    assert detect_format(datapath("crime-and-punishment.bin")) == "fasttext-bin"


@pytest.mark.parametrize("kind", ["bin", "text"])
def test_undecodable_token_with_strict(tmp_path, kind):
    toks = [b"good", b"fine", b"bad\xffword", b"never"]
    if kind == "bin":
        path = write_bin(tmp_path / "s.bin", toks, vecs(4))
    else:
        path = write_text(tmp_path / "s.txt", toks, vecs(4).tolist())
    got, exc = _good_then_error(path, CorruptVectorFile, batch_size=3)
    assert got == ["good", "fine"] and exc.record == 3
    assert "b'bad\\xffword' is not valid utf-8" in str(exc) and "--unicode-errors" in str(exc)
    assert exc.offset == path.read_bytes().index(b"bad")
    if kind == "text":
        assert exc.line == 4


@pytest.mark.parametrize("fmt", ["auto", "w2v-bin", "glove", "gensim"])
def test_empty_file(tmp_path, fmt):
    path = tmp_path / "empty.bin"
    path.write_bytes(b"")
    with pytest.raises(CorruptVectorFile, match="empty"):
        open_vectors(path, format=fmt)
    with pytest.raises(CorruptVectorFile, match="empty"):
        open_vectors(compress(path, "gzip"))


def test_missing_path_and_directory(tmp_path):
    with pytest.raises(VectorFileError, match="no such file") as exc:
        open_vectors(tmp_path / "nope.bin")
    assert isinstance(exc.value.__cause__, FileNotFoundError)
    with pytest.raises(VectorFileError, match="directory"):
        open_vectors(tmp_path)
    with pytest.raises(VectorFileError, match="no such file"):
        detect_format(tmp_path / "nope.bin")


def test_corrupt_gz(tmp_path, small_chunks):
    path = compress(
        write_bin(tmp_path / "c.bin", [f"w{i}" for i in range(3000)], vecs(3000)), "gzip"
    )
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # truncated
    got, exc = _good_then_error(path, CorruptVectorFile, batch_size=100)
    assert "corrupt gzip data" in str(exc) and "byte offset" in str(exc)
    assert len(got) > 1000 and got == [f"w{i}" for i in range(len(got))]  # good ones first
    second = gzip.compress(b"w " + bytes(20))  # a valid first member, then a bad one:
    path.write_bytes(gzip.compress(b"1 5\n") + second[:10] + b"\xff" + second[11:])
    # (byte 10 starts the deflate data: 0xff makes its first block of type 3, invalid)
    _, exc = _good_then_error(path, CorruptVectorFile, format="w2v-bin")
    assert "corrupt gzip data" in str(exc) and "invalid block type" in str(exc)
    path.write_bytes(b"not gzip at all")
    with pytest.raises(CorruptVectorFile, match="not gzip data"):
        open_vectors(path)


def test_runaway_lines_and_records_stop_early(tmp_path, small_chunks):
    path = tmp_path / "long.txt"
    path.write_bytes(b"2 2\na 1 2\n" + b"x" * 70_000 + b" 1 2\n")
    got, exc = _good_then_error(path, CorruptVectorFile)
    assert got == ["a"] and "a line longer than" in str(exc) and exc.line == 3
    assert read_all(path, limit=1)[0] == ["a"]  # a limit that stops before it is fine
    path = tmp_path / "long.bin"
    path.write_bytes(b"2 2\na " + bytes(8) + b"x" * 70_000)
    got, exc = _good_then_error(path, CorruptVectorFile)
    assert got == ["a"] and "no complete record" in str(exc) and exc.record == 2


def test_records_across_big_chunks(tmp_path, monkeypatch):
    """Big chunks: the record cut by a chunk boundary is parsed from a small bridge."""
    monkeypatch.setattr(_source, "CHUNK", 1000)
    monkeypatch.setattr(_binary, "MAX_TOKEN", 40)
    toks = [f"w{i}" for i in range(300)] + ["ü" * 30, b"caf\xc3", "long" * 10]
    path = write_bin(tmp_path / "b.bin", toks, vecs(len(toks)), newline=True)
    for batch_size in (1, 7, 1000):
        assert_parity(path, "w2v-bin", batch_size=batch_size, unicode_errors="replace")
    got, exc = _good_then_error(path, CorruptVectorFile, batch_size=64)
    assert exc.record == 302 and got == toks[:301]


def test_public_names():
    import vecserve.readers as readers

    assert readers.__all__ == sorted(readers.__all__)
    assert all(getattr(readers, name) is not None for name in readers.__all__)
