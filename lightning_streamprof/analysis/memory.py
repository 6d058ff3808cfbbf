"""Memory by operator and per device (``profile_memory=True`` traces), as torch-tb-profiler defines it.

Each ``[memory]`` event belongs to the innermost CPU operator around it on the same thread. Per operator
name and device: Size Increase = Σ bytes (allocations minus frees), Allocation Size = Σ allocated bytes,
Allocations = their count; the plain variants include child operators, the ``self_`` ones do not.
Per device: the peak of ``Total Allocated`` / ``Total Reserved``; events of older traces that carry no totals
give the allocated curve as the running sum of their ``Bytes`` (reserved unknown).
"""

from __future__ import annotations

import numpy as np

from lightning_streamprof import names
from lightning_streamprof.analysis._links import group
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.analysis.gpu import device_properties
from lightning_streamprof.results import (
    DeviceMemory,
    MemoryStats,
    OperatorMemory,
    TraceIdentity,
    sort_memory_operators,
)
from lightning_streamprof.trace.table import Kind


def _device_label(device_type: int, device: int) -> str:
    return "CPU" if device_type == 0 else f"GPU{device}" if device_type == 1 else f"device{device_type}:{device}"


def downsample(ts: np.ndarray, allocated: np.ndarray, reserved: np.ndarray, max_points: int = 300):
    """At most ``max_points`` points: the first, the last and the highest of each of equal-count buckets."""
    n = ts.size
    if n <= max_points:
        keep = np.arange(n)
    else:
        buckets = np.arange(n) * (max_points - 2) // n
        order = np.lexsort((-allocated, buckets))
        first_in_bucket = np.ones(n, bool)
        first_in_bucket[1:] = buckets[order][1:] != buckets[order][:-1]
        keep = np.unique(np.concatenate([[0, n - 1], order[first_in_bucket]]))
    return [(int(ts[i]), int(allocated[i]), int(reserved[i])) for i in keep]


def _devices(dtype: np.ndarray, dev: np.ndarray) -> list[tuple[int, int]]:
    keys, _ = group(dtype * (1 << 20) + (dev + 1))
    return [(int(k >> 20), int(k & ((1 << 20) - 1)) - 1) for k in keys]


def memory_stats(ctx: TraceContext, identity: TraceIdentity | None = None, max_points: int = 300) -> MemoryStats:
    """Per-device peaks and curve, and per-operator memory."""
    t = ctx.table
    rows = t.select(Kind.MEMORY)
    if rows.size == 0:
        return MemoryStats()
    rows = rows[np.argsort(t.ts[rows], kind="stable")]
    dtype, dev = t.device_type[rows].astype(np.int64), t.device[rows].astype(np.int64)
    props = device_properties(t)
    devices = []
    for kind, d in _devices(dtype, dev):
        sel = rows[(dtype == kind) & (dev == d)]
        alloc, res = t.total_allocated[sel], t.total_reserved[sel]
        if (alloc < 0).any():  # no totals recorded: the running sum of the events' bytes
            alloc = np.cumsum(t.bytes[sel])
        peak_reserved = int(res.max()) if (res >= 0).all() else None
        if peak_reserved is None:
            res = np.zeros(sel.size, np.int64)
        label = _device_label(kind, d)
        devices.append(DeviceMemory(
            device=label, device_id=int(d), peak_allocated_bytes=int(alloc.max()), peak_reserved_bytes=peak_reserved,
            curve=downsample(t.ts[sel], alloc, res, max_points),
            total_memory=props.get(int(d), {}).get("totalGlobalMem") if label != "CPU" else None,
            rank=identity.rank if identity else None, window=identity.window if identity else None,
        ))
    return MemoryStats(devices=devices, operators=_operator_memory(ctx, rows))


def _operator_memory(ctx: TraceContext, rows: np.ndarray) -> list[OperatorMemory]:
    t = ctx.table
    ops, nest = ctx.ops, ctx.op_nesting
    if ops.size == 0:
        return []
    owner = nest.enclosing(t.ts[rows], ctx.thread_keys(rows))
    hit = owner >= 0
    rows, owner = rows[hit], owner[hit]
    nbytes = t.bytes[rows].astype(np.float64)
    is_alloc = nbytes > 0
    dtype, dev = t.device_type[rows].astype(np.int64), t.device[rows].astype(np.int64)
    op_names = t.name[ops]
    calls = np.bincount(op_names, minlength=len(t.names))
    listed = ctx.flags(names.is_operator)
    out = []
    for kind, d in _devices(dtype, dev):
        label = _device_label(kind, d)
        mask = (dtype == kind) & (dev == d)
        cols = []
        for values in (nbytes, np.where(is_alloc, nbytes, 0.0), is_alloc.astype(np.float64)):
            self_v = np.zeros(ops.size)
            np.add.at(self_v, owner[mask], values[mask])
            cols.append((self_v, nest.subtree_sums(self_v)))
        by_name = [
            (np.bincount(op_names, weights=own, minlength=len(t.names)),
             np.bincount(op_names, weights=tree, minlength=len(t.names)))
            for own, tree in cols
        ]
        for code in np.flatnonzero(listed & (calls > 0)).tolist():
            values = [int(round(v[code])) for pair in by_name for v in pair]
            if not any(values):
                continue
            (s_inc, t_inc, s_size, t_size, s_cnt, t_cnt) = values
            out.append(OperatorMemory(
                name=t.names[code], device=label, calls=int(calls[code]), self_increase_bytes=s_inc,
                self_allocation_bytes=s_size, self_allocations=s_cnt, increase_bytes=t_inc, allocation_bytes=t_size,
                allocations=t_cnt,
            ))
    return sort_memory_operators(out)
