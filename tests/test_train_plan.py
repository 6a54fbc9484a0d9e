"""vecserve.train.plan: jobs, sync groups and the learning rate along the global count."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from vecserve.train.params import SyncParams
from vecserve.train.plan import (
    MIN_SYNC_WORDS,
    RunPlan,
    cut_groups,
    cut_jobs,
    groups_needed,
    min_alpha_for,
    plan_epoch,
)

#: 3,000 sentences of 10 words
BOUNDS = np.arange(0, 30_001, 10, dtype=np.int64)


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_every_thread_of_a_rank_gets_jobs_in_each_sync_group(workers):
    """A rank's threads meet at the end of each sync group, so each group holds at least
    two jobs a thread (sentences allowing), even when a group is no bigger than
    ``job_words``: the plan of a rank of a two-rank job."""
    n_groups = groups_needed(30_000, 2, SyncParams(sync_words=5000, sync_min_per_epoch=0))
    groups = cut_groups(BOUNDS, n_groups, workers=workers, job_words=50_000)
    assert len(groups) == 6  # 30,000 words / 5,000
    per_group = 2 * workers if workers > 1 else 1
    assert all(len(g) >= per_group for g in groups[:-1])
    words = [j.words for g in groups for j in g]
    assert sum(words) == 30_000  # every word once, in order
    assert [j.start for g in groups for j in g] == list(np.cumsum([0, *words[:-1]]))


def test_short_epochs_sync_at_least_sync_min_per_epoch():
    """A rank's epoch is cut into at least ``sync_min_per_epoch`` sync groups (a short
    run syncs more often than every ``sync_words``: 2 ranks with hierarchical softmax on
    20 MB lost 2.6 analogy points at 34 syncs an epoch, 1.3 at 128), never into groups
    under ``MIN_SYNC_WORDS``; a long epoch keeps ``sync_words``; one process, one group."""

    def groups(size=2, **opts):
        n_groups = groups_needed(30_000, size, SyncParams(**opts))
        got = cut_groups(BOUNDS, n_groups, workers=1, job_words=50_000)
        assert sum(j.words for g in got for j in g) == 30_000
        return len(got)

    assert SyncParams().sync_min_per_epoch == 128
    assert groups(sync_words=5000, sync_min_per_epoch=0) == 6  # 30,000 / 5,000
    assert groups(sync_words=5000, sync_min_per_epoch=4) == 6  # long enough already
    assert groups(sync_words=5000, sync_min_per_epoch=20) == 20
    assert groups(sync_words=5000) == 30_000 // MIN_SYNC_WORDS  # 128 asked, 30 allowed
    assert groups(size=1) == 1


def test_jobs_end_at_sentence_ends_and_cover_every_word():
    jobs = cut_jobs(BOUNDS, 95, extra_cuts=[1234])
    assert jobs[0].first == 0 and jobs[-1].end == len(BOUNDS) - 1
    assert all(a.end == b.first for a, b in itertools.pairwise(jobs))
    assert sum(j.words for j in jobs) == 30_000
    assert 1240 in [j.start for j in jobs]  # the extra cut, at the next sentence end


def test_learning_rate_falls_linearly_along_the_global_count():
    """Two ranks, this one with 1,000 words a group and the other 500: a job's learning
    rate is where its words fall in the global word count of all epochs."""
    rank = SimpleNamespace(size=2, max=lambda n: n, allreduce=lambda a: a + 500)
    sync = SyncParams(sync_words=1000, sync_min_per_epoch=0)
    plan = plan_epoch(rank, BOUNDS[:301], workers=1, job_words=50_000, sync=sync)
    assert plan.mine.tolist() == [1000, 1000, 1000]
    assert plan.global_words.tolist() == [1500] * 3 and plan.words == 4500
    run = RunPlan(plan, None, epochs=2, start_alpha=0.025, min_alpha=0.0)
    assert run.total == 9000
    assert run.alphas(0, 0, 0, 500)[0] == pytest.approx(0.025)
    assert run.alphas(1, 2, 500, 500)[1] == pytest.approx(0.0)
    # half of this rank's share of group 1 of epoch 1: 4500 + 1500 + 750 words in
    assert run.alphas(1, 1, 0, 500)[1] == pytest.approx(0.025 * (1 - 6750 / 9000))


@pytest.mark.parametrize(
    ("words", "share"),
    [
        (1_000, 0.25),  # a toy corpus
        (6_800_000, 0.25),  # wiki100m's first 20 MB x 2 epochs
        (20_000_000, 0.25),  # the rule's knee
        (80_000_000, 0.125),  # 4x the words: half the share
        (85_000_000, 0.25 * (20 / 85) ** 0.5),  # the whole wiki100m x 5 epochs
    ],
)
def test_the_default_final_rate_is_a_share_of_alpha_falling_with_the_words_trained(words, share):
    """``min_alpha``'s default: a quarter of alpha up to 20M words trained, then falling
    with the square root of the words, for either mode's alpha."""
    for alpha in (0.025, 0.05):
        assert min_alpha_for(alpha, words) == pytest.approx(alpha * share)


def test_the_default_final_rate_never_falls_below_the_classic_one():
    assert min_alpha_for(0.025, 10**12) == pytest.approx(0.0001)  # 0.25 x 0.0045 x alpha
    assert min_alpha_for(0.025, 10**10) > 0.0001  # still above it at 10 billion words
    assert min_alpha_for(0.0002, 1000) == 0.0001  # a tiny alpha: the classic rate
