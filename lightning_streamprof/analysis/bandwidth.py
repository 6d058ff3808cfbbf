"""Copy and set bandwidth (HTA's ``get_memory_bw_summary``).

Per Kineto name (``Memcpy HtoD (Pageable -> Device)``, ``Memset (Device)``...): the copies' count, bytes and time,
and the bandwidth of each copy with a size and a duration, ``bytes / duration`` (Kineto's ``memory bandwidth
(GB/s)``: 1 byte/ns is 1 GB/s): the fastest, the mean, and all of them taken together. A host copy far below the
link's bandwidth is a pageable copy (the driver stages it through a pinned buffer) or a small one (its fixed cost
dominates); ``CopyBandwidth.pageable`` and ``mean_bytes`` tell which.

HTA's summary is over a time series per kind (the name's first 11 characters, ``Memcpy HtoD``; ``Memset``): at each
copy's start its bandwidth is added, at its end taken away, and the statistics are over the series' values above
0. Its count, mean and peak are kept (``BandwidthSeries``), with ends before starts at equal times and HTA's 1 µs for
a copy of no duration; AMD traces record no copy size, so they have no bandwidth.
"""

from __future__ import annotations

import numpy as np

from lightning_streamprof.analysis._links import group
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.results.hta import Bandwidth, BandwidthSeries, CopyBandwidth, sort_copies
from lightning_streamprof.trace.table import Kind


def copy_kind(name: str) -> str:
    """HTA's memory kind of a copy or set name: ``Memset``, ``Memcpy HtoD``..., ``Memcpy Unknown``."""
    if name.startswith("Memset"):
        return "Memset"
    return name[:11] if name.startswith("Memcpy") else "Memcpy Unknown"


def _series(kinds: np.ndarray, start: np.ndarray, dur: np.ndarray, gbps: np.ndarray) -> list[BandwidthSeries]:
    if kinds.size == 0:
        return []
    codes, g = group(kinds)
    end = start + np.where(dur == 0, 1000, dur)
    times = np.concatenate([start, end])
    delta = np.concatenate([gbps, -gbps])
    groups = np.concatenate([g, g])
    order = np.lexsort((np.concatenate([np.ones(g.size), np.zeros(g.size)]), times, groups))
    groups, delta = groups[order], delta[order]
    value = np.cumsum(delta)
    heads = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    value -= np.repeat(np.r_[0.0, value[heads[1:] - 1]], np.diff(np.r_[heads, groups.size]))
    positive = value > 1e-9
    n = codes.size
    points = np.bincount(groups[positive], minlength=n)
    total = np.bincount(groups[positive], weights=value[positive], minlength=n)
    peak = np.zeros(n)
    np.maximum.at(peak, groups[positive], value[positive])
    return [BandwidthSeries(kind=str(codes[i]), points=int(points[i]), point_sum_gbps=float(total[i]),
                            peak_gbps=float(peak[i])) for i in range(n) if points[i]]


def bandwidth(ctx: TraceContext) -> Bandwidth:
    """Bandwidth of every copy and set name, and HTA's series statistics per kind."""
    t = ctx.table
    rows = t.select(Kind.MEMCPY, Kind.MEMSET)
    if rows.size == 0:
        return Bandwidth()
    nbytes, dur = t.bytes[rows], t.dur[rows]
    timed = (nbytes > 0) & (dur > 0)
    gbps = np.where(timed, nbytes / np.maximum(dur, 1), 0.0)
    codes, g = group(t.name[rows])
    n = codes.size
    mx = np.zeros(n)
    np.maximum.at(mx, g, gbps)

    def total(values: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        m = np.ones(g.size, bool) if mask is None else mask
        return np.bincount(g[m], weights=values[m], minlength=n)

    cols = {"calls": np.bincount(g, minlength=n), "bytes": total(nbytes), "busy_ns": total(dur),
            "timed_calls": np.bincount(g[timed], minlength=n), "timed_bytes": total(nbytes, timed),
            "timed_ns": total(dur, timed)}
    copies = [CopyBandwidth(name=t.names[codes[i]], kind=copy_kind(t.names[codes[i]]), max_gbps=float(mx[i]),
                            sum_gbps=float(total(gbps, timed)[i]), **{k: int(v[i]) for k, v in cols.items()})
              for i in range(n)]
    kind_of = np.array([copy_kind(t.names[c]) for c in codes.tolist()], dtype=object)[g]
    has_bw = nbytes > 0
    series = _series(kind_of[has_bw].astype(str), t.ts[rows][has_bw], dur[has_bw], gbps[has_bw])
    return Bandwidth(copies=sort_copies(copies), series=series)
