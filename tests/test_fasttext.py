"""Native fastText ``.bin`` models: the reader, the load, and out-of-vocabulary words.

Compared with gensim's ``load_facebook_vectors`` on the ``.bin`` files gensim ships: the
in-vocabulary vectors bit-exactly in f32 (gensim's ``vectors``: word row and n-grams,
composed), out-of-vocabulary words within float rounding, f16 within its tolerance.
gensim's pre-2017 files without the magic number (``lee_fasttext.bin``,
``non_ascii_fasttext.bin``, ``cp852_fasttext.bin``, the last with cp852-encoded words) are
read too; the supervised ``pang_lee_polarity_fasttext.bin`` is refused.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import struct
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner
from gensim.models.fasttext import ft_ngram_hashes, load_facebook_vectors
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vecserve.cli import cli
from vecserve.errors import CorruptVectorFile, ModelDamaged, UnknownFormat, VectorFileError
from vecserve.keyedvectors import RedisKeyedVectors
from vecserve.loader import load_file
from vecserve.readers import detect_format, open_vectors
from vecserve.subwords import ngram_buckets, ngram_buckets_flat, word_hashes

from .helpers import gensim_data, wait_until

FILES = [
    "lee_fasttext_new.bin",
    "crime-and-punishment.bin",
    "toy-model.bin",
    "toy-model-pretrained.bin",
    "lee_fasttext.bin",  # pre-2017 layout, no magic number
    "non_ascii_fasttext.bin",  # pre-2017, Czech words
    "cp852_fasttext.bin",  # pre-2017, words in cp852
]
#: The words' encoding where it is not UTF-8 (as gensim's ``encoding=`` takes it).
ENCODING = {"cp852_fasttext.bin": "cp852"}
OOV = [
    "raskolnikovish",
    "steamtrain",
    "x",
    "",
    "é",
    "naïveté",
    "Раскольниковщина",
    "日本語テキスト",
    "don't",
    "rock'n'roll",
    "o'clock",
    "a" * 300,
    "ß" * 80 + "日本",
    "😀emoji",
    "<tag>",
]
TOL = {"f32": 1e-6, "f16": 2e-3}


def enc(name: str) -> dict:
    return {"encoding": ENCODING.get(name, "utf-8")}


@pytest.fixture(scope="module", params=FILES)
def model(request):
    return request.param, load_facebook_vectors(gensim_data(request.param), **enc(request.param))


def read_all(path, **kw):
    with open_vectors(path, **kw) as r:
        batches = list(r)
        ngrams = [rows for _, rows in r.subwords.batches(37)]
    tokens = [t for b in batches for t in b.tokens]
    return r, tokens, np.vstack([b.vectors for b in batches]), np.vstack(ngrams)


# -- hashing -------------------------------------------------------------------------------


@pytest.mark.parametrize("minn,maxn", [(3, 6), (1, 1), (1, 4), (2, 5), (5, 5), (0, 0), (4, 3)])
def test_ngram_buckets_match_gensim(minn, maxn):
    words = [*OOV, "hello", "héllo", "\u0301", "\U0010ffff", "a b", "\x00"]
    got = ngram_buckets(words, minn, maxn, 2_000_000)
    for word, ids in zip(words, got, strict=True):
        assert ids.tolist() == list(ft_ngram_hashes(word, minn, maxn, 2_000_000)), word


# -- the reader ----------------------------------------------------------------------------


def test_detect_and_read_match_gensim(model):
    name, kv = model
    path = gensim_data(name)
    assert detect_format(path) == "fasttext-bin"
    reader, tokens, vectors, ngrams = read_all(path, batch_size=13, **enc(name))
    assert tokens == kv.index_to_key
    assert np.array_equal(vectors, kv.vectors)  # bit-exact
    assert np.array_equal(ngrams, kv.vectors_ngrams)
    sub = reader.subwords
    assert (sub.min_n, sub.max_n, sub.bucket) == (kv.min_n, kv.max_n, kv.bucket)
    assert reader.dim == kv.vector_size and reader.count == len(kv)


def test_limit_and_resume_agree(model):
    name, kv = model
    path = gensim_data(name)
    with open_vectors(path, batch_size=5, **enc(name)) as r:
        first = next(iter(r))
    with open_vectors(
        path, batch_size=7, resume=first.resume, seen_tokens=first.tokens, **enc(name)
    ) as r:
        rest = [t for b in r for t in b.tokens]
    assert first.tokens + rest == kv.index_to_key
    with open_vectors(path, limit=3, **enc(name)) as r:
        assert [t for b in r for t in b.tokens] == kv.index_to_key[:3] and r.count == 3


def test_refused_models(tmp_path):
    with pytest.raises(UnknownFormat, match="supervised"):
        open_vectors(gensim_data("pang_lee_polarity_fasttext.bin"))
    raw = bytearray(Path(gensim_data("toy-model.bin")).read_bytes())
    layout_off = _matrix_offset(bytes(raw))
    raw[layout_off] = 1  # the quantized flag
    path = tmp_path / "q.bin"
    path.write_bytes(bytes(raw))
    with pytest.raises(UnknownFormat, match="quantized"):
        open_vectors(path)
    import gzip

    gz = tmp_path / "m.bin.gz"
    gz.write_bytes(gzip.compress(Path(gensim_data("toy-model.bin")).read_bytes()))
    with pytest.raises(VectorFileError, match="decompress it first"):
        open_vectors(gz)


def _matrix_offset(raw: bytes) -> int:
    size = struct.unpack_from("<i", raw, 64)[0]
    off = 92
    for _ in range(size):
        off = raw.index(b"\0", off) + 10
    return off


# -- corruption ----------------------------------------------------------------------------


def _damaged(raw: bytes):
    m = _matrix_offset(raw)
    for cut in (0, 3, 8, 40, 63, 70, 92, 95, 200, m - 3, m, m + 5, m + 17, m + 100, len(raw) - 1):
        yield f"truncated at {cut}", raw[:cut]
    yield "trailing bytes", raw + b"\0\0\0\0"
    # the header's fields: byte offset, a value it refuses, the field's name
    for off, value, what in [
        (4, 99, "version"),   (8, 0, "dim"),            (8, 1 << 20, "dim"),
        (36, 7, "model"),     (40, -1, "bucket"),       (40, 1 << 30, "bucket"),
        (44, 9, "minn"),      (64, 10**6, "size"),      (68, 3, "nwords"),
        (72, 2, "nlabels"),
    ]:  # fmt: skip
        bad = bytearray(raw)
        struct.pack_into("<i", bad, off, value)
        yield f"{what} = {value}", bytes(bad)
    for off, value, what in [(84, 5, "pruneidx"), (84, 1 << 40, "pruneidx"), (76, -9, "ntokens")]:
        bad = bytearray(raw)
        struct.pack_into("<q", bad, off, value)
        yield f"{what} = {value}", bytes(bad)
    for off, value, what in [(m + 1, 10**9, "rows"), (m + 9, 3, "cols"), (m, 7, "quant")]:
        bad = bytearray(raw)
        if what == "quant":
            bad[off] = value
        else:
            struct.pack_into("<q", bad, off, value)
        yield f"matrix {what}", bytes(bad)
    bad = bytearray(raw)
    bad[100:110] = b"\xff" * 10  # inside the dictionary: undecodable or a lost terminator
    yield "bytes flipped in the dictionary", bytes(bad)
    bad = bytearray(raw)
    bad[92 : m - 20] = bytes(len(bad[92 : m - 20]))  # zeros: empty words, wrong types
    yield "dictionary zeroed", bytes(bad)


@pytest.mark.parametrize("name", ["toy-model.bin", "crime-and-punishment.bin"])
def test_corrupt_files_name_file_and_position(tmp_path, name):
    raw = Path(gensim_data(name)).read_bytes()
    for what, data in _damaged(raw):
        path = tmp_path / "bad.bin"
        path.write_bytes(data)
        try:
            read_all(path, format="fasttext-bin")
        except CorruptVectorFile as exc:
            assert str(path) in str(exc) and exc.offset is not None, what
        except VectorFileError as exc:  # refused, e.g. "supervised", "not fastText"
            assert str(path) in str(exc), what
        else:
            pytest.fail(f"{what}: no error")


def test_old_layout_damage_is_named(tmp_path):
    """The pre-2017 layout's own offsets: header fields from byte 0, 56-byte header."""
    raw = Path(gensim_data("lee_fasttext.bin")).read_bytes()
    cuts = [(f"truncated at {c}", raw[:c]) for c in (20, 56, 60, 76, 500, len(raw) - 1)]
    fields = []
    for off, value, what in [
        (0, 1 << 20, "dim"),  (28, 7, "model"),     (32, -1, "bucket"),
        (36, 9, "minn"),      (56, 10**6, "size"),  (60, 3, "nwords"),
    ]:  # fmt: skip
        bad = bytearray(raw)
        struct.pack_into("<i", bad, off, value)
        fields.append((f"{what} = {value}", bytes(bad)))
    for what, data in [*cuts, *fields, ("trailing bytes", raw + b"\0\0\0\0")]:
        path = tmp_path / "bad.bin"
        path.write_bytes(data)
        with pytest.raises(VectorFileError) as exc:
            read_all(path, format="fasttext-bin")
        assert str(path) in str(exc.value), what
        if isinstance(exc.value, CorruptVectorFile):
            assert exc.value.offset is not None, what


