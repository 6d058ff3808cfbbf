"""Per-operator host and device time."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lightning_streamprof.trace.reader import EventTable, Kind


@dataclass(frozen=True)
class OperatorStats:
    """Totals for one operator name. Times in nanoseconds.

    ``host_self_ns`` excludes child operators on the same thread; ``device_self_ns`` is the time of the
    kernels, copies and memsets that the operator itself launched (linked by Kineto's ``External id``).
    """

    name: str
    calls: int
    host_total_ns: int
    host_self_ns: int
    device_self_ns: int


def self_times(starts: np.ndarray, ends: np.ndarray, threads: np.ndarray) -> np.ndarray:
    """Each interval's length minus its direct children's lengths (nesting per thread)."""
    out = ends - starts
    order = np.lexsort((-(ends - starts), starts, threads))
    stack: list[int] = []
    last_thread = None
    for i in order.tolist():
        thread = threads[i]
        if thread != last_thread:
            stack.clear()
            last_thread = thread
        start = starts[i]
        while stack and ends[stack[-1]] <= start:
            stack.pop()
        if stack:
            out[stack[-1]] -= ends[i] - starts[i]
        stack.append(i)
    return out


def operator_stats(table: EventTable) -> list[OperatorStats]:
    """Statistics for every CPU operator name, sorted by host self time, largest first."""
    ops = table.select(Kind.CPU_OP)
    if ops.size == 0:
        return []
    starts = table.ts[ops]
    ends = starts + table.dur[ops]
    threads = table.pid[ops] * (1 << 32) + table.tid[ops]
    self_ns = self_times(starts, ends, threads)
    names = table.name[ops]
    n_names = len(table.names)
    calls = np.bincount(names, minlength=n_names)
    total = np.bincount(names, weights=table.dur[ops], minlength=n_names)
    host_self = np.bincount(names, weights=self_ns, minlength=n_names)

    device = np.zeros(n_names)
    dev_rows = np.flatnonzero(np.isin(table.kind, (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)) & (table.external_id >= 0))
    if dev_rows.size:
        op_ext = table.external_id[ops]
        valid = op_ext >= 0
        ext_sorted = np.argsort(op_ext[valid], kind="stable")
        keys = op_ext[valid][ext_sorted]
        owner = names[valid][ext_sorted]
        pos = np.searchsorted(keys, table.external_id[dev_rows])
        pos_ok = pos < keys.size
        hit = np.zeros(dev_rows.size, bool)
        hit[pos_ok] = keys[pos[pos_ok]] == table.external_id[dev_rows][pos_ok]
        np.add.at(device, owner[pos[hit]], table.dur[dev_rows][hit])

    used = np.flatnonzero(calls)
    stats = [
        OperatorStats(table.names[i], int(calls[i]), int(total[i]), int(host_self[i]), int(device[i])) for i in used
    ]
    stats.sort(key=lambda s: (-(s.host_self_ns + s.device_self_ns), s.name))
    return stats


def top_operators(table: EventTable, limit: int = 10) -> list[OperatorStats]:
    """The ``limit`` operators with the most host + device self time."""
    return operator_stats(table)[:limit]
