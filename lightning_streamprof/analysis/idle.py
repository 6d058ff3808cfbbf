"""Idle time per stream, split into host wait, kernel wait and other (HTA's ``get_idle_time_breakdown``).

On each (device, stream), the device events (kernels, copies, sets) in order of their start; the gap before each
event but the first is ``start − previous end``, and it is

- **host wait** when the event's launch call started after the previous event ended: nothing was queued, the host
  was behind;
- **kernel wait** otherwise, when the gap is shorter than ``kernel_wait_ns``: the overhead of launching kernels back
  to back;
- **other** otherwise (the stream waits on something else: another stream's event, a collective...).

As in HTA (``hta/analyzers/breakdown_analysis.py``), whose ``consecutive_kernel_delay=30`` is compared with gaps in
the trace's microseconds, the default threshold is 30 µs, and an event without a launch call in the trace is never
a host wait. Unlike HTA, a negative gap (events overlapping on one stream) counts as 0, and the analysis covers all
the trace's device events: HTA first drops the events launched after the last ``ProfilerStep`` started and rounds
nanosecond timestamps to microseconds (start up, end down).
"""

from __future__ import annotations

import numpy as np

from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.results import TraceIdentity
from lightning_streamprof.results.hta import KERNEL_WAIT_NS, IdleTime, StreamIdle, sort_streams

HOST_WAIT, KERNEL_WAIT, OTHER = 0, 1, 2


def stream_order(ctx: TraceContext) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Device rows (indices into :attr:`TraceContext.device_rows`) on a stream, in (device, stream, start) order,
    with each one's stream group and whether it starts its group."""
    t = ctx.table
    rows = ctx.device_rows
    keep = np.flatnonzero(t.stream[rows] >= 0)
    order = keep[np.lexsort((t.ts[rows[keep]], t.stream[rows[keep]], t.device[rows[keep]]))]
    dev, stream = t.device[rows[order]].astype(np.int64), t.stream[rows[order]].astype(np.int64)
    first = np.ones(order.size, bool)
    first[1:] = (dev[1:] != dev[:-1]) | (stream[1:] != stream[:-1])
    return order, np.cumsum(first) - 1, first


def idle_time(ctx: TraceContext, identity: TraceIdentity | None = None, *,
              kernel_wait_ns: int = KERNEL_WAIT_NS) -> IdleTime:
    """The idle time of every stream, split into host wait, kernel wait and other."""
    t = ctx.table
    order, streams, first = stream_order(ctx)
    if order.size == 0:
        return IdleTime(kernel_wait_threshold_ns=kernel_wait_ns)
    rows = ctx.device_rows[order]
    start, dur = t.ts[rows], t.dur[rows]
    end = start + dur
    launch = ctx.device_launch[order]
    prev_end = np.empty_like(end)
    prev_end[1:] = end[:-1]
    gap = np.maximum(start - prev_end, 0)
    has_launch = launch >= 0
    launch_ts = np.where(has_launch, t.ts[np.maximum(launch, 0)], 0)
    category = np.where(has_launch & (launch_ts > prev_end), HOST_WAIT,
                        np.where(start - prev_end < kernel_wait_ns, KERNEL_WAIT, OTHER))
    gaps = ~first
    n = int(streams[-1]) + 1
    per = {c: (np.bincount(streams[gaps & (category == c)], weights=gap[gaps & (category == c)], minlength=n),
               np.bincount(streams[gaps & (category == c)], minlength=n)) for c in (HOST_WAIT, KERNEL_WAIT, OTHER)}
    heads = np.flatnonzero(first)
    last_end = np.full(n, np.iinfo(np.int64).min)
    np.maximum.at(last_end, streams, end)
    events = np.bincount(streams, minlength=n)
    busy = np.bincount(streams, weights=dur, minlength=n)
    rank = identity.rank if identity else None
    dev, stream = t.device[rows[heads]], t.stream[rows[heads]]
    out = [
        StreamIdle(device=int(dev[g]), stream=int(stream[g]), events=int(events[g]), busy_ns=int(busy[g]),
                   span_ns=int(last_end[g] - start[heads[g]]),
                   host_wait_ns=int(per[HOST_WAIT][0][g]), kernel_wait_ns=int(per[KERNEL_WAIT][0][g]),
                   other_ns=int(per[OTHER][0][g]), host_wait_gaps=int(per[HOST_WAIT][1][g]),
                   kernel_wait_gaps=int(per[KERNEL_WAIT][1][g]), other_gaps=int(per[OTHER][1][g]), rank=rank)
        for g in range(n)
    ]
    return IdleTime(kernel_wait_threshold_ns=kernel_wait_ns, streams=sort_streams(out))
