"""The snapshot's shared vocabulary (vocab.idx): lookups, duplicates, damage, old format,
several processes mapping one file."""

from __future__ import annotations

import json
import logging
import os
import subprocess

import numpy as np
import pytest

from tests.helpers import program
from vecserve.errors import SnapshotDamaged
from vecserve.loader import load_arrays
from vecserve.search.snapshot import SimilarityIndex
from vecserve.search.vocab import WORDS_VECTORISED_FROM, SharedVocab, encode, write

# Non-ASCII words of 1 to 4 UTF-8 bytes a character, a lone surrogate (an undecodable
# byte kept by surrogateescape), words that are prefixes of each other, the empty word.
WORDS = [
    "king",
    "queen",
    "Köln",
    "straße",
    "日本語",
    "日本",
    "😀smile",
    "naïve",
    "naive",
    "\udcffbyte",
    "",
    "a b",
    *[f"w{i}é" for i in range(500)],
]


def test_lookups_equal_a_dict():
    vocab = SharedVocab.from_words(WORDS)
    want = {w: i for i, w in enumerate(WORDS)}
    assert len(vocab) == len(WORDS) and list(vocab) == WORDS and vocab == WORDS
    assert [vocab[i] for i in range(len(WORDS))] == WORDS
    assert vocab[np.int64(2)] == "Köln" and vocab[-1] == WORDS[-1] and vocab[3:6] == WORDS[3:6]
    for w, i in want.items():
        assert vocab.get(w) == i and vocab.key_to_index[w] == i and w in vocab
    for missing in ["kin", "kings", "KING", "日", "naïve ", "w500é", "\udcfe", 3, None, b"king"]:
        assert vocab.get(missing) is None and missing not in vocab.key_to_index
        assert vocab.key_to_index.get(missing, -1) == -1
    with pytest.raises(KeyError):
        vocab.key_to_index["nope"]
    with pytest.raises(IndexError):
        vocab[len(WORDS)]
    assert dict(vocab.key_to_index.items()) == want


@pytest.mark.parametrize("size", [0, 1, 5, WORDS_VECTORISED_FROM - 1, WORDS_VECTORISED_FROM, 700])
def test_words_of_rows_equal_a_list(size):
    # both of words()'s ways (a Python loop for a few rows, NumPy for many): any order,
    # repeated rows, every kind of word, any int type; out-of-range rows refused
    vocab = SharedVocab.from_words(WORDS)
    rows = np.random.default_rng(size).integers(0, len(WORDS), size)
    rows[: size // 2] = rows[0] if size else 0  # the same row many times
    want = [WORDS[r] for r in rows.tolist()]
    for given in (rows, rows.astype(np.int32), rows.tolist(), rows.reshape(-1, 1)):
        assert vocab.words(given) == want
    for bad in (-1, len(WORDS)):
        for given in (np.append(rows, bad), [*rows.tolist(), bad]):
            with pytest.raises(IndexError, match="vocabulary index out of range"):
                vocab.words(given)


def test_lookups_in_a_batch_with_repeats_and_misses():
    vocab = SharedVocab.from_words(WORDS)
    batch = ["Köln", "nope", "Köln", "", "\udcffbyte", "日本", "nope", "w499é"] * 3
    got = [vocab.key_to_index.get(w, -1) for w in batch]
    assert got == [WORDS.index(w) if w in WORDS else -1 for w in batch]
    assert all(type(row) is int for row in got)  # as a dict's values: no NumPy scalars
    assert vocab.key_to_index.get("nope") is None and vocab.key_to_index.get(None) is None


def test_lookups_on_a_big_endian_machine(monkeypatch):
    # there the lookups read native copies of the little-endian offsets and table
    import vecserve.search.vocab as module

    monkeypatch.setattr(module, "sys", type("sys", (), {"byteorder": "big"}))
    vocab = SharedVocab.from_words(WORDS)
    assert [vocab.get(w) for w in WORDS] == list(range(len(WORDS)))
    assert all(type(vocab.get(w)) is int for w in WORDS[:3]) and vocab.get("nope") is None
    assert list(vocab) == WORDS and vocab.words(range(len(WORDS))) == WORDS


def test_snapshot_queries_match_a_dict_backed_gensim_model(tmp_path):
    from gensim.models import KeyedVectors

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((len(WORDS), 16)).astype(np.float32)
    ix = SimilarityIndex.from_arrays(WORDS, vectors)
    kv = KeyedVectors(16)
    kv.add_vectors(WORDS, vectors)
    for q in ["Köln", ["日本語", "😀smile"], "\udcffbyte", ""]:
        assert ix.most_similar(q, topn=7) == kv.most_similar(q, topn=7)
    assert ix.most_similar_cosmul(["naïve"], ["naive"]) == kv.most_similar_cosmul(
        ["naïve"], ["naive"]
    )
    assert ix.get_index(4) == 4 and ix.get_index("日本") == 5 and "straße" in ix
    assert ix.as_keyedvectors(limit=5).index_to_key == WORDS[:5]


def test_duplicates_are_impossible():
    with pytest.raises(ValueError, match=r"^duplicate word 'Köln' at rows 2 and 4$"):
        encode(["a", "b", "Köln", "c", "Köln"])
    # every row is in the table exactly once
    vocab = SharedVocab.from_words(WORDS)
    rows = np.sort(vocab._table[vocab._table >= 0])
    assert np.array_equal(rows, np.arange(len(WORDS)))


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b[: len(b) - 3], "truncated"),
        (lambda b: b"XXXXXXXX" + b[8:], "not a vecserve vocabulary"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 0x55]), "not found where the table says"),
        (lambda b: b"", "empty"),
    ],
)
def test_damaged_file_refused_in_one_line(tmp_path, damage, message):
    path = tmp_path / "vocab.idx"
    write(path, WORDS)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ValueError, match=message) as err:
        SharedVocab.open(path)
    assert "\n" not in str(err.value) and str(err.value).startswith(str(path))


