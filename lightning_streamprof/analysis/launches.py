"""Kernel-launch statistics (HTA's ``get_cuda_kernel_launch_stats``) and the delay from an operator to its kernels
(HTA's ``get_aten_op_kernels_and_delay``).

**Launches.** Each device event (kernel, copy, set) is paired with the runtime or driver call of its correlation id;
per call name: the calls' duration (CPU), the device events' (GPU) and the launch delay, device start − call end,
negative counted as 0. With HTA's cut-offs: *short* launches run a device event shorter than the call, the call
being at most ``runtime_cutoff_ns`` (50 µs); *runtime outliers* are calls longer than that; *delay outliers* wait
more than ``launch_delay_cutoff_ns`` (100 µs). HTA pairs only ``cudaLaunchKernel``, ``cudaLaunchKernelExC``,
``cudaMemcpyAsync`` and ``cudaMemsetAsync``; here every correlated call counts (``cuLaunchKernel``, synchronous
copies, HIP's launches), one row per name, so HTA's numbers are the sum of its four rows. CUDA-graph launches are
left out (one call replays many kernels: its delay to each says little).

**Operator delay.** Each kernel launch call (CUDA's or HIP's, graphs excepted) is given the innermost ``aten::``
operator on its thread that contains the whole call; per operator instance, its kernels in launch order form its
kernel sequence, and its first launch gives the *launch delay* (operator start to that call's start) and the
*runtime delay* (the call's start to its kernel's start). Instances are counted per (operator name, sequence) with
the delays summed. HTA looks for the enclosing operator on every thread, not only the launching one.
"""

from __future__ import annotations

import numpy as np

from lightning_streamprof.analysis._links import group
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.analysis.host import is_graph_launch, is_launch
from lightning_streamprof.analysis.sequences import sequence_groups
from lightning_streamprof.results.hta import (
    LAUNCH_DELAY_CUTOFF_NS,
    RUNTIME_CUTOFF_NS,
    LaunchName,
    LaunchStats,
    OperatorLaunch,
    sort_launches,
    sort_operator_launches,
)
from lightning_streamprof.trace.table import Kind

#: operator sequences kept per trace
LIMIT = 50


def launch_pairs(ctx: TraceContext) -> tuple[np.ndarray, np.ndarray]:
    """(device row, call row) of every device event with a launch call that is not a graph launch."""
    launch = ctx.device_launch
    linked = np.flatnonzero(launch >= 0)
    calls = launch[linked]
    keep = ~ctx.mask(calls, is_graph_launch)
    return ctx.device_rows[linked[keep]], calls[keep]


