"""fastText's subword model trained data-parallel on real MPI ranks (``mpiexec -n 2``).

The ranks' model (every rank the same bits, the n-gram rows no word uses never sent, the
byte budget kept, about as good as one process's): ``tests/mpi/test_subword_ranks.py``
on every rank. The real ``vecserve train --subwords`` on two ranks commits a fastText
model that answers a word it never saw as gensim does from the saved ``.bin``; a rank
killed stops the job with one line and commits nothing; the job resumes from its
checkpoint. The arithmetic of an ordered matrix's sync, without MPI.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from gensim.models.fasttext import load_facebook_model

from tests.helpers import argv, topic_purity, write_topic_corpus
from tests.mpi_support import (
    kill_rank,
    mpiexec,
    run_on_ranks,
    start,
    vecserve_args,
    wait_for_line,
)
from vecserve.train.distributed import Group, Synchronizer

pytest.importorskip("mpi4py", reason="needs the MPI extra: pip install 'vecserve[mpi]'")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_an_ordered_matrix_syncs_the_rows_it_lists_in_their_order(dtype):
    """Only the rows ``order`` lists are agreed on, its first ``n`` at a head sync (the
    fused C passes and NumPy's float16 path); the others are never read or written."""
    w = np.zeros((10, 3), np.float32)
    order = np.array([7, 2, 5])
    s = Synchronizer(Group(), [(w, False, order)], dtype=dtype, coherent=False)
    assert s.n_rows == 3 and s.model_bytes == 3 * 3 * 4
    w += 1.0  # every row changed on this rank
    s.sync(2)  # the first two listed: rows 7 and 2
    assert s.mats[0].base[:, 0].tolist() == [1.0, 1.0, 0.0]
    w[[7, 2, 5, 0]] += 1.0
    payload = s.snapshot(3)  # overlapped: this rank trains on before it is applied
    assert [d[:, 0].tolist() for d in payload.deltas] == [[1.0, 1.0, 2.0]]
    s.exchange(payload)
    w[5] += 0.5
    s.apply(payload)
    assert s.mats[0].base[:, 0].tolist() == [2.0, 2.0, 2.0]
    assert w[:, 0].tolist() == [2.0, 1.0, 2.0, 1.0, 1.0, 2.5, 1.0, 2.0, 1.0, 1.0]


def test_ranks_train_one_model_as_good_as_one_process():
    """Skip-gram, CBOW on the rates schedule, hierarchical softmax on float32 payloads."""
    run_on_ranks(2, "test_subword_ranks.py")


def _train_args(corpus, *extra) -> list[str]:
    return vecserve_args(
        *argv(
            "train {} --subwords --buckets 20000 --min-count 1 --vector-size 16 --window 3 "
            "--sample 0 --threads 1 --seed 7",
            corpus,
        ),
        *map(str, extra),
    )


def test_two_ranks_commit_a_model_that_answers_unseen_words(tmp_path, redis_url):
    from vecserve.keyedvectors import RedisKeyedVectors

    corpus = write_topic_corpus(tmp_path / "topics.txt", 1200)
    save = tmp_path / "dist.bin"
    args = ["--epochs", "3", "--key", "DIST_FT", "--save", save, "--redis-url", redis_url]
    proc = mpiexec(2, *_train_args(corpus, *args))
    assert proc.returncode == 0, proc.stderr
    assert "DIST_FT: 32 vectors x 16 committed (trained on 2 ranks)" in proc.stdout
    assert proc.stdout.count("committed") == 1 and proc.stdout.count("saved") == 1
    assert "trained subword-sg-neg" in proc.stderr and "2 ranks x 1 thread," in proc.stderr
    ft = load_facebook_model(str(save)).wv
    assert topic_purity(ft) >= 0.9
    unseen = ["t0w9", "t3w12"]
    assert not any(w in ft.key_to_index for w in unseen)
    with RedisKeyedVectors("DIST_FT", redis_url=redis_url) as kv:
        assert kv.most_similar("t0w9", topn=1)[0][0].startswith("t0w")
        np.testing.assert_allclose(kv[unseen], np.vstack([ft[w] for w in unseen]), atol=1e-7)
        assert kv.get_vecattr("t0w0", "count") == corpus.read_text().split().count("t0w0")


@pytest.mark.slow
def test_a_killed_rank_stops_the_job_in_one_line_and_it_resumes(tmp_path, redis_url):
    import redis

    from vecserve.keyedvectors import RedisKeyedVectors

    corpus = write_topic_corpus(tmp_path / "topics.txt", 20_000)
    ckpt = tmp_path / "ckpt"
    common = ["--epochs", "4", "--checkpoint-dir", ckpt, "--sync-words", "20000"]
    proc = start(_train_args(corpus, *common, "--key", "KILLED_FT", "--redis-url", redis_url))
    try:
        wait_for_line(proc, "checkpoint: 1/4 epochs saved")
        kill_rank(proc, 1)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode != 0
    ours = [line for line in err.splitlines() if line.startswith("Error:")]
    assert ours == [
        "Error: rank 0 of 2: the MPI job was stopped (SIGTERM: another rank failed or was "
        "killed, see the launcher's message); nothing was committed"
    ], err
    assert "Traceback" not in err
    assert not redis.Redis.from_url(redis_url).keys("*KILLED_FT*")
    # the same options: continues after the last completed epoch, on both ranks
    resume = ["--resume", "--key", "RESUMED_FT", "--redis-url", redis_url]
    proc = mpiexec(2, *_train_args(corpus, *common, *resume))
    assert proc.returncode == 0, proc.stderr
    done = int(re.search(r"resuming after epoch (\d)/4", proc.stderr).group(1))
    assert 1 <= done < 4 and "checkpoint: 4/4 epochs saved" in proc.stderr
    with RedisKeyedVectors("RESUMED_FT", redis_url=redis_url) as kv:
        assert topic_purity(kv) >= 0.9
        assert kv.most_similar("t2w20", topn=1)[0][0].startswith("t2w")  # never seen
