"""Memory by operator and per device (``profile_memory=True`` traces), as torch-tb-profiler defines it.

Each ``[memory]`` event belongs to the innermost CPU operator around it on the same thread. Per operator
name and device: Size Increase = Σ bytes (allocations minus frees), Allocation Size = Σ allocated bytes,
Allocations = their count; the plain variants include child operators, the ``self_`` ones do not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lightning_streamprof.analysis._links import group, thread_keys
from lightning_streamprof.analysis.operators import operator_nesting
from lightning_streamprof.trace.reader import EventTable, Kind


@dataclass(frozen=True)
class OperatorMemory:
    """Memory of one operator name on one device (bytes)."""

    name: str
    device: str
    calls: int
    self_increase_bytes: int
    self_allocation_bytes: int
    self_allocations: int
    increase_bytes: int
    allocation_bytes: int
    allocations: int


@dataclass(frozen=True)
class DeviceMemory:
    """Peaks (``Total Allocated``/``Total Reserved``) and a downsampled curve ``(ts_ns, allocated, reserved)``."""

    device: str
    device_id: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    curve: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True)
class MemoryStats:
    devices: tuple[DeviceMemory, ...]
    operators: tuple[OperatorMemory, ...]

    def peak(self, device_id: int) -> int | None:
        """Peak ``Total Allocated`` of a CUDA device, or None without memory events for it."""
        gpus = (d for d in self.devices if d.device_id == device_id and d.device != "CPU")
        return next((d.peak_allocated_bytes for d in gpus), None)


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
    return tuple((int(ts[i]), int(allocated[i]), int(reserved[i])) for i in keep)


def _devices(dtype: np.ndarray, dev: np.ndarray) -> list[tuple[int, int]]:
    keys, _ = group(dtype * (1 << 20) + (dev + 1))
    return [(int(k >> 20), int(k & ((1 << 20) - 1)) - 1) for k in keys]


def _is_operator(name: str) -> bool:
    return not (name.startswith("ProfilerStep#") or name.startswith("Optimizer."))


def memory_stats(table: EventTable, max_points: int = 300) -> MemoryStats:
    """Per-device peaks and curve, and per-operator memory."""
    rows = table.select(Kind.MEMORY)
    rows = rows[table.total_allocated[rows] >= 0]
    if rows.size == 0:
        return MemoryStats((), ())
    rows = rows[np.argsort(table.ts[rows], kind="stable")]
    dtype, dev = table.device_type[rows].astype(np.int64), table.device[rows].astype(np.int64)
    devices = []
    for t, d in _devices(dtype, dev):
        sel = rows[(dtype == t) & (dev == d)]
        alloc, res = table.total_allocated[sel], table.total_reserved[sel]
        devices.append(
            DeviceMemory(_device_label(t, d), int(d), int(alloc.max()), int(res.max()),
                         downsample(table.ts[sel], alloc, res, max_points))
        )
    return MemoryStats(tuple(devices), tuple(_operator_memory(table, rows)))


def _operator_memory(table: EventTable, rows: np.ndarray) -> list[OperatorMemory]:
    ops, nest = operator_nesting(table)
    if ops.size == 0:
        return []
    owner = nest.enclosing(table.ts[rows], thread_keys(table, rows))
    hit = owner >= 0
    rows, owner = rows[hit], owner[hit]
    nbytes = table.bytes[rows].astype(np.float64)
    is_alloc = nbytes > 0
    dtype, dev = table.device_type[rows].astype(np.int64), table.device[rows].astype(np.int64)
    op_names = table.name[ops]
    calls = np.bincount(op_names, minlength=len(table.names))
    is_op = np.fromiter((_is_operator(n) for n in table.names), bool, len(table.names))
    out = []
    for t, d in _devices(dtype, dev):
        label = _device_label(t, d)
        mask = (dtype == t) & (dev == d)
        cols = []
        for values in (nbytes, np.where(is_alloc, nbytes, 0.0), is_alloc.astype(np.float64)):
            self_v = np.zeros(ops.size)
            np.add.at(self_v, owner[mask], values[mask])
            cols.append((self_v, nest.subtree_sums(self_v)))
        by_name = [
            (np.bincount(op_names, weights=own, minlength=len(table.names)),
             np.bincount(op_names, weights=tree, minlength=len(table.names)))
            for own, tree in cols
        ]
        for code in np.flatnonzero(is_op & (calls > 0)).tolist():
            values = [int(round(v[code])) for pair in by_name for v in pair]
            if not any(values):
                continue
            (s_inc, t_inc, s_size, t_size, s_cnt, t_cnt) = values
            out.append(OperatorMemory(table.names[code], label, int(calls[code]), s_inc, s_size, s_cnt,
                                      t_inc, t_size, t_cnt))
    out.sort(key=lambda m: (-m.allocation_bytes, -m.increase_bytes, m.device, m.name))
    return out
