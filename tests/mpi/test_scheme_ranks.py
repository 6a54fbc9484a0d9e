"""Every sync scheme on real ranks: a program that ``mpiexec -n 2`` (and ``-n 3``) runs on
every rank, under pytest (``tests/test_train_distributed.py`` starts it).

Every scheme learns the topics, and each rank sends at most ``sync_budget`` float32
models per epoch; a warm-up cuts the first epoch's first groups in 4.
"""

from __future__ import annotations

import inspect
import tempfile
from pathlib import Path

import pytest

from tests.helpers import topic_purity
from tests.mpi.conftest import SENTENCES
from vecserve.train import Word2Vec
from vecserve.train.distributed import Group
from vecserve.train.params import TrainParams


@pytest.mark.parametrize(
    "opts",
    [
        {},
        {"sync_dtype": "float32", "sync_schedule": "doubling", "sync_scale_alpha": 0},
        {"sync_budget": 1.8, "sync_warmup": 0.5},
        {"workers": 2},
        {"hs": 1, "negative": 0},
        {"sync_dtype": "int8", "sync_depth": 3},
    ],
    ids=[
        "default",
        "float32-doubling",
        "small-budget-warmup",
        "two-threads-a-rank",
        "hierarchical-softmax",
        "int8-three-under-way",
    ],
)
def test_sync_schemes_learn_within_their_byte_budget(world, topic_corpus, opts):
    from gensim.models import KeyedVectors

    ranks = world.size
    g = Group(world.comm)  # this test's own byte and wait counts
    m = Word2Vec(
        topic_corpus,
        vector_size=16,
        window=3,
        min_count=1,
        sample=0,
        epochs=3,
        seed=7,
        sync_words=2000,
        comm=g,
        **{"workers": 1, **opts},
    )
    if g.rank != 0:  # rank 0 checks the model all ranks hold
        return
    with tempfile.TemporaryDirectory(prefix="vecserve-ranks-") as tmp:
        out = Path(tmp) / "out.bin"
        m.save_word2vec_format(str(out), binary=True)
        assert topic_purity(KeyedVectors.load_word2vec_format(str(out), binary=True)) >= 0.9
    stats = m.train_stats
    defaults = {k: p.default for k, p in inspect.signature(Word2Vec).parameters.items()}
    opts = {**defaults, **opts}
    alpha = TrainParams(sg=opts["sg"]).alpha  # the default alpha of the mode
    # (+ the bookkeeping: each group's word count, 8 bytes, summed once per plan)
    assert 0 < stats["bytes_sent"] / 3 <= opts["sync_budget"] * stats["model_bytes"] + 64
    words = SENTENCES * 10 // ranks  # a rank's share
    # sync_words 2000, or more often: sync_min_per_epoch, in groups of >= 1,000 words
    groups = max(-(-words // 2000), min(opts["sync_min_per_epoch"], words // 1000))
    warm = round(opts["sync_warmup"] * groups)  # cut in 4: 3 more syncs each
    assert stats["syncs"] == 3 * groups + 3 * warm
    # the wait in the epochs' whole-model syncs is a part of the whole wait
    assert 0 < stats["sync_full_seconds"] <= stats["sync_stall_seconds"] < stats["train_seconds"]
    # the learning rate starts at alpha x (N / min(N, cap)) ** power: 1 at 2 ranks, cap 2
    scale = (ranks / min(ranks, opts["sync_cap"])) ** opts["sync_scale_alpha"]
    assert m.start_alpha == pytest.approx(alpha * scale)