def test_words_in_another_encoding(tmp_path, redis_url):
    """cp852 words: refused as UTF-8 with the word and its offset; loaded when named."""
    path = gensim_data("cp852_fasttext.bin")
    with pytest.raises(CorruptVectorFile, match=r"not valid utf-8.*--encoding") as exc:
        read_all(path)
    assert exc.value.offset is not None and exc.value.record is not None
    runner = CliRunner()
    res = runner.invoke(cli, ["load", path, "--key", "CP", "--redis-url", redis_url])
    assert res.exit_code != 0 and "--encoding" in res.output and "Traceback" not in res.output
    res = runner.invoke(
        cli, ["load", path, "--key", "CP", "--encoding", "cp852", "--redis-url", redis_url]
    )
    assert res.exit_code == 0, res.output
    kv = load_facebook_vectors(path, encoding="cp852")
    rkv = RedisKeyedVectors("CP", redis_url=redis_url)
    assert rkv.index_to_key == kv.index_to_key and "který" in rkv.index_to_key
    assert np.array_equal(rkv[kv.index_to_key], kv.vectors)
    np.testing.assert_allclose(rkv["kterýkoli"], kv["kterýkoli"], rtol=0, atol=1e-6)


# -- loading and RedisKeyedVectors ---------------------------------------------------------


