"""Per-operator host and device time, optionally grouped by input shapes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lightning_streamprof.analysis._links import DEVICE_KINDS, Nesting, group, launching_ops, thread_keys
from lightning_streamprof.trace.reader import EventTable, Kind


@dataclass(frozen=True)
class OperatorStats:
    """Totals for one operator name (and input shapes, when grouped by them). Times in nanoseconds.

    ``host_self_ns`` excludes child operators on the same thread; ``device_self_ns`` is the time of the
    kernels, copies and memsets that the operator itself launched (linked by Kineto's ``External id``);
    ``device_total_ns`` adds those launched by its child operators.
    """

    name: str
    calls: int
    host_total_ns: int
    host_self_ns: int
    device_self_ns: int
    device_total_ns: int = 0
    input_shapes: str | None = None


def self_times(starts: np.ndarray, ends: np.ndarray, threads: np.ndarray) -> np.ndarray:
    """Each interval's length minus its direct children's lengths (nesting per thread)."""
    return Nesting(starts, ends, threads).self_lengths()


def operator_nesting(table: EventTable) -> tuple[np.ndarray, Nesting]:
    """CPU operator rows and their per-thread nesting."""
    ops = table.select(Kind.CPU_OP)
    starts = table.ts[ops]
    return ops, Nesting(starts, starts + table.dur[ops], thread_keys(table, ops))


def device_self_times(table: EventTable, ops: np.ndarray) -> np.ndarray:
    """Per operator row in ``ops``: time of the device work it launched itself."""
    out = np.zeros(ops.size, np.int64)
    dev = table.select(*DEVICE_KINDS)
    owner = launching_ops(table, dev)
    hit = owner >= 0
    if hit.any():
        pos = np.searchsorted(ops, owner[hit])
        np.add.at(out, pos, table.dur[dev[hit]])
    return out


def operator_stats(table: EventTable, by_shapes: bool = False) -> list[OperatorStats]:
    """Statistics for every CPU operator name (and input shapes with ``by_shapes``), by host + device self time."""
    ops, nest = operator_nesting(table)
    if ops.size == 0:
        return []
    host_self = nest.self_lengths()
    dev_self = device_self_times(table, ops)
    dev_total = nest.subtree_sums(dev_self)
    names = table.name[ops].astype(np.int64)
    shapes = table.shapes[ops].astype(np.int64) if by_shapes else np.full(ops.size, -1, np.int64)
    combined, groups = group(names * (len(table.names) + 1) + (shapes + 1))
    keys = np.stack([combined // (len(table.names) + 1), combined % (len(table.names) + 1) - 1], axis=1)
    n = keys.shape[0]
    calls = np.bincount(groups, minlength=n)
    sums = [np.bincount(groups, weights=w, minlength=n) for w in (table.dur[ops], host_self, dev_self, dev_total)]
    stats = [
        OperatorStats(
            table.names[keys[g, 0]],
            int(calls[g]),
            *(int(round(s[g])) for s in sums[:3]),
            device_total_ns=int(round(sums[3][g])),
            input_shapes=table.names[keys[g, 1]] if keys[g, 1] >= 0 else None,
        )
        for g in range(n)
    ]
    stats.sort(key=lambda s: (-(s.host_self_ns + s.device_self_ns), s.name, s.input_shapes or ""))
    return stats


def top_operators(table: EventTable, limit: int = 10, by_shapes: bool = False) -> list[OperatorStats]:
    """The ``limit`` operators with the most host + device self time."""
    return operator_stats(table, by_shapes)[:limit]


def source_lines(table: EventTable, limit: int = 20):
    """Operator time by innermost user-code Python frame; see :func:`.source.source_lines`."""
    from lightning_streamprof.analysis.source import source_lines as _source_lines

    return _source_lines(table, limit)
