"""A file is what its format says, or nothing is committed: a declared format checked
against the content (`FormatMismatch` naming the likely one), a header's count checked
against what follows (`TrailingData` naming how much remains), on every reader, through
the loader and the real ``vecserve load``."""

from __future__ import annotations

import bz2
import gzip
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from gensim.models import KeyedVectors

from tests.api_support import run_vecserve
from tests.helpers import gensim_data, write_w2v
from vecserve.errors import (
    CorruptVectorFile,
    DimensionMismatch,
    FormatMismatch,
    TrailingData,
    VectorFileError,
)
from vecserve.loader import load_file
from vecserve.readers import FORMATS, open_vectors
from vecserve.store.layout import LOADS, MODELS

RNG = np.random.default_rng(11)
TOKENS = [f"w{i}" for i in range(40)]
VECTORS = RNG.standard_normal((40, 10)).astype(np.float32)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """One real file of every format, written by its reference writer."""
    d = tmp_path_factory.mktemp("formats")
    kv = KeyedVectors(10)
    kv.add_vectors(TOKENS, VECTORS)
    kv.save(str(d / "m.kv"))
    glove = d / "g.txt"
    lines = (f"{t} {' '.join(map(str, v))}\n" for t, v in zip(TOKENS, VECTORS, strict=True))
    glove.write_text("".join(lines))
    vec = d / "m.vec"
    write_w2v(vec, TOKENS, VECTORS, binary=False)
    return {
        "w2v-bin": str(write_w2v(d / "m.bin", TOKENS, VECTORS)),
        "w2v-text": str(write_w2v(d / "m.txt", TOKENS, VECTORS, binary=False)),
        "fasttext": str(vec),
        "glove": str(glove),
        "fasttext-bin": gensim_data("lee_fasttext.bin"),
        "gensim": str(d / "m.kv"),
    }


def _compatible(a: str, b: str) -> bool:
    return a == b or {a, b} <= {"w2v-text", "fasttext"}


@pytest.mark.parametrize("actual", FORMATS)
def test_a_wrongly_declared_format_names_the_likely_one(files, actual):
    path = files[actual]
    for declared in FORMATS:
        if _compatible(declared, actual):
            continue
        with pytest.raises(FormatMismatch) as err, open_vectors(path, format=declared) as r:
            list(r)
        assert (err.value.declared, err.value.detected) == (declared, actual), declared
        said = str(err.value)
        assert f"the content is not {declared}: it looks like {actual}" in said
        assert f"--format {actual}" in said and path in said


@pytest.mark.parametrize("actual", FORMATS)
def test_a_wrong_format_commits_nothing_and_keeps_the_live_model(store, files, actual):
    """Whatever reader is asked for the wrong content, the registry and the keyspace
    are as they were: the model loaded before stays live, no load is left behind."""
    good = load_file(files["w2v-bin"], name="M", store=store, progress=False)
    before = (store.client.hgetall(MODELS), store.client.dbsize())
    for declared in FORMATS:
        if _compatible(declared, actual):
            continue
        with pytest.raises(FormatMismatch, match=f"looks like {actual}"):
            load_file(files[actual], name="M", store=store, format=declared, progress=False)
        assert (store.client.hgetall(MODELS), store.client.dbsize()) == before
        assert not store.client.hlen(LOADS)
    assert store.get_model("M").generation == good.generation


def test_the_issue_case_through_the_real_command(store, tmp_path):
    """`vecserve load lee_fasttext.vec --format w2v-bin` once committed 964 number
    tokens with zero vectors; now one line blames the format, and nothing is visible.
    `--format glove` on a binary file blames the format, not the encoding."""
    env = {**os.environ, "VECSERVE_REDIS_URL": store.url}
    lee = gensim_data("lee_fasttext.vec")
    proc = run_vecserve("load", lee, "--key", "X", "--format", "w2v-bin", env=env, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        f"Error: {lee}: the content is not w2v-bin: it looks like fasttext (a 'count dim' "
        "header, then lines of a token and numbers); pass --format fasttext, or leave "
        "--format out to detect it"
    ]
    assert store.client.dbsize() == 0
    euc = gensim_data("euclidean_vectors.bin")
    proc = run_vecserve("load", euc, "--key", "X", "--format", "glove", env=env, check=False)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
    assert "looks like w2v-bin" in proc.stderr and "--encoding" not in proc.stderr
    assert store.client.dbsize() == 0


def test_text_read_as_binary_is_refused_even_unrecognised(tmp_path):
    """A text file whose first line does not fit its header (so no format is plain from
    the first bytes) declared w2v-bin: its first vector's bytes are digits, refused
    rather than committed as numbers and near-zero vectors."""
    path = tmp_path / "t.txt"
    path.write_text("2 4\na 1 2 3 4 5 6\nb 1 2 3 4 5 6\n")
    with (
        pytest.raises(FormatMismatch, match=r"is text \(b'1 2 3.*not binary float32") as err,
        open_vectors(path, format="w2v-bin") as reader,
    ):
        list(reader)
    assert err.value.declared == "w2v-bin"
    with (
        pytest.raises(DimensionMismatch, match="6 numbers after the token 'a'"),
        open_vectors(path) as reader,
    ):
        list(reader)


# -- the header's count against what follows ------------------------------------------


def _bin(path, n_written, count, *, newline=False, tail=b""):
    with open(path, "wb") as f:
        f.write(f"{count} 10\n".encode())
        for t, v in zip(TOKENS[:n_written], VECTORS[:n_written], strict=True):
            f.write((b"\n" if newline else b"") + t.encode() + b" " + v.tobytes())
        f.write((b"\n" if newline else b"") + tail)
    return path


