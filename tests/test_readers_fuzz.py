"""Fuzzing every reader with mutated real files: each outcome is a complete read or a
VectorFileError naming the file (and, for corrupt bytes, the position) -- never another
exception, never a hang.

Tabs: vecserve, like gensim's ``load_word2vec_format`` (``line.rstrip().split(" ")``),
separates fields by single spaces only. A tab inside a line is part of a token or a
number, so a tab between numbers is a CorruptVectorFile naming the line; a trailing tab
is whitespace at the end of the line and ignored, as gensim's ``rstrip`` does.
"""

from __future__ import annotations

import bz2
import gzip
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vecserve.errors import CorruptVectorFile, DimensionMismatch, VectorFileError
from vecserve.readers import open_vectors


def _sources() -> dict[str, bytes]:
    from gensim.models import KeyedVectors

    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((5, 4)).astype(np.float32)
    kv = KeyedVectors(4)
    kv.add_vectors(["king", "queen", "Ünïcode", "中文", "x"], vectors)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, binary in (("w2v-bin", True), ("w2v-text", False)):
            path = Path(tmp) / name
            kv.save_word2vec_format(str(path), binary=binary)
            out[name] = path.read_bytes()
    text = out["w2v-text"].decode()
    out["glove"] = text.split("\n", 1)[1].encode()  # no header
    out["w2v-bin.gz"] = gzip.compress(out["w2v-bin"])
    out["glove.bz2"] = bz2.compress(out["glove"])
    return out


SOURCES = _sources()


@st.composite
def mutated(draw):
    kind = draw(st.sampled_from(sorted(SOURCES)))
    data = bytearray(SOURCES[kind])
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["truncate", "flip", "insert", "header", "lines", "tab"]))
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        if op == "truncate":
            del data[i:]
        elif op == "flip":
            data[i] ^= draw(st.integers(1, 255))
        elif op == "insert":
            data[i:i] = draw(st.sampled_from([b"\x00", b"\t", b" ", b"\n", b"\r\n", b"\xff"]))
        elif op == "header":  # a lying header: huge or negative counts and dims
            _, _, rest = bytes(data).partition(b"\n")
            lie = draw(st.sampled_from([b"99999999999 4", b"5 99999999", b"-3 4", b"5 0", b"5"]))
            data = bytearray(lie + b"\n" + rest)
        elif op == "lines":  # shuffled or duplicated lines
            lines = bytes(data).split(b"\n")
            j = draw(st.integers(0, len(lines) - 1))
            if draw(st.booleans()):
                lines.insert(j, lines[i % len(lines)])
            else:
                lines[i % len(lines)], lines[j] = lines[j], lines[i % len(lines)]
            data = bytearray(b"\n".join(lines))
        else:  # a tab instead of a space
            spaces = [k for k, b in enumerate(data) if b == 0x20]
            if spaces:
                data[spaces[i % len(spaces)]] = 0x09
    return kind, bytes(data)


@settings(
    max_examples=int(os.environ.get("VECSERVE_FUZZ_EXAMPLES", "300")),
    derandomize=os.environ.get("VECSERVE_FUZZ_EXAMPLES") is None,  # CI: the same 300 cases
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(mutated())
def test_every_reader_reads_or_names_the_problem(tmp_path, case):
    kind, data = case
    path = tmp_path / f"fuzz.{kind}"
    path.write_bytes(data)
    try:
        with open_vectors(path, batch_size=2) as reader:
            for batch in reader:
                assert batch.vectors.shape == (len(batch.tokens), reader.dim)
                assert batch.vectors.dtype == np.float32
    except VectorFileError as exc:
        assert str(path) in str(exc)
        if isinstance(exc, CorruptVectorFile):
            assert exc.offset is not None or exc.line is not None or exc.record is not None


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("a 1 2 3 4\nb 1\t2 3 4\n", False),  # a tab between numbers
        ("a 1 2 3 4\nb 1 2 3 4\t\n", True),  # a trailing tab: trailing whitespace
    ],
)
def test_tabs(tmp_path, text, ok):
    path = tmp_path / "tabs.txt"
    path.write_text(text)
    if ok:
        with open_vectors(path) as reader:
            assert sum(len(b.vectors) for b in reader) == 2
    else:
        with (
            pytest.raises(
                CorruptVectorFile, match=r"line 2, .* has a tab, and fields are separated"
            ),
            open_vectors(path) as reader,
        ):
            list(reader)


def test_a_short_glove_line_with_a_word_is_a_dimension_error(tmp_path):
    """Found by the fuzz test: it was a bare "ValueError: cannot reshape array"."""
    path = tmp_path / "short.txt"
    path.write_text("a 1 2 3 4\nb x 1\n")
    with (
        pytest.raises(DimensionMismatch, match=r"line 2, .* 2 numbers after the token 'b'"),
        open_vectors(path) as reader,
    ):
        list(reader)


def test_unknown_encoding_is_a_clear_error(tmp_path):
    path = tmp_path / "v.txt"
    path.write_text("1 2\na 1 2\n")
    with pytest.raises(VectorFileError, match="unknown encoding 'nope'"):
        open_vectors(path, encoding="nope")