@pytest.mark.parametrize("codec", ["f32", "f16"])
def test_load_and_lookup_match_gensim(store, model, codec):
    name, kv = model
    info = load_file(
        gensim_data(name), name="FT", store=store, codec=codec, progress=False, **enc(name)
    )
    assert (info.min_n, info.max_n, info.ngram_buckets) == (kv.min_n, kv.max_n, kv.bucket)
    assert info.count == len(kv) and info.source_format == "fasttext-bin"
    rkv = RedisKeyedVectors("FT", store=store)
    vocab = kv.index_to_key
    got = rkv[vocab]
    if codec == "f32":
        assert np.array_equal(got, kv.vectors)
        assert np.array_equal(rkv[vocab[0]], kv[vocab[0]])
    else:
        np.testing.assert_allclose(got, kv.vectors, atol=TOL[codec] * np.abs(kv.vectors).max())
    oov = [w for w in OOV if w not in kv.key_to_index]
    mixed = [vocab[1], *oov, vocab[-1]]
    want = np.vstack([kv[w] for w in mixed])
    scale = max(np.abs(want).max(), 1e-6)
    np.testing.assert_allclose(rkv[mixed], want, rtol=0, atol=TOL[codec] * scale)
    for w in oov[:3]:
        np.testing.assert_allclose(rkv[w], kv[w], rtol=0, atol=TOL[codec] * scale)
    # in / has_index_for as FastTextKeyedVectors
    assert all(w in rkv for w in mixed) and all(w in kv for w in mixed)
    assert [rkv.has_index_for(w) for w in mixed] == [kv.has_index_for(w) for w in mixed]
    assert rkv.built_from_subwords(mixed) == [False, *[True] * len(oov), False]
    assert rkv.has_index_for(0) and rkv.get_index(vocab[2]) == 2


def _recording(store, monkeypatch) -> list:
    """Every round trip the store's reads make: a one-GET round as ``("GET", key)``, any
    other as a record whose ``sent`` is its commands."""
    calls = []
    real = store.execute

    def execute(rnd):
        if len(rnd.commands) == 1 and rnd.commands[0][0] == "GET":
            calls.append(("GET", rnd.commands[0][1]))
        else:
            calls.append(SimpleNamespace(sent=rnd.commands))
        return real(rnd)

    monkeypatch.setattr(store, "execute", execute)
    return calls


def test_one_round_trip_for_words_and_ngrams(store, monkeypatch):
    """A batch is one round trip; the first batch of a generation also reads its
    vocabulary hashes, once."""
    load_file(gensim_data("toy-model.bin"), name="FT", store=store, progress=False)
    rkv = RedisKeyedVectors("FT", store=store)
    rkv.info  # noqa: B018  (the registry entry, read once)
    calls = _recording(store, monkeypatch)
    rkv[["the", "raskolnikovish", "unseenword", "日本"]]
    assert [c for c in calls if isinstance(c, tuple)] == [("GET", "vecserve:vocabh:FT")]
    assert len(calls) == 2
    calls.clear()
    rkv[["of", "dostoevskyish", "新しい"]]
    assert len(calls) == 1


def _words_sent(pipe) -> list[bytes]:
    """The keys of the pipeline's MGET (none if it ran something else)."""
    cmd = pipe.sent[0]
    return list(cmd[1:]) if cmd[0] == "MGET" else []


