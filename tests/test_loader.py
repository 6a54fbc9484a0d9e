"""The loader end to end against a real server: parity, atomicity, bad input, interruptions."""

from __future__ import annotations

import gzip
import hashlib
import logging

import numpy as np
import pytest
from gensim.models import KeyedVectors

from tests.helpers import (
    cluster_client,
    durable_valkey,
    gensim_data,
    kill_on_third_batch,
    write_w2v,
)
from vecserve.embedded import NO_RETRY
from vecserve.errors import (
    CorruptVectorFile,
    DimensionMismatch,
    LoadInProgress,
    LoadInterrupted,
    ModelNotFound,
    StoreUnavailable,
    VectorFileError,
)
from vecserve.loader import load_arrays, load_file
from vecserve.store import LoadSession, Store


def read_back(store: Store, name: str):
    info = store.get_model(name)
    tokens = store.vocab(info)
    matrix, found = info.codec_obj.decode_values(store.fetch(info, tokens), info.dim)
    assert found.all()
    return info, tokens, matrix


def only_metadata_left(store: Store) -> bool:
    keys = set(store.client.keys("*"))
    return keys <= {b"vecserve:generation", b"vecserve:models"}


@pytest.mark.parametrize(
    ("fname", "binary", "errors"),
    [
        ("euclidean_vectors.bin", True, "strict"),
        ("high_precision.kv.txt", False, "strict"),
        ("toy-model.vec", False, "strict"),
        ("high_precision.kv.bin", True, "strict"),
        ("crime-and-punishment.vec", False, "ignore"),
        ("lee_fasttext.vec", False, "strict"),
    ],
)
def test_loaded_model_equals_gensim(store, fname, binary, errors):
    path = gensim_data(fname)
    ref = KeyedVectors.load_word2vec_format(path, binary=binary, unicode_errors=errors)
    info = load_file(path, name="M", store=store, unicode_errors=errors, progress=False)
    _, tokens, matrix = read_back(store, "M")
    assert tokens == ref.index_to_key
    assert matrix.tobytes() == ref.vectors.astype(np.float32).tobytes()  # bit-identical
    assert info.count == len(ref) and info.dim == ref.vector_size
    with open(path, "rb") as f:
        assert info.sha256 == hashlib.sha256(f.read()).hexdigest()


def test_non_ascii_gz_and_limit(store, small_bin, tmp_path):
    path, tokens, vectors = small_bin
    gz = tmp_path / "small.bin.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    info = load_file(gz, name="G", store=store, limit=499, progress=False)
    _, got, matrix = read_back(store, "G")
    assert info.count == 499 and got == tokens[:499] and "日本" in got
    assert np.array_equal(matrix, vectors[:499])
    assert store.client.get("G:日本".encode()) == vectors[498].astype("<f4").tobytes()


@pytest.mark.parametrize(("codec", "tol"), [("f16", 1e-2), ("i8", 3e-2)])
def test_compact_codecs(store, small_bin, codec, tol):
    path, _tokens, vectors = small_bin
    info = load_file(path, name="C", store=store, codec=codec, progress=False)
    _, _, matrix = read_back(store, "C")
    assert info.codec == codec
    assert np.abs(matrix - vectors).max() < tol * np.abs(vectors).max()


def test_reload_replaces_atomically(store, small_bin, tmp_path):
    path, _tokens, _vectors = small_bin
    first = load_file(path, name="M", store=store, progress=False)
    new = write_w2v(tmp_path / "new.bin", ["x", "y"], np.ones((2, 20), np.float32))
    second = load_file(new, name="M", store=store, progress=False)
    assert second.generation == first.generation + 1
    _, got, matrix = read_back(store, "M")
    assert got == ["x", "y"] and (matrix == 1).all()
    assert store.client.llen(first.vocab_key) == 0
    assert store.client.get(b"M:w0") is None


def test_a_bad_file_during_reload_keeps_the_old_generation(store, small_bin, tmp_path):
    path, tokens, vectors = small_bin
    first = load_file(path, name="M", store=store, progress=False)
    broken = tmp_path / "broken.bin"
    broken.write_bytes(path.read_bytes()[:-50])
    with pytest.raises(CorruptVectorFile):
        load_file(broken, name="M", store=store, batch_size=64, progress=False)
    assert store.get_model("M") == first
    assert store.list_loads() == []
    _, got, matrix = read_back(store, "M")
    assert got == tokens and np.array_equal(matrix, vectors)


def test_duplicates_keep_the_first_and_warn(store, tmp_path, caplog):
    path = tmp_path / "dup.txt"
    path.write_text("3 2\na 1 2\nb 3 4\na 5 6\n")
    with caplog.at_level(logging.WARNING):
        info = load_file(path, name="D", store=store, progress=False)
    assert "duplicate" in caplog.text
    _, got, matrix = read_back(store, "D")
    assert got == ["a", "b"] and matrix.tolist() == [[1, 2], [3, 4]]
    assert info.duplicates == 1