def _per_name(ctx: TraceContext, dev: np.ndarray, calls: np.ndarray, runtime_cutoff_ns: int,
              delay_cutoff_ns: int) -> list[LaunchName]:
    t = ctx.table
    if dev.size == 0:
        return []
    cpu, gpu = t.dur[calls], t.dur[dev]
    delay = np.maximum(t.ts[dev] - (t.ts[calls] + cpu), 0)
    codes, g = group(t.name[calls])
    n = codes.size

    def total(values: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        if mask is None:
            return np.bincount(g, weights=values, minlength=n)
        return np.bincount(g[mask], weights=values[mask], minlength=n)

    def count(mask: np.ndarray) -> np.ndarray:
        return np.bincount(g[mask], minlength=n)

    def peak(values: np.ndarray) -> np.ndarray:
        out = np.zeros(n, np.int64)
        np.maximum.at(out, g, values)
        return out

    short = (cpu <= runtime_cutoff_ns) & (gpu < cpu)
    slow = cpu > runtime_cutoff_ns
    late = delay > delay_cutoff_ns
    cols = {
        "launches": np.bincount(g, minlength=n), "cpu_ns": total(cpu), "gpu_ns": total(gpu), "delay_ns": total(delay),
        "max_cpu_ns": peak(cpu), "max_gpu_ns": peak(gpu), "max_delay_ns": peak(delay),
        "short": count(short), "short_gpu_ns": total(gpu, short), "short_cpu_ns": total(cpu, short),
        "runtime_outliers": count(slow), "runtime_outlier_ns": total(cpu, slow),
        "delay_outliers": count(late), "delay_outlier_ns": total(delay, late),
    }
    return sort_launches(LaunchName(name=t.names[codes[i]], **{k: int(v[i]) for k, v in cols.items()})
                         for i in range(n))


def innermost_aten(ctx: TraceContext, calls: np.ndarray) -> np.ndarray:
    """For each call, the innermost ``aten::`` operator on its thread containing the whole call (index into
    :attr:`TraceContext.ops`), or -1."""
    t = ctx.table
    ops = ctx.ops
    if ops.size == 0 or calls.size == 0:
        return np.full(calls.size, -1, np.int64)
    nesting = ctx.op_nesting
    aten = ctx.mask(ops, lambda name: name.startswith("aten::"))
    start, end = t.ts[calls], t.ts[calls] + t.dur[calls]
    cand = nesting.enclosing(start, ctx.thread_keys(calls))
    while True:
        live = cand >= 0
        bad = np.zeros(cand.size, bool)
        c = cand[live]
        bad[live] = ~aten[c] | (nesting.ends[c] < end[live])
        if not bad.any():
            return cand
        cand[bad] = nesting.parent[cand[bad]]


def _operator_delays(ctx: TraceContext, dev: np.ndarray, calls: np.ndarray, limit: int
                     ) -> tuple[list[OperatorLaunch], bool]:
    t = ctx.table
    kernel = (t.kind[dev] == Kind.KERNEL) & ctx.mask(calls, is_launch)
    dev, calls = dev[kernel], calls[kernel]
    op = innermost_aten(ctx, calls)
    inside = op >= 0
    dev, calls, op = dev[inside], calls[inside], op[inside]
    if dev.size == 0:
        return [], False
    order = np.lexsort((t.ts[dev], t.ts[calls], op))
    dev, calls, op = dev[order], calls[order], op[order]
    op_rows = ctx.ops[op]
    heads, groups, first = sequence_groups(op, t.name[dev], t.name[op_rows])
    n = first.size
    launch_delay = t.ts[calls[heads]] - t.ts[op_rows[heads]]
    runtime_delay = t.ts[dev[heads]] - t.ts[calls[heads]]
    count = np.bincount(groups, minlength=n)
    sums = (np.bincount(groups, weights=launch_delay, minlength=n), np.bincount(groups, weights=runtime_delay,
                                                                                minlength=n))
    lengths = np.diff(np.r_[heads, dev.size])
    best = np.lexsort((-sums[0], -count))[:limit]
    rows = []
    for g in best.tolist():
        i = int(first[g])
        members = dev[heads[i]:heads[i] + lengths[i]]
        rows.append(OperatorLaunch(operator=t.names[t.name[op_rows[heads[i]]]],
                                   kernels=[t.names[c] for c in t.name[members].tolist()], count=int(count[g]),
                                   launch_delay_ns=int(sums[0][g]), runtime_delay_ns=int(sums[1][g])))
    return sort_operator_launches(rows), n > limit


def launch_stats(ctx: TraceContext, *, runtime_cutoff_ns: int = RUNTIME_CUTOFF_NS,
                 launch_delay_cutoff_ns: int = LAUNCH_DELAY_CUTOFF_NS, limit: int = LIMIT) -> LaunchStats:
    """Launch statistics per call name and launch delays per operator and kernel sequence."""
    dev, calls = launch_pairs(ctx)
    operators, truncated = _operator_delays(ctx, dev, calls, limit)
    return LaunchStats(runtime_cutoff_ns=runtime_cutoff_ns, launch_delay_cutoff_ns=launch_delay_cutoff_ns,
                       launches=_per_name(ctx, dev, calls, runtime_cutoff_ns, launch_delay_cutoff_ns),
                       operators=operators, truncated=truncated)
