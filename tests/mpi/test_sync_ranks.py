"""The synchroniser's arithmetic on real ranks: a program that ``mpiexec -n 3`` runs on
every rank, under pytest (``tests/test_train_distributed.py`` starts it).

3 ranks change known rows by known amounts; the sums (cap >= ranks), the touch-weighted
means (cap 1), the capped means (cap 2) and the rows outside the synchronised head come
out as computed here, on every rank.
"""

from __future__ import annotations

import numpy as np
import pytest

from vecserve.train.distributed import Group, Synchronizer

RANKS = 3


def known_deltas() -> tuple[np.ndarray, np.ndarray]:
    """Each rank's change to two matrices, ``d[rank]``: every rank knows them all."""
    d0 = np.zeros((RANKS, 6, 4), np.float32)
    d0[:, 0] = [[1, 2, 3, 4], [10, 20, 30, 40], [100, 200, 300, 400]]  # all ranks touch
    d0[1, 1] = [5, 5, 5, 5]  # rank 1 only
    d0[0, 2], d0[2, 2] = [1, 1, 1, 1], [3, 3, 3, 3]  # two ranks
    # row 3: nobody; rows 4, 5: changed but outside the head of 4 rows
    d0[:, 4] = 7.0
    d0[2, 5] = -1.0
    d1 = np.zeros((RANKS, 5, 4), np.float32)
    d1[:, 4] = [[1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]]  # the tail is w1's head
    d1[0, 0] = 9.0  # outside w1's synchronised tail rows 1..4
    return d0, d1


def bases() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (
        rng.standard_normal((6, 4)).astype(np.float32),
        rng.standard_normal((5, 4)).astype(np.float32),
    )


def sync_on_this_rank(g: Group, d0: np.ndarray, d1: np.ndarray) -> dict[str, np.ndarray]:
    """Every sync this test checks, run on this rank; what each left in the matrices."""
    out = {}
    for combine, cap in (("sum", 1e9), ("mean", 1.0), ("cap2", 2.0)):
        w0, w1 = bases()
        s = Synchronizer(g, [(w0, False), (w1, True)], cap=cap, coherent=False)
        w0 += d0[g.rank]
        w1 += d1[g.rank]
        s.sync(4)  # w0's first 4 rows, w1's last 4
        out[combine + "0"], out[combine + "1"] = w0.copy(), w1.copy()
        # overlapped: a change made after the snapshot survives the apply
        payload = s.snapshot(2)
        w0[0] += 100.0
        s.exchange(payload)
        s.apply(payload)
        out[combine + "_overlap"] = w0.copy()
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
        w0, _ = bases()
        s = Synchronizer(g, [(w0, False)], cap=1e9, coherent=True, dtype=dtype)
        w0 += d0[g.rank] / 100
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
    out["bytes"] = np.array(g.bytes_sent)
    return out


@pytest.fixture(scope="module")
def group() -> Group:
    g = Group.from_environment()
    assert g.size == RANKS, f"run under mpiexec -n {RANKS} (this is rank {g.rank} of {g.size})"
    return g


def test_sync_arithmetic_on_known_deltas(group):
    d0, d1 = known_deltas()
    mine = sync_on_this_rank(group, d0, d1)
    got = group.comm.allgather(mine)  # every rank checks every rank's result
    base0, base1 = bases()
    touches0 = (d0[:, :4] != 0).any(axis=2).sum(axis=0)
    touches1 = (d1[:, 1:] != 0).any(axis=2).sum(axis=0)
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
        for key in ("mean0", "float16", "int16", "int8"):
            assert (z[key][:4] == got[0][key][:4]).all(), key
    # 16 bits: the sum of the changes (/100: float16's range), half the bytes of float32
    # (4 rows x (4 + 2) columns x 2 bytes, a ring's 2 (N-1)/N of it; int16 adds each
    # row's largest change, 4 bytes); int16 to 1/(32767 // N) of a row's largest change
    ring = 2 * (RANKS - 1) / RANKS
    for r, z in enumerate(got):
        want = base0 + d0[r] / 100
        want[:4] = base0[:4] + d0[:, :4].sum(axis=0) / 100
        np.testing.assert_allclose(z["float16"], want, rtol=2e-3, atol=1e-3)
        np.testing.assert_allclose(z["int16"], want, rtol=0, atol=4.0 / (32767 // RANKS) * 3)
        # int8: to 1/(127 // N) of a row's largest change (4.0 / 100: row 0's on rank 2)
        np.testing.assert_allclose(z["int8"][:4], want[:4], rtol=0, atol=4.0 / (127 // RANKS) * 3)
        assert not np.allclose(z["int8"][:4], want[:4], rtol=0, atol=1e-6)  # it is coarse
        assert int(z["float16_bytes"]) == int(ring * 4 * 6 * 2)
        assert int(z["int16_bytes"]) == int(ring * 4 * 4) + int(ring * 4 * 6 * 2)
        assert int(z["int8_bytes"]) == int(ring * 4 * 4) + int(ring * 4 * 6 * 1)
        np.testing.assert_allclose(z["coherent_int16"], [[1, 2, 3], [1, 1, 1]], atol=1e-3)
