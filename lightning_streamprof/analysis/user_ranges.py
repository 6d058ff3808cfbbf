"""GPU time per ``record_function`` range: Lightning's ``[pl][profile]...`` actions and ``[LightningModule]...`` /
``[Callback]...`` hooks, ``Optimizer.step#...``, ``[pl][module]...`` (HTA's ``get_gpu_user_annotation_breakdown`` and
``get_gpu_kernels_with_user_annotations``, and the launch-based time HTA has not).

**By launch** (ours): a device event belongs to a range when its launch call (correlation id) starts inside the
range on the range's thread: CUDA-graph replays (every kernel of a graph shares its launch's correlation id) and
work on side streams count like any kernel. Launches from a thread that has no range at all (PyTorch's autograd
engine threads, which run ``backward``) belong to the ranges of the training thread open at that moment. Each name
gets the device time of every instance, nested ranges included (``kernel_ns``, ``device_ns``), and the time for
which it is the innermost range (``self_*``); the self times and the time launched outside every range add up to
all the trace's linked device time. Steps (``ProfilerStep#N``) are not ranges here: they are the step table's.

**HTA's** ``get_gpu_user_annotation_breakdown`` sums the durations of each range's GPU-side copies
(``gpu_user_annotation`` events, which Kineto writes for some ranges only: from the first to the last device event
launched inside, per stream) by name: ``gpu_span_*``. ``get_gpu_kernels_with_user_annotations`` gives each device
event the innermost GPU-side copy on its stream that it overlaps; here the copy that contains its start, which is
the same for the nested copies Kineto writes: ``gpu_overlap_device_ns``.
"""

from __future__ import annotations

import numpy as np

from lightning_streamprof import names
from lightning_streamprof.names import hook_label  # noqa: F401  (re-exported: the analyses' name for it)
from lightning_streamprof.analysis._links import Nesting, group
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.results.hta import AnnotationTime, AnnotationTimes, sort_annotations
from lightning_streamprof.trace.table import Kind

def _ranges(ctx: TraceContext, kind: Kind) -> np.ndarray:
    rows = ctx.table.select(kind)
    return rows[~ctx.mask(rows, names.is_step)]


def _nesting(ctx: TraceContext, rows: np.ndarray) -> Nesting:
    start = ctx.table.ts[rows]
    return Nesting(start, start + ctx.table.dur[rows], ctx.thread_keys(rows))


def _nested_in_same_name(ctx: TraceContext, rows: np.ndarray) -> np.ndarray:
    """Whether each range lies inside another range of its name on its thread (its time is that one's already)."""
    t = ctx.table
    _, thread = group(ctx.thread_keys(rows))
    _, name = group(t.name[rows])
    start = t.ts[rows]
    return Nesting(start, start + t.dur[rows], thread * (int(name.max(initial=0)) + 1) + name).parent >= 0


def _launch_owner(ctx: TraceContext, ranges: np.ndarray, nesting: Nesting, calls: np.ndarray) -> np.ndarray:
    """For each launch call, the innermost range (index into ``ranges``) it starts in, with launches from threads
    without ranges falling back on the training thread's ranges."""
    t = ctx.table
    threads = ctx.thread_keys(calls)
    owner = nesting.enclosing(t.ts[calls], threads)
    training = ctx.thread_keys(ctx.step_marks)
    if training.size and ranges.size:
        rangeless = ~np.isin(threads, group(nesting.threads)[0])
        if rangeless.any():
            main = int(group(training)[0][0])
            owner[rangeless] = nesting.enclosing(t.ts[calls[rangeless]], np.full(int(rangeless.sum()), main))
    return owner


