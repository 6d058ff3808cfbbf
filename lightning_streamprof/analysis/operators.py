"""Per-operator host and device time, optionally grouped by input shapes (torch-tb-profiler's operator view)."""

from __future__ import annotations

import numpy as np

from lightning_streamprof.analysis._links import group
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.results import OperatorStats, sort_operators


def operator_stats(ctx: TraceContext, by_shapes: bool = False) -> list[OperatorStats]:
    """Every operator name (and input shapes with ``by_shapes``), most host + device self time first.

    Steps, DataLoader and DataPipe ranges, optimizer ranges and data-parallel wrappers recorded as CPU
    operators (older traces) are not operators, as in torch-tb-profiler; they still nest the operators inside.
    """
    t = ctx.table
    listed = ctx.op_listed
    ops = ctx.ops[listed]
    if ops.size == 0:
        return []
    host_self = ctx.op_host_self[listed]
    dev_self = ctx.op_device_self
    dev_total = ctx.op_nesting.subtree_sums(dev_self)[listed]
    dev_self = dev_self[listed]
    width = len(t.names) + 1
    names = t.name[ops].astype(np.int64)
    shapes = t.shapes[ops].astype(np.int64) if by_shapes else np.full(ops.size, -1, np.int64)
    combined, groups = group(names * width + (shapes + 1))
    keys = np.stack([combined // width, combined % width - 1], axis=1)
    n = keys.shape[0]
    calls = np.bincount(groups, minlength=n)
    sums = [np.bincount(groups, weights=w, minlength=n) for w in (t.dur[ops], host_self, dev_self, dev_total)]
    return sort_operators(
        OperatorStats(
            name=t.names[keys[g, 0]],
            calls=int(calls[g]),
            host_total_ns=int(round(sums[0][g])),
            host_self_ns=int(round(sums[1][g])),
            device_self_ns=int(round(sums[2][g])),
            device_total_ns=int(round(sums[3][g])),
            input_shapes=t.names[keys[g, 1]] if keys[g, 1] >= 0 else None,
        )
        for g in range(n)
    )
