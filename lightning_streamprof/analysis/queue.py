"""Launch-queue length per stream and time blocked on a full queue (HTA's ``generate_trace_with_counters``,
``get_queue_length_summary`` and ``get_time_spent_blocked_on_full_queue``).

The queue length of a (device, stream) is the number of operations launched on it and not started yet: +1 when a
launch call starts, −1 when its device event (kernel, copy, set) starts, as HTA counts it
(``hta/analyzers/trace_counters.py``). It is a step function; its statistics are over time (``length_ns``, the
integral, gives the time-weighted mean) and, as HTA's summary, over the values at its changes (count, sum, sum of
squares: mean and standard deviation; HTA's quartiles do not merge and are left out). The time spent at
``max_queue_length`` (1,024, the CUDA runtime's launch queue) or more is the time launches block the host.

Unlike HTA, which counts only ``cudaLaunchKernel``/``cudaLaunchKernelExC``/``cuLaunchKernel``/async copies and sets
and their HIP counterparts, every launch call with a device event counts, a CUDA-graph launch adding one per kernel
of the graph (which makes more points and can make longer queues than HTA's); streams are told apart by device as
well. At equal times a launch (+1) comes before a start (−1), as in HTA's series.
"""

from __future__ import annotations

import numpy as np

from lightning_streamprof.analysis._links import group
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.results import TraceIdentity
from lightning_streamprof.results.hta import MAX_QUEUE_LENGTH, QueueLengths, StreamQueue, sort_streams


def queue_series(ctx: TraceContext) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The queue-length step functions: per change (grouped by stream, in time order) its stream group, time and
    value after it; and per group its device and stream."""
    t = ctx.table
    launch = ctx.device_launch
    linked = np.flatnonzero((launch >= 0) & (t.stream[ctx.device_rows] >= 0))
    dev = ctx.device_rows[linked]
    z = np.zeros(0, np.int64)
    if dev.size == 0:
        return z, z, z, z, z
    device, stream = t.device[dev].astype(np.int64), t.stream[dev].astype(np.int64)
    codes, key = group((device << 32) | (stream & 0xFFFFFFFF))
    times = np.concatenate([t.ts[launch[linked]], t.ts[dev]])
    delta = np.concatenate([np.ones(dev.size, np.int64), -np.ones(dev.size, np.int64)])
    groups = np.concatenate([key, key])
    order = np.lexsort((-delta, times, groups))
    groups, times, delta = groups[order], times[order], delta[order]
    value = np.cumsum(delta)
    heads = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    before = np.r_[0, value[heads[1:] - 1]]
    value = value - np.repeat(before, np.diff(np.r_[heads, groups.size]))
    return groups, times, value, codes >> 32, (codes & 0xFFFFFFFF).astype(np.int32).astype(np.int64)


def queue_lengths(ctx: TraceContext, identity: TraceIdentity | None = None, *,
                  max_queue_length: int = MAX_QUEUE_LENGTH) -> QueueLengths:
    """Queue-length statistics and time at the full queue of every stream."""
    groups, times, value, devices, streams = queue_series(ctx)
    if groups.size == 0:
        return QueueLengths(max_queue_length=max_queue_length)
    n = devices.size
    last = np.r_[groups[1:] != groups[:-1], True]
    hold = np.where(last, 0, np.r_[np.diff(times), 0])
    span = np.bincount(groups, weights=hold, minlength=n)
    length = np.bincount(groups, weights=hold * value, minlength=n)
    blocked = np.bincount(groups, weights=np.where(value >= max_queue_length, hold, 0), minlength=n)
    points = np.bincount(groups, minlength=n)
    psum = np.bincount(groups, weights=value, minlength=n)
    psq = np.bincount(groups, weights=value.astype(np.float64) ** 2, minlength=n)
    mx, mn = np.full(n, np.iinfo(np.int64).min), np.full(n, np.iinfo(np.int64).max)
    np.maximum.at(mx, groups, value)
    np.minimum.at(mn, groups, value)
    rank = identity.rank if identity else None
    return QueueLengths(max_queue_length=max_queue_length, streams=sort_streams(
        StreamQueue(device=int(devices[g]), stream=int(streams[g]), launches=int(points[g] // 2),
                    span_ns=int(span[g]), length_ns=int(length[g]), max_length=int(mx[g]), min_length=int(mn[g]),
                    points=int(points[g]), point_sum=int(psum[g]), point_sq_sum=int(psq[g]), blocked_ns=int(blocked[g]),
                    rank=rank)
        for g in range(n)))