def test_vocabulary_hashes_fetch_only_missing_words_ngrams(store, monkeypatch):
    """The load keeps the sorted 64-bit hashes of the vocabulary; a batch hashes and
    fetches the n-grams of the missing words only, in one MGET (no script), with
    gensim's vectors."""
    path = gensim_data("crime-and-punishment.bin")
    info = load_file(path, name="FT", store=store, progress=False)
    kv = load_facebook_vectors(path)
    stored = np.frombuffer(store.client.get("vecserve:vocabh:FT"), "<u8")
    want = np.unique(word_hashes([w.encode() for w in kv.index_to_key]))
    assert np.array_equal(stored, want) and np.all(stored[1:] > stored[:-1])
    words = ["the", "raskolnikovish", "of", "日本語", "sonya"]
    calls = _recording(store, monkeypatch)
    _, rows, in_vocab = store.read_rows_subwords(info, words)
    pipes = [c for c in calls if not isinstance(c, tuple)]
    assert len(pipes) == 1
    sent = _words_sent(pipes[0])
    oov = [w for w in words if w not in kv.key_to_index]
    need = np.unique(np.concatenate(ngram_buckets(oov, info.min_n, info.max_n, info.ngram_buckets)))
    assert len(sent) == len(words) + len(need)  # the missing words' n-grams, nothing else
    assert in_vocab.tolist() == [w in kv.key_to_index for w in words]
    np.testing.assert_allclose(rows, np.vstack([kv[w] for w in words]), rtol=0, atol=1e-6)


def test_a_word_the_hashes_call_present_but_missing_is_damage(store):
    """A word the vocabulary's hashes hold whose row is missing is never given an n-gram
    vector: it is ModelDamaged (not a KeyError). A forced hash collision (an unknown word
    whose hash is in the vocabulary's, ~1e-13 a word) reads the same way."""
    path = gensim_data("crime-and-punishment.bin")
    info = load_file(path, name="FT", store=store, progress=False)
    known = store.vocab_hashes(info)
    fake = word_hashes([b"raskolnikovish"])
    store._vocab_hashes[info.prefix, info.generation] = np.unique(np.concatenate((known, fake)))
    with pytest.raises(ModelDamaged, match=r"'FT' \(generation 1\).*1 of the 3") as err:
        store.read_rows_subwords(info, ["raskolnikovish", "the", "dostoevskyish"])
    assert not isinstance(err.value, KeyError) and err.value.words == ["raskolnikovish"]
    store.client.delete(*store.vector_keys(info.prefix, ["the"]))
    with pytest.raises(ModelDamaged, match="'the'"):
        store.read_rows_subwords(info, ["the", "dostoevskyish"])


def test_vocabulary_hashes_follow_a_reused_prefix(store, monkeypatch):
    """A reader keeps each generation's hashes, not each key prefix's: the third load of
    a name takes the first one's prefix back, with another vocabulary, and a reader that
    served the first reads the third's hashes (one MGET, only the missing words' n-grams,
    no second round trip for words the first vocabulary had)."""
    first = load_file(
        gensim_data("crime-and-punishment.bin"), name="FT", store=store, progress=False
    )
    rkv = RedisKeyedVectors("FT", store=store)
    rkv[["the", "raskolnikovish"]]
    path = gensim_data("lee_fasttext_new.bin")
    load_file(path, name="FT", store=store, progress=False)
    third = load_file(path, name="FT", store=store, progress=False)
    assert third.prefix == first.prefix and third.generation != first.generation
    kv = load_facebook_vectors(path)
    old = set(load_facebook_vectors(gensim_data("crime-and-punishment.bin")).index_to_key)
    gone = next(w for w in sorted(old) if w not in kv.key_to_index)
    new = next(w for w in kv.index_to_key if w not in old)
    words = [gone, new, "raskolnikovish"]
    calls = _recording(store, monkeypatch)
    _, rows, in_vocab = store.read_rows_subwords(third, words)
    assert [c for c in calls if isinstance(c, tuple)] == [
        ("GET", f"vecserve:vocabh:{third.prefix}")
    ]
    pipes = [c for c in calls if not isinstance(c, tuple)]
    assert len(pipes) == 1
    oov = [gone, "raskolnikovish"]
    need = np.unique(np.concatenate(ngram_buckets(oov, third.min_n, third.max_n, kv.bucket)))
    assert len(_words_sent(pipes[0])) == len(words) + len(need)
    assert in_vocab.tolist() == [False, True, False]
    np.testing.assert_allclose(rows, np.vstack([kv[w] for w in words]), rtol=0, atol=1e-6)


def test_a_reader_keeps_the_hashes_of_eight_generations_at_most(store):
    """8 bytes a word per generation kept: a reader that saw many generations (of many
    models, or reloads) keeps the latest eight."""
    import dataclasses

    info = load_file(gensim_data("toy-model.bin"), name="FT", store=store, progress=False)
    for g in range(12):
        store.vocab_hashes(dataclasses.replace(info, generation=info.generation + g))
    assert sorted(g for _, g in store._vocab_hashes) == [info.generation + g for g in range(4, 12)]
    assert store.vocab_hashes(info) is not None  # read again: it had gone