def test_damaged_table_refused(tmp_path):
    path = tmp_path / "vocab.idx"
    write(path, WORDS)
    vocab = SharedVocab.open(path)
    data = bytearray(path.read_bytes())
    table_at = data.find(vocab._table.tobytes())
    used = int(np.flatnonzero(vocab._table >= 0)[0])
    data[table_at + 4 * used : table_at + 4 * used + 4] = (-1).to_bytes(4, "little", signed=True)
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="hash table holds"):
        SharedVocab.open(path)


def replace(path, data: bytes) -> None:
    """Damage a mapped file the way a crash would leave a new one: never truncate a file
    that this process maps (its pages would fault), write a new inode in its place."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@pytest.fixture
def snapshot(store, tmp_path):
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((len(WORDS), 8)).astype(np.float32)
    info = load_arrays(WORDS, vectors, name="VOCAB", store=store)
    ix = SimilarityIndex.build(store, info, cache_dir=tmp_path, chunk=100)
    return store, info, tmp_path, ix


def test_snapshot_vocabulary_is_mapped(snapshot):
    _, _, _, ix = snapshot
    assert isinstance(ix.index_to_key, SharedVocab) and ix.index_to_key == WORDS
    assert not isinstance(ix.key_to_index, dict) and ix.key_to_index["Köln"] == 2
    if os.path.exists("/proc/self/maps"):  # vocabulary, vectors and norms all mapped
        with open("/proc/self/maps") as f:
            maps = f.read()
        for name in ("vocab.idx", "vectors.npy", "norms.npy"):
            assert str(ix.path / name) in maps


def test_damaged_vocabulary_rewritten_from_redis(snapshot, caplog):
    store, info, cache, ix = snapshot
    vocab = ix.path / "vocab.idx"
    vectors_mtime = os.stat(ix.path / "vectors.npy").st_mtime_ns
    replace(vocab, vocab.read_bytes()[:100])
    with pytest.raises(SnapshotDamaged) as damaged:  # typed: which file, which part
        SimilarityIndex.open(ix.path)
    assert (damaged.value.path, damaged.value.part) == (str(vocab), "vocabulary")
    with caplog.at_level(logging.WARNING, logger="vecserve.search.snapshot"):
        again = SimilarityIndex.build(store, info, cache_dir=cache)
    [record] = [r for r in caplog.records if "damaged vocabulary file" in r.getMessage()]
    assert "\n" not in record.getMessage() and record.getMessage().endswith("rebuilding it")
    assert again.index_to_key == WORDS and again.most_similar("Köln") == ix.most_similar("Köln")
    # only the vocabulary was rewritten: the vectors were kept
    assert os.stat(again.path / "vectors.npy").st_mtime_ns == vectors_mtime


def test_damaged_vectors_rebuild_the_snapshot(snapshot, caplog):
    store, info, cache, ix = snapshot
    vec = ix.path / "vectors.npy"
    want = ix.most_similar("日本語")
    replace(vec, vec.read_bytes()[:200])
    with pytest.raises(SnapshotDamaged) as damaged:
        SimilarityIndex.open(ix.path)
    assert (damaged.value.path, damaged.value.part) == (str(vec), "arrays")
    with caplog.at_level(logging.WARNING, logger="vecserve.search.snapshot"):
        again = SimilarityIndex.build(store, info, cache_dir=cache)
    assert any("vectors.npy: damaged snapshot file" in r.getMessage() for r in caplog.records)
    assert again.most_similar("日本語") == want


def test_missing_vocabulary_rewritten_from_redis(snapshot):
    # a snapshot dir without vocab.idx (an unknown format's, say) is refused, then repaired
    store, info, cache, ix = snapshot
    (ix.path / "vocab.idx").unlink()
    vectors_mtime = os.stat(ix.path / "vectors.npy").st_mtime_ns
    with pytest.raises(SnapshotDamaged, match=r"vocab\.idx: damaged snapshot.*no vocabulary file"):
        SimilarityIndex.open(ix.path)
    again = SimilarityIndex.build(store, info, cache_dir=cache)
    assert again.index_to_key == WORDS and (again.path / "vocab.idx").exists()
    assert os.stat(again.path / "vectors.npy").st_mtime_ns == vectors_mtime


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs /proc smaps")
def test_two_processes_map_one_file(snapshot):
    _, _, _, ix = snapshot
    probe = [*WORDS[:20], "absent", "日本語 "]
    want = [ix.key_to_index.get(w) for w in probe]
    children = [
        subprocess.Popen(
            program("snapshot_reader", ix.path, json.dumps(probe)),
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for child in children:
        with child:
            out, _ = child.communicate(timeout=60)
        assert child.returncode == 0
        got = json.loads(out)
        assert got["lookups"] == want
        assert [tuple(x) for x in got["answer"]] == ix.most_similar("Köln", topn=5)
        # the file is mapped (pages resident) and none of it is private to the child
        assert got["mapped"]["Rss:"] > 0 and got["mapped"]["Private_Dirty:"] == 0
