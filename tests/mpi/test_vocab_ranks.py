"""The vocabulary merged over real ranks: a program that ``mpiexec -n 3`` runs on every
rank, under pytest (``tests/test_train_distributed.py`` starts it).

A directory of a text8-style one-line file, a line file and a .gz file: every rank gets
exactly one machine's vocabulary (ties in first-seen order), and the ranks' encoded
shares, in rank order, are one machine's encoded corpus.
"""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from vecserve.train import Word2Vec
from vecserve.train.distributed import Group

RANKS = 3


@pytest.fixture(scope="module")
def group() -> Group:
    g = Group.from_environment()
    assert g.size == RANKS, f"run under mpiexec -n {RANKS} (this is rank {g.rank} of {g.size})"
    return g


@pytest.fixture(scope="module")
def corpus(group, tmp_path_factory):
    """Written once, by rank 0; every rank reads the same directory."""
    path = None
    if group.rank == 0:
        path = tmp_path_factory.mktemp("corpus")
        rng = np.random.default_rng(1)
        words = [f"w{int(i)}" for i in rng.zipf(1.3, 30_000) if i < 400]
        (path / "a-text8").write_text(" ".join(words[:15_000]))
        (path / "b-lines.txt").write_text(
            "\n".join(" ".join(words[i : i + 13]) for i in range(15_000, 25_000, 13))
        )
        with gzip.open(path / "c.txt.gz", "wt") as f:
            f.write(" ".join(words[25_000:]) + "\ntie1 tie2 tie3\n")
    return str(group.comm.bcast(path, root=0))


@pytest.mark.parametrize(
    "opts",
    [{"min_count": 2}, {"min_count": 1, "max_final_vocab": 20}],
    ids=["min_count", "max_final_vocab"],
)
def test_merged_vocabulary_equals_one_machines(group, corpus, opts):
    m = Word2Vec(vector_size=8, comm=group, **opts)
    m.build_vocab(corpus)
    one = Word2Vec(vector_size=8, **opts)  # no comm: one machine
    one.build_vocab(corpus)
    assert m.vocab.words == one.vocab.words
    assert m.vocab.counts.tolist() == one.vocab.counts.tolist()
    assert m.vocab.raw_words == one.vocab.raw_words
    shares = group.comm.allgather(np.asarray(m.corpus.words))
    assert np.concatenate(shares).tolist() == np.asarray(one.corpus.words).tolist()