def _gpu_spans(ctx: TraceContext) -> tuple[dict[int, dict[str, float]], dict[int, int]]:
    """Per name code: HTA's GPU-side copy statistics, and the device time under the innermost copy."""
    t = ctx.table
    spans = _ranges(ctx, Kind.GPU_USER_ANNOTATION)
    stats: dict[int, dict[str, float]] = {}
    overlap: dict[int, int] = {}
    if spans.size == 0:
        return stats, overlap
    codes, g = group(t.name[spans])
    dur = t.dur[spans].astype(np.float64)
    n = codes.size
    mx, mn = np.full(n, -1, np.int64), np.full(n, np.iinfo(np.int64).max)
    np.maximum.at(mx, g, t.dur[spans])
    np.minimum.at(mn, g, t.dur[spans])
    calls, total, sq = np.bincount(g, minlength=n), np.bincount(g, dur, n), np.bincount(g, dur * dur, n)
    for i, c in enumerate(codes.tolist()):
        stats[c] = {"calls": int(calls[i]), "ns": int(total[i]), "max": int(mx[i]), "min": int(mn[i]),
                    "sq": float(sq[i])}
    dev = ctx.device_rows[t.correlation[ctx.device_rows] >= 0]
    inner = _nesting(ctx, spans).enclosing(t.ts[dev], ctx.thread_keys(dev))
    has = inner >= 0
    per = np.bincount(g[inner[has]], weights=t.dur[dev[has]], minlength=n)
    for i, c in enumerate(codes.tolist()):
        overlap[c] = int(per[i])
    return stats, overlap


def annotation_times(ctx: TraceContext, hooks: bool = False) -> AnnotationTimes:
    """Host and device time of every ``record_function`` range name (steps excepted); ``hooks``: of Lightning's
    actions and hooks alone (:func:`~lightning_streamprof.names.is_lightning_hook`), each device event going to the
    innermost hook that launched it (other ranges inside a hook, ``Optimizer.step#...`` or ``[pl][module]...``, are
    its own time), with no GPU-side copies."""
    t = ctx.table
    dev = ctx.device_rows
    dur = t.dur[dev]
    is_kernel = t.kind[dev] == Kind.KERNEL
    launch = ctx.device_launch
    linked = launch >= 0
    ranges = _ranges(ctx, Kind.USER_ANNOTATION)
    if hooks:
        ranges = ranges[ctx.mask(ranges, names.is_lightning_hook)]
    nesting = _nesting(ctx, ranges)
    owner = np.full(dev.size, -1, np.int64)
    owner[linked] = _launch_owner(ctx, ranges, nesting, launch[linked])
    inside = owner >= 0
    m = ranges.size

    def per_range(mask: np.ndarray) -> np.ndarray:
        return np.bincount(owner[mask], weights=dur[mask], minlength=m)

    self_device, self_kernel = per_range(inside), per_range(inside & is_kernel)
    self_count = np.bincount(owner[inside & is_kernel], minlength=m).astype(np.float64)
    device, kernel, count = (nesting.subtree_sums(v) for v in (self_device, self_kernel, self_count))
    codes, g = group(t.name[ranges])
    outer = ~_nested_in_same_name(ctx, ranges)
    n = codes.size

    def by_name(values: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        if mask is None:
            return np.bincount(g, weights=values, minlength=n)
        return np.bincount(g[mask], weights=values[mask], minlength=n)

    cols = {"calls": np.bincount(g, minlength=n), "host_ns": by_name(t.dur[ranges].astype(np.float64), outer),
            "kernels": by_name(count, outer), "kernel_ns": by_name(kernel, outer), "device_ns": by_name(device, outer),
            "self_kernel_ns": by_name(self_kernel), "self_device_ns": by_name(self_device)}
    spans, overlap = ({}, {}) if hooks else _gpu_spans(ctx)
    rows = {c: {k: int(round(v[i])) for k, v in cols.items()} for i, c in enumerate(codes.tolist())}
    zero = dict.fromkeys(cols, 0)
    out = []
    for c in sorted(set(rows) | set(spans)):
        span = spans.get(c, {})
        out.append(AnnotationTime(name=t.names[c], **rows.get(c, zero), gpu_span_calls=int(span.get("calls", 0)),
                                  gpu_span_ns=int(span.get("ns", 0)), gpu_span_max_ns=int(span.get("max", 0)),
                                  gpu_span_min_ns=int(span.get("min", 0)), gpu_span_sq_ns2=float(span.get("sq", 0.0)),
                                  gpu_overlap_device_ns=overlap.get(c, 0)))
    outside = linked & ~inside
    return AnnotationTimes(
        rows=sort_annotations(out), device_ns=int(dur.sum()), kernel_ns=int(dur[is_kernel].sum()),
        outside_device_ns=int(dur[outside].sum()), outside_kernel_ns=int(dur[outside & is_kernel].sum()),
        unlinked_device_ns=int(dur[~linked].sum()),
    )