def test_least_privilege_roles_write_and_read_the_hashes(tmp_path):
    """A loader limited to its model writes the vocabulary hashes with each generation (a
    reload's ``FT~N`` prefix too; the old generation's go with it), and an API user
    limited to that model reads them: gensim's vectors with read rights only."""
    import redis

    from vecserve.acl import setuser_line
    from vecserve.embedded import ValkeyProcess

    sock = tmp_path / "valkey.sock"
    with ValkeyProcess(tmp_path, unixsocket=sock):
        admin = redis.Redis(unix_socket_path=str(sock))
        for line in (
            setuser_line("loader", user="l", password="lpw", model="FT"),
            setuser_line("api", user="a", password="apw", model="FT"),
        ):
            admin.execute_command(*line.split())
        path = gensim_data("crime-and-punishment.bin")
        loader = f"unix://l:lpw@{sock}"
        load_file(path, name="FT", redis_url=loader, progress=False)
        info = load_file(path, name="FT", redis_url=loader, progress=False)
        assert info.prefix != "FT" and admin.exists(f"vecserve:vocabh:{info.prefix}")
        assert not admin.exists("vecserve:vocabh:FT")
        kv = load_facebook_vectors(path)
        rkv = RedisKeyedVectors("FT", redis_url=f"unix://a:apw@{sock}")
        try:
            words = ["the", "raskolnikovish", "日本語"]
            want = np.vstack([kv[w] for w in words])
            np.testing.assert_allclose(rkv[words], want, rtol=0, atol=1e-6)
            assert rkv._get_store().vocab_hashes(rkv.info) is not None
        finally:
            rkv.close()
            admin.close()


def test_buckets_are_read_only_for_missing_words(store):
    """Generations without vocabulary hashes (loaded before they existed): one script
    reads every word and only the missing words' buckets; the MGET fallback (servers
    without EVAL_RO) reads them all; all three ways give the same vectors."""
    info = load_file(
        gensim_data("crime-and-punishment.bin"), name="FT", store=store, progress=False
    )
    words = ["the", "raskolnikovish", "of", "日本語"]
    _, via_hashes, _ = store.read_rows_subwords(info, words)
    store.client.delete("vecserve:vocabh:FT")  # as a model loaded by an older vecserve
    info = dataclasses.replace(info, word_hashes=False)  # (whose entry says so)
    store.client.hset("vecserve:models", "FT", info.to_json())
    store._vocab_hashes.clear()
    flat, bounds = ngram_buckets_flat(words, info.min_n, info.max_n, info.ngram_buckets)
    uniq, inverse = np.unique(flat, return_inverse=True)
    local = np.split(inverse, bounds[1:-1])
    _, rows, found = store.read_rows(info, words, ngrams=uniq, needs=(inverse, bounds))
    assert found[:4].tolist() == [True, False, True, False]
    missing = np.zeros(len(uniq), bool)
    missing[np.concatenate([local[1], local[3]])] = True
    assert np.array_equal(found[4:], missing)  # the in-vocabulary words' buckets: not read
    assert store.subword_script
    _, via_script, _ = store.read_rows_subwords(info, words)
    store.subword_script = False
    _, all_rows, all_found = store.read_rows(info, words, ngrams=uniq, needs=(inverse, bounds))
    assert all_found[4:].all()
    _, via_mget, _ = store.read_rows_subwords(info, words)
    assert np.array_equal(via_script, via_mget) and np.array_equal(via_hashes, via_mget)
    assert np.array_equal(all_rows[4:][missing], rows[4:][missing])


def test_most_similar_of_an_oov_word(store, model):
    name, kv = model
    if not np.linalg.norm(kv.vectors, axis=1).all():
        pytest.skip(f"{name} has zero vectors: gensim's most_similar divides by 0")
    load_file(gensim_data(name), name="FT", store=store, progress=False, **enc(name))
    rkv = RedisKeyedVectors("FT", store=store, cache_dir=None)
    for query in ["raskolnikovish", ["steamtrain", kv.index_to_key[0]]]:
        want = kv.most_similar(query, topn=5)
        got = rkv.most_similar(query, topn=5)
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want], atol=1e-5)
        # the same words, up to the order of near-ties (2-dimensional models have many)
        score = dict(kv.most_similar(query, topn=len(kv)))
        np.testing.assert_allclose([score[k] for k, _ in got], [s for _, s in got], atol=1e-5)
        if kv.vector_size > 2:
            assert [k for k, _ in got] == [k for k, _ in want]
    np.testing.assert_allclose(
        rkv.similarity("raskolnikovish", kv.index_to_key[0]),
        kv.similarity("raskolnikovish", kv.index_to_key[0]),
        atol=1e-5,
    )


def test_corrupt_load_leaves_nothing(store, tmp_path):
    raw = Path(gensim_data("toy-model.bin")).read_bytes()
    path = tmp_path / "cut.bin"
    path.write_bytes(raw[:-7])
    with pytest.raises(CorruptVectorFile) as exc:
        load_file(path, name="FT", store=store, progress=False)
    assert str(path) in str(exc.value)
    assert store.list_models() == [] and store.list_loads() == []
    assert store.client.keys("FT*") == []


