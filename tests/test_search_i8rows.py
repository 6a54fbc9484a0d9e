"""The int8 rows of exact batches as a snapshot's file (vecserve/search/i8rows.py): packed
once by one process, mapped by the others, checked on open, a new generation's its own."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
from gensim.models import KeyedVectors

from tests.helpers import program
from vecserve.errors import SnapshotDamaged
from vecserve.loader import load_arrays
from vecserve.search import i8rows
from vecserve.search.exact import BATCH_FROM_ROWS
from vecserve.search.snapshot import IndexManager, SimilarityIndex
from vecserve.search.vocab import write as write_vocab

N, DIM = BATCH_FROM_ROWS + 4_000, 32


def vectors(seed: int) -> np.ndarray:
    """Rows around 300 centres: neighbourhoods a batch must get right."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((300, DIM)).astype(np.float32)
    x = centres[rng.integers(0, 300, N)] + 0.5 * rng.standard_normal((N, DIM), dtype=np.float32)
    return x.astype(np.float32)


def gensim_answers(words, x, asked) -> list:
    kv = KeyedVectors(DIM, count=0, dtype=np.float32)
    kv.index_to_key = list(words)
    kv.key_to_index = {w: i for i, w in enumerate(words)}
    kv.vectors = x
    return [[[w, s] for w, s in kv.most_similar(a, topn=10)] for a in asked]


@pytest.fixture
def snapshot(tmp_path):
    """A snapshot directory as ``SimilarityIndex.build`` leaves it, and its data."""
    words = [f"w{i}" for i in range(N)]
    x = vectors(1)
    path = tmp_path / "M.g1.x"
    path.mkdir()
    np.save(path / "vectors.npy", x)
    np.save(path / "norms.npy", np.linalg.norm(x, axis=1))
    write_vocab(path / "vocab.idx", words)
    return path, words, x


def int8_index(path) -> SimilarityIndex:
    ix = SimilarityIndex.open(path)
    ix.exact.first_pass = "int8"  # as a large matrix takes it (portable C without VNNI)
    return ix


def test_two_processes_one_packs_the_other_maps_and_both_answer_as_gensim(snapshot):
    path, words, x = snapshot
    asked = words[:40:3]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            program("i8rows_batch", path, json.dumps(asked)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(json.loads(out))
    assert sorted(o["packed"] for o in outs) == [0, 1]  # one packer; the other waited, mapped
    want = gensim_answers(words, x, asked)
    assert outs[0]["answers"] == outs[1]["answers"] == want
    # one whole file, nothing half-written beside it; a third process only maps it
    assert sorted(p.name for p in path.iterdir() if p.name.startswith((".", "int8"))) == [
        "int8.rows",
        "int8.rows.lock",
    ]
    qr = i8rows.open_rows(path / i8rows.FILE, np.load(path / "norms.npy"))
    assert (qr.n, qr.d, qr.usable) == (N, DIM, True)


@pytest.mark.parametrize(
    "damage, reason",
    [
        ("truncate", "bytes, not"),
        ("empty", "less than its header"),
        ("header", "damaged one"),
        ("scale", "checksum mismatch"),
        ("codes", "checksum mismatch"),
    ],
)
def test_a_damaged_file_is_detected_and_packed_again(snapshot, damage, reason, caplog):
    path, words, x = snapshot
    ix = int8_index(path)
    asked = words[100:110]
    want = gensim_answers(words, x, asked)
    assert [
        [list(p) for p in g]
        for g in ix.most_similar_batch([{"positive": [w], "topn": 10} for w in asked])
    ] == want
    file = path / i8rows.FILE
    size = file.stat().st_size
    with open(file, "r+b") as f:
        if damage == "truncate":
            f.truncate(size - 64)
        elif damage == "empty":
            f.truncate(0)
        else:
            at = {"header": 20, "scale": size - 1, "codes": i8rows.HEADER}[damage]
            f.seek(at)
            byte = f.read(1)
            f.seek(at)
            f.write(bytes([byte[0] ^ 0x10]))
    with pytest.raises(SnapshotDamaged, match=reason) as err:
        i8rows.open_rows(file, ix.norms)
    assert err.value.part == "int8 rows" and err.value.path == str(file)
    again = int8_index(path)  # a fresh process's view: it packs them again
    got = again.most_similar_batch([{"positive": [w], "topn": 10} for w in asked])
    assert [[list(p) for p in g] for g in got] == want
    assert "packing them again" in caplog.text and file.stat().st_size == size
    i8rows.open_rows(file, ix.norms)  # whole again


def test_rows_of_other_vectors_are_refused(snapshot, tmp_path):
    x = snapshot[2]
    other = tmp_path / "other.rows"
    i8rows.write(other, x[::-1].copy(), np.linalg.norm(x[::-1], axis=1))
    with pytest.raises(SnapshotDamaged, match="other vectors"):
        i8rows.open_rows(other, np.linalg.norm(x, axis=1))


def test_rows_that_cannot_be_written_are_packed_in_memory(snapshot, caplog):
    path, words, x = snapshot
    ix = int8_index(path)
    (path / "no-dir").write_bytes(b"")  # a file where a directory should be: no file beside
    ix.exact.rows_file = path / "no-dir" / i8rows.FILE
    got = ix.most_similar_batch([{"positive": [w], "topn": 10} for w in words[:4]])
    assert [[list(p) for p in g] for g in got] == gensim_answers(words, x, words[:4])
    assert "packed in memory" in caplog.text and ix.exact._i8.codes.flags.writeable


def test_a_new_generation_gets_its_own_rows(store, tmp_path):
    words = [f"w{i}" for i in range(N)]
    manager = IndexManager(store, cache_dir=tmp_path)
    asked = words[:30:7]
    gens = []
    for seed in (1, 2):
        x = vectors(seed)
        load_arrays(words, x, name="GEN", store=store)
        ix = manager.get("GEN")
        ix.exact.first_pass = "int8"
        got = ix.most_similar_batch([{"positive": [w], "topn": 10} for w in asked])
        assert [[list(p) for p in g] for g in got] == gensim_answers(words, x, asked)
        assert (ix.path / i8rows.FILE).exists()
        gens.append(ix.generation)
    assert gens[1] > gens[0]
    # only the new generation's snapshot (and its rows) is left
    assert [p.name for p in tmp_path.iterdir()] == [ix.path.name]


def test_odd_rows_are_kept_for_processes_with_the_same_blas(snapshot):
    path, words, _ = snapshot
    ix = int8_index(path)
    ix.most_similar_batch([{"positive": [w], "topn": 10} for w in words[:3]])
    [file] = path.glob("odd-rows.*.json")
    assert file.name == f"odd-rows.{i8rows.blas_tag()}.json"

    def never():
        raise AssertionError("found again")

    kept = i8rows.odd_rows(path / i8rows.FILE, N, never)
    assert np.array_equal(kept, ix.exact.odd_rows())
    file.write_text(file.read_text().replace('"crc": ', '"crc": 1'))  # damaged
    again = i8rows.odd_rows(path / i8rows.FILE, N, lambda: np.array([5, 9]))
    assert list(again) == [5, 9] and list(i8rows.odd_rows(path / i8rows.FILE, N, never)) == [5, 9]