def _read(path, **kw):
    with open_vectors(path, batch_size=7, **kw) as reader:
        return [t for b in reader for t in b.tokens]


@pytest.mark.parametrize("newline", [False, True])
def test_binary_bytes_after_the_declared_count_are_refused(tmp_path, newline):
    path = _bin(tmp_path / "b.bin", 40, 30, newline=newline)
    with pytest.raises(TrailingData) as err:
        _read(path)
    rest = 10 * (3 + 1 + 40 + newline) + newline  # 10 records ("w3x " + floats), "\n"
    assert err.value.remaining == rest and err.value.record == 31
    assert f"{rest:,} bytes remain after the 30 vectors the header declares" in str(err.value)
    assert "--limit 30" in str(err.value)
    assert _read(path, limit=30) == TOKENS[:30]  # what --limit is for
    assert _read(path, limit=20) == TOKENS[:20]
    whole = _bin(tmp_path / "w.bin", 30, 30, newline=newline)  # one final newline: fine
    assert _read(whole) == TOKENS[:30]


def test_binary_trailing_garbage_even_one_byte(tmp_path):
    path = _bin(tmp_path / "b.bin", 30, 30, tail=b"\nx")
    with pytest.raises(TrailingData, match="2 bytes remain"):
        _read(path)


@pytest.mark.parametrize("compress", [None, gzip.open, bz2.open])
def test_text_lines_after_the_declared_count_are_refused(tmp_path, compress):
    plain = write_w2v(tmp_path / "m.txt", TOKENS, VECTORS, binary=False)
    lines = plain.read_bytes().split(b"\n")
    lines[0] = b"36 10"
    path = tmp_path / ("t.txt" + {None: "", gzip.open: ".gz", bz2.open: ".bz2"}[compress])
    data = b"\n".join(lines)
    if compress is None:
        path.write_bytes(data)
    else:
        with compress(path, "wb") as f:
            f.write(data)
    with pytest.raises(TrailingData) as err:
        _read(path)
    assert err.value.lines == 4 and err.value.line == 38
    assert "4 more lines" in str(err.value) and "--limit 36" in str(err.value)
    assert _read(path, limit=36) == TOKENS[:36]
    blank = tmp_path / "blank.txt"
    blank.write_bytes(b"\n".join(lines[:37]) + b"\n\n  \n")  # blank lines after: fine
    assert _read(blank) == TOKENS[:36]


def test_fewer_records_than_the_header_declares(tmp_path):
    path = _bin(tmp_path / "b.bin", 20, 30)
    with pytest.raises(CorruptVectorFile, match="the header promises 30 vectors but the file"):
        _read(path)


def test_trailing_data_drops_the_load(store, tmp_path):
    """Found after every record was written: the load is dropped, not committed and not
    left to resume, and the previous generation stays live."""
    load_file(_bin(tmp_path / "ok.bin", 30, 30), name="M", store=store, progress=False)
    before = (store.client.hgetall(MODELS), sorted(store.client.keys()))
    path = _bin(tmp_path / "b.bin", 40, 30)
    with pytest.raises(TrailingData):
        load_file(path, name="M", store=store, batch_size=4, progress=False)
    assert (store.client.hgetall(MODELS), sorted(store.client.keys())) == before
    assert not store.client.hlen(LOADS)
    info = load_file(path, name="M", store=store, limit=30, progress=False)
    assert info.count == 30 and store.get_model("M").generation == info.generation


def test_a_vocabulary_is_never_the_numbers_of_a_text_file(store, tmp_path):
    """The reported file under a .bin name: declared w2v-bin it is refused; detected,
    it is read as the text it is."""
    lee = shutil.copy(gensim_data("lee_fasttext.vec"), tmp_path / "lee.bin")
    with pytest.raises(VectorFileError):
        load_file(lee, name="X", store=store, format="w2v-bin", progress=False)
    info = load_file(lee, name="X", store=store, progress=False)  # detected: w2v-text
    assert info.source_format == "w2v-text" and store.vocab(info, 0, 1) == ["the"]


@pytest.mark.parametrize("wrong", [8, 12])
def test_a_wrong_binary_dimension_blames_the_header_not_the_encoding(tmp_path, wrong):
    data = Path(gensim_data("euclidean_vectors.bin")).read_bytes()
    path = tmp_path / "d.bin"
    path.write_bytes(f"2747 {wrong}\n".encode() + data.split(b"\n", 1)[1])
    with pytest.raises(CorruptVectorFile) as err:
        _read(path)
    said = str(err.value)
    assert f"do not fit the header's dimension {wrong}: they read as 10-d vectors" in said
    assert err.value.record == 2 and "--encoding" not in said


def test_a_wrong_text_dimension_names_both(tmp_path):
    path = tmp_path / "d.txt"
    path.write_text("2 3\na 1 2\nb 3 4\n")
    with pytest.raises(DimensionMismatch, match="2 numbers after the token 'a', the file's "):
        _read(path)


def test_the_formats_table_is_the_one_list():
    """`vecserve.readers.formats.TABLE` is where formats live: `FORMATS`, each format's
    opener and its description derive from it, and reading it imports no parser (the
    CLI reads it at start-up)."""
    import importlib
    import subprocess

    from tests.helpers import program
    from vecserve.readers import formats

    assert formats.FORMATS == tuple(f.name for f in formats.TABLE) == FORMATS
    for line in formats.TABLE:
        module, function = line.opener.split(":")
        assert callable(getattr(importlib.import_module(f"vecserve.readers.{module}"), function))
        assert line.looks
    out = subprocess.run(program("readers_modules"), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['vecserve.readers.formats']"