def test_reload_and_delete_remove_ngram_keys(store):
    path = gensim_data("toy-model.bin")
    load_file(path, name="FT", store=store, progress=False)
    first = store.client.keys("FT#*")
    assert len(first) == 100
    info = load_file(path, name="FT", store=store, progress=False, codec="f16")
    assert info.prefix != "FT" and len(store.client.keys(f"{info.prefix}#*")) == 100
    assert store.client.keys("FT#*") == []  # the old generation's n-grams are gone
    store.delete_model("FT")
    assert store.client.keys("*FT*") == []


def test_cli_load_and_models_info(store, redis_url):
    runner = CliRunner()
    res = runner.invoke(
        cli,
        ["load", gensim_data("toy-model.bin"), "--key", "FT", "--redis-url", redis_url],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, ["models", "info", "FT", "--redis-url", redis_url])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output[res.output.index("{") :])
    assert (data["min_n"], data["max_n"], data["ngram_buckets"]) == (3, 6, 100)


@pytest.mark.parametrize("phase", ["write_encoded", "write_ngrams"])
def test_interrupted_load_resumes(store, monkeypatch, phase):
    from vecserve.store import LoadSession

    path = gensim_data("crime-and-punishment.bin")
    kv = load_facebook_vectors(path)
    real = getattr(LoadSession, phase)
    calls = {"n": 0}

    def flaky(self, *a, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(self, *a, **kw)

    monkeypatch.setattr(LoadSession, phase, flaky)
    with pytest.raises(KeyboardInterrupt):
        load_file(path, name="FT", store=store, batch_size=40, progress=False)
    monkeypatch.setattr(LoadSession, phase, real)
    assert store.list_models() == [] and len(store.list_loads()) == 1
    info = load_file(path, name="FT", store=store, batch_size=40, resume=True, progress=False)
    assert info.count == len(kv) and info.ngram_buckets == kv.bucket
    rkv = RedisKeyedVectors("FT", store=store)
    assert rkv.index_to_key == kv.index_to_key
    assert np.array_equal(rkv[kv.index_to_key], kv.vectors)
    np.testing.assert_allclose(rkv["raskolnikovish"], kv["raskolnikovish"], atol=1e-6)
    store.delete_model("FT")
    assert store.client.keys("*FT*") == []


def test_cluster_load_and_oov(cluster_store, monkeypatch):
    """On a cluster too the vocabulary hashes (one key, read once) keep a batch to its
    words and the missing words' n-grams: one pipeline of MGETs, one per hash tag."""
    path = gensim_data("toy-model.bin")
    kv = load_facebook_vectors(path)
    info = load_file(path, name="FTC", store=cluster_store, progress=False)
    assert info.buckets and info.ngram_buckets == kv.bucket
    assert cluster_store.vocab_hashes(info) is not None
    rkv = RedisKeyedVectors("FTC", store=cluster_store)
    words = [*kv.index_to_key, "raskolnikovish", "日本語"]
    want = np.vstack([kv[w] for w in words])
    calls = _recording(cluster_store, monkeypatch)
    np.testing.assert_allclose(rkv[words], want, rtol=0, atol=1e-6)
    need = np.unique(np.concatenate(ngram_buckets(words[-2:], info.min_n, info.max_n, kv.bucket)))
    mgets = [c for p in calls if not isinstance(p, tuple) for c in p.sent if c[0] == "MGET"]
    assert sum(len(c) - 1 for c in mgets) == len(words) + len(need)
    monkeypatch.undo()
    assert np.array_equal(rkv[kv.index_to_key], kv.vectors)
    cluster_store.delete_model("FTC")


# -- gensim's own FastText models, and models without n-grams -----------------------------


@pytest.fixture(scope="module")
def gensim_ft(tmp_path_factory):
    """A small gensim FastText model, saved as a whole model and as its KeyedVectors."""
    from gensim.models import FastText
    from gensim.test.utils import common_texts

    d = tmp_path_factory.mktemp("ft")
    texts = [[*t, "naïveté", "日本語"] for t in common_texts] * 3
    model = FastText(texts, vector_size=12, min_count=1, epochs=3, bucket=257, seed=3, workers=1)
    model.save(str(d / "whole.model"))  # small arrays: one pickle
    model.wv.save(str(d / "vectors.kv"), sep_limit=0)  # every array in a .npy side file
    return model.wv, d


@pytest.mark.parametrize("saved", ["whole.model", "vectors.kv"])
def test_gensim_saved_fasttext_keeps_its_subwords(store, gensim_ft, saved):
    kv, d = gensim_ft
    path = d / saved
    if saved == "vectors.kv":
        assert Path(f"{path}.vectors_ngrams.npy").exists()
    info = load_file(path, name="GFT", store=store, progress=False)
    assert info.source_format == "gensim"
    assert (info.min_n, info.max_n, info.ngram_buckets) == (kv.min_n, kv.max_n, kv.bucket)
    rkv = RedisKeyedVectors("GFT", store=store, cache_dir=None)
    assert rkv.index_to_key == kv.index_to_key
    assert np.array_equal(rkv[kv.index_to_key], kv.vectors)
    oov = [w for w in OOV if w not in kv.key_to_index]
    np.testing.assert_allclose(rkv[oov], np.vstack([kv[w] for w in oov]), rtol=0, atol=1e-6)
    assert rkv.built_from_subwords(["human", "raskolnikovish"]) == [False, True]
    got, want = (
        rkv.most_similar("raskolnikovish", topn=3),
        kv.most_similar("raskolnikovish", topn=3),
    )
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], atol=1e-5)