def test_binary_tokens_as_bytes_and_as_decoded_text_meet_in_one_model(store, tmp_path):
    """A UTF-8 .bin's valid tokens go to Redis as the file's bytes, a batch with an
    undecodable token as the UTF-8 of its decoded text; the two kinds are one vocabulary
    (a replaced token equal to an earlier literal one is its duplicate)."""
    raw = ["λ".encode(), "ab\ufffd".encode(), b"x", b"ab\xff", b"y"]
    vectors = np.arange(10, dtype=np.float32).reshape(5, 2)
    path = tmp_path / "mixed.bin"
    records = (t + b" " + v.tobytes() for t, v in zip(raw, vectors, strict=True))
    path.write_bytes(b"5 2\n" + b"".join(records))
    info = load_file(
        path, name="M", store=store, batch_size=2, unicode_errors="replace", progress=False
    )
    _, got, matrix = read_back(store, "M")
    assert got == ["λ", "ab\ufffd", "x", "y"] and info.duplicates == 1
    assert matrix.tolist() == vectors[[0, 1, 2, 4]].tolist()
    assert store.client.exists(*Store.vector_keys(info.prefix, got)) == 4


BAD_INPUTS = {
    "truncated .bin": (b"2 3\na " + b"\0" * 12 + b"b " + b"\0" * 5, CorruptVectorFile),
    "header promises more": (b"3 2\na 1 2\nb 3 4\n", CorruptVectorFile),
    "wrong number of floats": (b"2 3\na 1 2 3\nb 1 2\n", DimensionMismatch),
    "line that does not parse": (b"2 2\na 1 2\nb 1 zz\n", CorruptVectorFile),
    "undecodable token": (b"1 2\n\xff\xfe 1 2\n", CorruptVectorFile),
    "empty file": (b"", VectorFileError),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_names_file_and_position_and_leaves_nothing(store, tmp_path, case):
    data, exc = BAD_INPUTS[case]
    path = tmp_path / ("bad.bin" if "bin" in case else "bad.txt")
    path.write_bytes(data)
    with pytest.raises(exc) as err:
        load_file(path, name="BAD", store=store, batch_size=1, progress=False)
    msg = str(err.value)
    assert str(path) in msg
    if case != "empty file":
        assert any(w in msg for w in ("line", "offset", "vector #")), msg
    with pytest.raises(ModelNotFound):
        store.get_model("BAD")
    assert store.list_loads() == [] and only_metadata_left(store)


def test_missing_path(store, tmp_path):
    with pytest.raises(VectorFileError, match=r"nope\.bin"):
        load_file(tmp_path / "nope.bin", name="X", store=store, progress=False)


def test_interrupted_load_is_invisible_then_resumes_to_the_same_model(
    store, small_bin, monkeypatch
):
    path, tokens, vectors = small_bin
    real_write = LoadSession.write_encoded
    calls = {"n": 0}

    def flaky_write(self, *a, **kw):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the load
        return real_write(self, *a, **kw)

    monkeypatch.setattr(LoadSession, "write_encoded", flaky_write)
    with pytest.raises(KeyboardInterrupt):
        load_file(path, name="R", store=store, batch_size=50, progress=False)
    monkeypatch.setattr(LoadSession, "write_encoded", real_write)
    with pytest.raises(ModelNotFound, match="unfinished"):
        store.get_model("R")
    [state] = store.list_loads()
    assert state.written == 150 and store.lock_holder("R") is None
    with pytest.raises(LoadInProgress, match="--resume"):
        load_file(path, name="R", store=store, progress=False)
    info = load_file(path, name="R", store=store, batch_size=50, resume=True, progress=False)
    _, got, matrix = read_back(store, "R")
    assert got == tokens and np.array_equal(matrix, vectors)
    assert info.count == 500 and store.list_loads() == []
    with open(path, "rb") as f:
        assert info.sha256 == hashlib.sha256(f.read()).hexdigest()


def test_a_file_is_opened_once_per_load_resumed_or_not(store, small_bin, monkeypatch):
    """The loader reads a file's header and its records through one opening (a resumed
    load too: it learns where to go on from after the header, then skips to it)."""
    import vecserve.readers._reader as reader_module

    path, tokens, vectors = small_bin
    opened = []

    class CountedSource(reader_module.Source):
        def __init__(self, *a, **kw):
            opened.append(a[0])
            super().__init__(*a, **kw)

    monkeypatch.setattr(reader_module, "Source", CountedSource)
    real_write = LoadSession.write_encoded

    def stopping_write(self, *a, **kw):
        if self.state.written >= 100:
            raise KeyboardInterrupt
        return real_write(self, *a, **kw)

    monkeypatch.setattr(LoadSession, "write_encoded", stopping_write)
    with pytest.raises(KeyboardInterrupt):
        load_file(path, name="ONCE", store=store, batch_size=50, progress=False)
    assert opened == [str(path)]
    monkeypatch.setattr(LoadSession, "write_encoded", real_write)
    info = load_file(path, name="ONCE", store=store, batch_size=50, resume=True, progress=False)
    assert opened == [str(path)] * 2 and info.count == len(tokens)
    _, got, matrix = read_back(store, "ONCE")
    assert got == tokens and np.array_equal(matrix, vectors)


def test_redis_dying_mid_load_leaves_a_resumable_invisible_load(tmp_path, small_bin, monkeypatch):
    path, tokens, vectors = small_bin
    server = durable_valkey(tmp_path)
    url = server.url
    real_write = kill_on_third_batch(monkeypatch, server)
    store = Store.from_url(url, retry=NO_RETRY)
    try:
        with pytest.raises(StoreUnavailable, match=r"stopped after 100 vectors.*kept") as e:
            load_file(path, name="K", store=store, batch_size=50, progress=False)
        assert isinstance(e.value, LoadInterrupted) and e.value.resumable
        assert (e.value.model, e.value.path, e.value.written) == ("K", str(path), 100)
    finally:
        store.close()
    monkeypatch.setattr(LoadSession, "write_encoded", real_write)
    server.start()  # same data dir: the append-only file brings the partial load back
    try:
        store = Store.from_url(url)
        with pytest.raises(ModelNotFound):
            store.get_model("K")
        [state] = store.list_loads()
        assert state.written == 100
        store.client.delete("vecserve:lock:K")  # the dead process's lease, expired early
        load_file(path, name="K", store=store, batch_size=50, resume=True, progress=False)
        _, got, matrix = read_back(store, "K")
        assert got == tokens and np.array_equal(matrix, vectors)
        store.close()
    finally:
        server.stop()


def test_retries_ride_a_restart_out(tmp_path, small_bin, monkeypatch, caplog):
    """``retries=``: Redis restarting mid-load is waited out (2 s) and the load resumes
    from what was written, with one warning line; the model equals the file."""
    import threading

    path, tokens, vectors = small_bin
    server = durable_valkey(tmp_path)

    def restart() -> None:  # back before the retry, the append-only file read again
        server.start()
        again = Store.from_url(server.url)  # the lease outlived the kill: dropped, as a
        again.client.delete("vecserve:lock:K")  # failover's lost key would be
        again.close()

    kill_on_third_batch(monkeypatch, server, then=lambda: threading.Timer(0.3, restart).start())
    store = Store.from_url(server.url, retry=NO_RETRY)
    try:
        with caplog.at_level(logging.WARNING, logger="vecserve.loader"):
            info = load_file(path, name="K", store=store, batch_size=50, progress=False, retries=1)
        assert info.count == len(tokens)
        _, got, matrix = read_back(store, "K")
        assert got == tokens and np.array_equal(matrix, vectors)
        [line] = [r.getMessage() for r in caplog.records if "resuming in" in r.getMessage()]
        assert line.endswith("; resuming in 2s (retry 1 of 1)")
    finally:
        store.close()
        server.stop()


def test_unreachable_redis(small_bin):
    path, _, _ = small_bin
    with pytest.raises(StoreUnavailable, match="unreachable"):
        load_file(path, name="X", redis_url="redis://127.0.0.1:1", progress=False)


def test_load_arrays_with_counts(store):
    v = np.arange(12, dtype=np.float32).reshape(3, 4)
    info = load_arrays(["a", "b", "c"], v, name="T", store=store, counts=np.array([9, 5, 1]))
    assert info.has_counts and store.counts(info).tolist() == [9, 5, 1]
    _, got, matrix = read_back(store, "T")
    assert got == ["a", "b", "c"] and np.array_equal(matrix, v)
    with pytest.raises(ValueError, match="unique"):
        load_arrays(["a", "a"], v[:2], name="T", store=store)


@pytest.mark.cluster
def test_load_into_a_cluster(cluster_store, small_bin):
    path, tokens, vectors = small_bin
    info = load_file(path, name="CL", store=cluster_store, batch_size=64, progress=False)
    assert info.buckets > 0
    _, got, matrix = read_back(cluster_store, "CL")
    assert got == tokens and np.array_equal(matrix, vectors)
    direct = cluster_client(cluster_store.url)
    try:
        key = Store.vector_keys(info.prefix, ["café"], info.buckets)[0]
        assert direct.get(key) == vectors[497].astype("<f4").tobytes()
    finally:
        direct.close()
