"""Half-open interval sets ``[start, end)`` as pairs of sorted int64 arrays (vectorised)."""

from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]

_EMPTY = np.zeros(0, np.int64)


def empty() -> Intervals:
    """The empty set."""
    return _EMPTY.copy(), _EMPTY.copy()


def merge(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Union of intervals as sorted, disjoint, non-touching intervals; empty intervals are dropped."""
    starts = np.asarray(starts, np.int64)
    ends = np.asarray(ends, np.int64)
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if starts.size == 0:
        return empty()
    order = np.argsort(starts, kind="stable")
    return _merge_sorted(starts[order], ends[order])


def merge_sorted(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """:func:`merge` of intervals already in order of their starts."""
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
    return _merge_sorted(np.asarray(starts, np.int64), np.asarray(ends, np.int64))


def _merge_sorted(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    if starts.size == 0:
        return empty()
    reach = np.maximum.accumulate(ends)
    new = np.empty(starts.size, bool)
    new[0] = True
    new[1:] = starts[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, starts.size - 1)
    return starts[first], reach[last]


def total(intervals: Intervals) -> int:
    """Summed length of disjoint intervals."""
    starts, ends = intervals
    return int(np.sum(ends - starts, dtype=np.int64))


def _segments(a: Intervals, b: Intervals) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Segments between consecutive sorted endpoints, with whether ``a`` and ``b`` cover each."""
    na, nb = a[0].size, b[0].size
    times = np.concatenate([a[0], a[1], b[0], b[1]])
    delta_a = np.concatenate([np.ones(na, np.int8), -np.ones(na, np.int8), np.zeros(2 * nb, np.int8)])
    delta_b = np.concatenate([np.zeros(2 * na, np.int8), np.ones(nb, np.int8), -np.ones(nb, np.int8)])
    order = np.argsort(times, kind="stable")
    times = times[order]
    in_a = np.cumsum(delta_a[order], dtype=np.int64)[:-1] > 0
    in_b = np.cumsum(delta_b[order], dtype=np.int64)[:-1] > 0
    return times, in_a, in_b


def _from_mask(times: np.ndarray, mask: np.ndarray) -> Intervals:
    if not mask.any():
        return empty()
    starts, ends = times[:-1][mask], times[1:][mask]
    keep = ends > starts
    return _merge_sorted(starts[keep], ends[keep])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """``a ∩ b`` of two merged sets."""
    if a[0].size == 0 or b[0].size == 0:
        return empty()
    times, in_a, in_b = _segments(a, b)
    return _from_mask(times, in_a & in_b)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """``a \\ b`` of two merged sets."""
    if a[0].size == 0 or b[0].size == 0:
        return a
    times, in_a, in_b = _segments(a, b)
    return _from_mask(times, in_a & ~in_b)


def clip(intervals: Intervals, lo: int, hi: int) -> Intervals:
    """The part of ``intervals`` inside ``[lo, hi)``."""
    starts, ends = intervals
    s = np.maximum(starts, lo)
    e = np.minimum(ends, hi)
    keep = e > s
    return s[keep], e[keep]


def integrate(
    starts: np.ndarray, ends: np.ndarray, values: np.ndarray | None, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """For each window ``[lo[i], hi[i])``: the integral of a piecewise-constant function.

    The function is ``values[j]`` on the sorted disjoint ``[starts[j], ends[j])`` (1 where ``values`` is None)
    and 0 elsewhere; with ``values=None`` this is the covered length of each window.
    """
    lo = np.asarray(lo, np.int64)
    hi = np.asarray(hi, np.int64)
    if starts.size == 0:
        return np.zeros(lo.shape, np.float64 if values is not None else np.int64)
    weights = np.ones(starts.size, np.int64) if values is None else np.asarray(values, np.float64)
    area = (ends - starts) * weights
    cum = np.concatenate([[0], np.cumsum(area)])

    def upto(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(starts, t, side="right") - 1
        kk = np.clip(k, 0, None)
        partial = (np.clip(np.minimum(t, ends[kk]) - starts[kk], 0, None)) * weights[kk]
        return np.where(k >= 0, cum[kk] + partial, 0)

    return upto(hi) - upto(lo)
