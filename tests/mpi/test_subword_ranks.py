"""fastText's subword model on real ranks: a program that ``mpiexec -n 2`` runs on every
rank, under pytest (``tests/test_train_subword_distributed.py`` starts it).

Every rank ends with the same bits; the n-gram rows no vocabulary word uses never travel
(they keep their initial values and are not counted in the model's synchronised bytes);
each rank sends at most ``sync_budget`` models an epoch; and the model is about as good
as one process's on the same corpus: its topics, and words it never saw (composed from
their n-grams) near their topic.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from tests.helpers import PER_TOPIC, TOPICS, topic_purity
from vecserve.train import FastText
from vecserve.train.distributed import Group

COMMON = {
    "vector_size": 16,
    "window": 3,
    "min_count": 1,
    "sample": 0,
    "epochs": 3,
    "seed": 7,
    "bucket": 20_000,
    "workers": 1,
}


def unseen_near_topic(kv) -> float:
    """Share of words never seen (``t0w8`` ...: a topic's prefix, a new number) whose
    nearest vocabulary word is of their topic."""
    unseen = [f"t{t}w{w}" for t in range(TOPICS) for w in range(PER_TOPIC, PER_TOPIC + 6)]
    assert not any(w in kv.key_to_index for w in unseen)
    return float(np.mean([kv.most_similar(w, topn=1)[0][0].startswith(w[:3]) for w in unseen]))


@pytest.mark.parametrize(
    "opts",
    [{}, {"sg": 0, "sync_schedule": "rates"}, {"hs": 1, "negative": 0, "sync_dtype": "float32"}],
    ids=["sg", "cbow-rates", "sg-hs-float32"],
)
def test_ranks_train_one_model_as_good_as_one_process(world, topic_corpus, opts):
    g = Group(world.comm)  # this test's own byte counts
    m = FastText(topic_corpus, comm=g, sync_words=2000, **COMMON, **opts)
    # every rank holds the same bits (each epoch ends on an exact sync)
    digest = hashlib.sha256(b"".join(w.tobytes() for w in m._weights().values())).hexdigest()
    assert world.comm.allgather(digest) == [digest] * g.size
    # the n-gram rows no word uses kept their initial values, and are not synchronised
    order, _ = m._bucket_order()
    unused = np.setdiff1d(np.arange(len(m.vectors_ngrams)), order)
    initial = m._input_rows(len(m.wi))[len(m.vocab) :]
    assert len(unused) > len(order) and (m.vectors_ngrams[unused] == initial[unused]).all()
    stats = m.train_stats
    d = m.vector_size
    out_rows = len(m.vocab) - (1 if opts.get("hs") else 0)
    assert stats["model_bytes"] == (len(m.vocab) + out_rows + len(order)) * d * 4
    # within the byte budget (+ the bookkeeping: each group's word count, summed once)
    assert 0 < stats["bytes_sent"] / 3 <= 2.0 * stats["model_bytes"] + 64
    if g.rank != 0:
        return
    one = FastText(topic_corpus, **COMMON, **opts)  # one process, the same corpus
    assert topic_purity(m.wv) >= topic_purity(one.wv) - 0.1
    assert unseen_near_topic(m.wv) >= unseen_near_topic(one.wv) - 0.1
