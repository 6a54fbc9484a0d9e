"""Which rows each sync carries, within a budget of bytes.

Each matrix's rows are in frequency order (the most frequent first; the Huffman tree's
top nodes, syn1's last rows, first), so every schedule is a prefix of that order: at sync
*k* of an epoch the head (:func:`sync_rows`, pWord2Vec's doubling schedule) or per-row
periods set by each row's update rate (:func:`tier_tables`), and the whole model at each
epoch's end. :func:`head_for_budget` sizes the head so that a
rank sends at most a given number of models' bytes per epoch.

>>> [sync_rows(k, head=100, n_rows=1000) for k in range(1, 9)]
[100, 200, 100, 400, 100, 200, 100, 800]
"""

from __future__ import annotations

import numpy as np

__all__ = ["head_for_budget", "sync_rows", "tier_tables"]


def sync_rows(k: int, *, head: int, n_rows: int) -> int:
    """Rows synchronised at sync *k* (1, 2, ...): ``head`` x the largest power of two
    dividing *k*, at most all of them (pWord2Vec's doubling schedule).

    >>> sync_rows(12, head=64, n_rows=10**6), sync_rows(1 << 20, head=64, n_rows=1000)
    (256, 1000)
    """
    return min(n_rows, head * (k & -k))


def _head_syncs(syncs_per_epoch: int | list[int]) -> tuple[np.ndarray, int]:
    """The numbers *k* of every head sync (each epoch's last sync, the whole model, is
    not one) over the epochs, and how many epochs."""
    per_epoch = [syncs_per_epoch] if isinstance(syncs_per_epoch, int) else syncs_per_epoch
    ks = [np.arange(1, max(n - 1, 0) + 1) for n in per_epoch]
    return np.concatenate(ks) if ks else np.zeros(0, int), len(per_epoch)


def head_for_budget(
    n_rows: int,
    syncs_per_epoch: int | list[int],
    budget: float = 1.0,
    rows_of: np.ndarray | None = None,
) -> int:
    """The largest head whose head syncs move at most *budget* models per epoch.

    The epoch's last sync is always the whole model and is not counted here. With a list
    of each epoch's syncs (a warm-up makes the first epoch's more), at most *budget*
    models per epoch on average. ``rows_of[h]`` (``h`` = 0 .. *n_rows*): the rows a head
    of ``h`` carries, ``rows_of[n_rows]`` the model's (default: ``h``; the subword
    model's head words bring their n-gram rows).

    >>> head_for_budget(100_000, 64)
    520
    >>> head_for_budget(100_000, [88, 64, 64])
    428
    >>> head_for_budget(100, 1)
    100
    >>> head_for_budget(100_000, 64, rows_of=np.arange(100_001) * 2)  # the same in units of 2
    520
    """
    ks, epochs = _head_syncs(syncs_per_epoch)
    if len(ks) == 0:
        return n_rows
    mult = ks & -ks
    rows = np.arange(n_rows + 1) if rows_of is None else np.asarray(rows_of, np.int64)

    def cost(h):
        return int(rows[np.minimum(h * mult, n_rows)].sum())

    lo, hi = 0, n_rows
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cost(mid) <= budget * int(rows[n_rows]) * epochs:
            lo = mid
        else:
            hi = mid - 1
    return lo


def tier_tables(
    rates: list[np.ndarray],
    syncs_per_epoch: int | list[int],
    budget: float = 1.0,
) -> list[np.ndarray]:
    """Per-row sync periods by update rate, as prefix tables within *budget* rows.

    *rates* holds, per matrix, each row's expected updates per word trained, its most
    frequent row first. A row is synchronised every ``2**j`` syncs, the smallest ``j``
    at which its rate falls below ``theta / 2**j`` (so every row collects about the same
    number of updates between its syncs: ``theta`` per sync period), with the largest
    ``theta``-bound that keeps the head syncs of an epoch within *budget* models (all
    matrices' rows together; *syncs_per_epoch* as for :func:`head_for_budget`). Row
    order is kept: a table ``L`` says sync *k* carries a matrix's first
    ``L[min(tz(k), len(L) - 1)]`` rows, ``tz(k)`` the number of trailing zero bits of
    *k*. Under Zipf's law without subsampling this is the doubling schedule;
    subsampling flattens the head's rates, which then shares its rows' syncs with the
    words just below it.

    >>> zipf = [1.0 / np.arange(1, 1001)]
    >>> tier_tables(zipf, 8, budget=1.0)[0].tolist()  # head_for_budget(1000, 8): 83
    [83, 167, 334, 669]
    """
    ks, epochs = _head_syncs(syncs_per_epoch)
    mono = [np.minimum.accumulate(np.asarray(r, np.float64)) for r in rates]
    total_rows = sum(len(r) for r in mono)
    if len(ks) == 0:
        return [np.array([len(r)]) for r in mono]
    n_tiers = int(ks.max()).bit_length() + 1
    tz = np.minimum(np.log2(ks & -ks).astype(int), n_tiers - 1)
    per_tier = np.bincount(tz, minlength=n_tiers)  # syncs of each tier in all epochs
    scale = 2.0 ** -np.arange(n_tiers)

    def tables(theta):  # rows with rate >= theta * 2**-j: a prefix (rates fall)
        out = [np.searchsorted(-r, -theta * scale, side="right") for r in mono]
        return out

    def cost(theta):
        return sum(int((t * per_tier).sum()) for t in tables(theta))

    limit = budget * total_rows * epochs
    hi = max(float(r[0]) for r in mono if len(r)) * 2.0**n_tiers * 2  # no tier: cost 0
    lo = hi
    while cost(lo) <= limit:
        if lo < 1e-300:  # every row in every sync fits
            return tables(lo)
        lo /= 2.0
    for _ in range(60):  # the smallest theta within budget, by bisection in log space
        mid = np.sqrt(lo * hi)
        if cost(mid) <= limit:
            hi = mid
        else:
            lo = mid
    return tables(hi)