def test_models_without_ngrams_refuse_unknown_words(store, tmp_path):
    """max_n < min_n (gensim) / maxn 0 (fastText): no buckets, unknown words are KeyErrors."""
    from gensim.models import FastText
    from gensim.models.fasttext import save_facebook_model
    from gensim.test.utils import common_texts

    model = FastText(common_texts, vector_size=8, min_count=1, epochs=2, min_n=3, max_n=0)
    path = tmp_path / "no-ngrams.bin"
    save_facebook_model(model, str(path))
    kv = load_facebook_vectors(str(path))
    with pytest.raises(KeyError):
        kv["raskolnikovish"]  # gensim's behaviour, the reference
    model.save(str(tmp_path / "no-ngrams.model"))
    for source in (path, tmp_path / "no-ngrams.model"):
        info = load_file(source, name="NN", store=store, progress=False)
        assert info.ngram_buckets == 0
        rkv = RedisKeyedVectors("NN", store=store, cache_dir=None)
        assert np.array_equal(rkv[kv.index_to_key], kv.vectors)
        with pytest.raises(KeyError, match="raskolnikovish"):
            rkv["raskolnikovish"]
        assert "raskolnikovish" not in rkv and not rkv.has_index_for("raskolnikovish")
        assert store.client.keys("NN#*") == [] and store.client.keys("*#*") == []


# -- the HTTP service ----------------------------------------------------------------------


@pytest.fixture
def ft_client(redis_url, store, tmp_path):
    from vecserve.api import create_app
    from vecserve.service.settings import Settings

    from .api_support import AppClient

    load_file(gensim_data("crime-and-punishment.bin"), name="FT", store=store, progress=False)
    settings = Settings(
        redis_url=redis_url, default_model="FT", cache_dir=tmp_path / "cache", model_ttl=0
    )
    with AppClient(create_app(settings)) as client:
        yield client


def test_service_answers_oov_words(ft_client):
    kv = load_facebook_vectors(gensim_data("crime-and-punishment.bin"))
    known = kv.index_to_key[5]
    words = [known, "raskolnikovish", "日本語"]
    resp = ft_client.post("/vectors", json={"words": words})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["missing"] == [] and body["subwords"] == ["raskolnikovish", "日本語"]
    np.testing.assert_allclose(body["vectors"], [kv[w] for w in words], atol=1e-6)
    resp = ft_client.get("/similarity", params={"w1": known, "w2": "raskolnikovish"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["subwords"] == ["raskolnikovish"]
    assert abs(resp.json()["similarity"] - kv.similarity(known, "raskolnikovish")) < 1e-5
    resp = ft_client.get("/most_similar", params={"positive": "raskolnikovish", "topn": 5})
    assert resp.status_code == 200, resp.text
    got = resp.json()
    assert got["subwords"] == ["raskolnikovish"]
    want = kv.most_similar("raskolnikovish", topn=5)
    assert [k for k, _ in got["results"]] == [k for k, _ in want]


def test_cli_get_oov_word(store, redis_url):
    load_file(gensim_data("toy-model.bin"), name="FT", store=store, progress=False)
    known = load_facebook_vectors(gensim_data("toy-model.bin")).index_to_key[0]
    res = CliRunner().invoke(
        cli, ["get", known, "raskolnikovish", "--key", "FT", "--redis-url", redis_url]
    )
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert "from subwords" not in lines[0] and lines[1].endswith("(5 dims, from subwords)")


_FUZZ_SOURCE = Path(gensim_data("toy-model.bin")).read_bytes()


@st.composite
def mutated_bin(draw):
    data = bytearray(_FUZZ_SOURCE)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["truncate", "flip", "insert", "delete", "lie"]))
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        if op == "truncate":
            del data[i:]
        elif op == "flip":
            data[i] ^= draw(st.integers(1, 255))
        elif op == "insert":
            data[i:i] = draw(st.sampled_from([b"\x00", b"\xff", b"a", b"\x00" * 9]))
        elif op == "delete":
            del data[i]
        elif len(data) >= 92:  # a lying int32 in the header or the dictionary's header
            field = draw(st.sampled_from([4, 8, 36, 40, 44, 48, 64, 68, 72]))
            value = draw(st.sampled_from([-1, 0, 1, 2, 7, 1 << 20, 2**31 - 1]))
            struct.pack_into("<i", data, field, value)
    return bytes(data)


