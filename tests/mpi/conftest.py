"""What the rank programs share: ``world`` (this job's ranks) and ``topic_corpus`` (one
topic corpus every rank reads). Loaded only under ``mpiexec`` (``tests/conftest.py``
leaves ``tests/mpi/`` out of the suite's own collection)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.helpers import write_topic_corpus
from vecserve.train.distributed import Group

#: Sentences of 10 words in ``topic_corpus``.
SENTENCES = 1500


@pytest.fixture(scope="module")
def world() -> Group:
    g = Group.from_environment()
    assert g.size > 1, "run under mpiexec -n 2 or more"
    return g


@pytest.fixture(scope="module")
def topic_corpus(world):
    """``SENTENCES`` topic sentences, written once, by rank 0; every rank reads the same file."""
    with tempfile.TemporaryDirectory(prefix="vecserve-ranks-") as tmp:
        path = write_topic_corpus(Path(tmp) / "topics.txt", SENTENCES) if world.rank == 0 else None
        yield str(world.comm.bcast(path, root=0))
        world.comm.barrier()  # every rank is done with it before rank 0 removes it