@settings(
    max_examples=int(os.environ.get("VECSERVE_FUZZ_EXAMPLES", "200")),
    derandomize=os.environ.get("VECSERVE_FUZZ_EXAMPLES") is None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(mutated_bin())
def test_fuzzed_bin_reads_or_names_the_problem(tmp_path, data):
    path = tmp_path / "fuzz.bin"
    path.write_bytes(data)
    try:
        reader, tokens, vectors, ngrams = read_all(path, batch_size=3)
        assert vectors.shape == (len(tokens), reader.dim) and vectors.dtype == np.float32
        assert ngrams.shape == (reader.subwords.bucket, reader.dim)
    except VectorFileError as exc:
        assert str(path) in str(exc)
        if isinstance(exc, CorruptVectorFile):
            assert exc.offset is not None


def test_client_cache_keeps_in_and_has_index_for_apart(store):
    path = gensim_data("crime-and-punishment.bin")
    kv = load_facebook_vectors(path)
    load_file(path, name="FT", store=store, progress=False)
    with RedisKeyedVectors("FT", store=store, cache=True) as rkv:
        known = kv.index_to_key[3]
        for _ in range(2):  # the second time from the cache
            np.testing.assert_allclose(rkv["raskolnikovish"], kv["raskolnikovish"], atol=1e-6)
            assert np.array_equal(rkv[known], kv[known])
            assert not rkv.has_index_for("raskolnikovish") and rkv.has_index_for(known)
            assert "raskolnikovish" in rkv
        with pytest.raises(KeyError):
            rkv.get_index("raskolnikovish")


def _service(redis_url, tmp_path, **kw):
    from vecserve.api import create_app
    from vecserve.service.settings import Settings

    from .api_support import AppClient

    settings = Settings(redis_url=redis_url, default_model="FT", cache_dir=tmp_path / "c", **kw)
    return AppClient(create_app(settings))


def test_service_vectors_of_oov_words_in_one_round_trip(redis_url, store, tmp_path, monkeypatch):
    """GET /vectors with missing words costs what a batch of known words costs: one
    round trip (the n-grams travel in the words' MGET)."""
    from vecserve.store.syncwire import Connections

    load_file(gensim_data("crime-and-punishment.bin"), name="FT", store=store, progress=False)
    kv = load_facebook_vectors(gensim_data("crime-and-punishment.bin"))
    trips = []
    real_execute = Connections.execute

    def counted(self, rnd):
        trips.append(rnd)
        return real_execute(self, rnd)

    monkeypatch.setattr(Connections, "execute", counted)
    with _service(redis_url, tmp_path, vector_cache=0) as client:
        client.get("/vectors", params={"words": "the"})  # the registry, the hashes: once
        for words in (["of", "and"], ["of", "raskolnikovish", "日本語"]):
            trips.clear()
            body = client.get("/vectors", params={"words": ",".join(words)}).json()
            assert len(trips) == 1, words
            assert body["subwords"] == [w for w in words if w not in kv.key_to_index]
            np.testing.assert_allclose(body["vectors"], [kv[w] for w in words], atol=1e-6)


def test_service_caches_built_vectors_and_still_names_them(redis_url, store, tmp_path):
    """Built vectors are cached like stored ones (a generation never changes); a cached
    word is still named in ``subwords`` when its vector was built."""
    load_file(gensim_data("crime-and-punishment.bin"), name="FT", store=store, progress=False)
    kv = load_facebook_vectors(gensim_data("crime-and-punishment.bin"))
    with _service(redis_url, tmp_path, vector_cache=1000) as client:
        first = client.get("/vectors", params={"words": "of,raskolnikovish"}).json()
        wait_until(  # the cache's tracking connection is up
            lambda: (client.get("/models/FT").json()["vector_cache"] or {}).get("ready"),
            timeout=5,
            interval=0.01,
            what="the vector cache",
        )
        for _ in range(2):  # a word is admitted on its second miss
            client.get("/vectors", params={"words": "of,raskolnikovish"})
        before = client.get("/metrics").text
        again = client.get("/vectors", params={"words": "raskolnikovish,of,sonyaish"}).json()
        after = client.get("/metrics").text
    assert first["subwords"] == ["raskolnikovish"]
    assert again["subwords"] == ["raskolnikovish", "sonyaish"]
    want = [kv[w] for w in ["raskolnikovish", "of", "sonyaish"]]
    np.testing.assert_allclose(again["vectors"], want, atol=1e-6)

    def hits(text):
        return float(re.search(r'vecserve_cache_hits_total\{cache="vectors"\} (\S+)', text)[1])

    assert hits(after) - hits(before) == 2  # "of" and the built "raskolnikovish"
