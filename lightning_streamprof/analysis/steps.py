"""Training steps (``ProfilerStep#N``) and the per-step time breakdown.

A step's host span is its ``ProfilerStep#N`` range. Device work is linked to the runtime/driver call that
launched it (``correlation``); a step that launched device work ends when the last of it ends, and starts no
earlier than the previous step's end, as in torch-tb-profiler. The breakdown claims time in priority order
kernel > memcpy > memset > communication > runtime > dataloader > cpu_exec from what is still unclaimed;
``other`` is the rest, so the parts of a step sum to its duration.

``cpu_exec`` is the time in host ranges, as torch-tb-profiler counts it: CPU operators and ``record_function``
ranges (``user_annotation``: Lightning's ``[pl][profile]`` actions, ``Optimizer.step``...), steps, data loading
and collectives excepted; their GPU-side copies (``gpu_user_annotation``) are not host time. DataLoader time
also counts Lightning's ``[pl][profile]..._dataloader_next`` range when the trace has no DataLoader range.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lightning_streamprof import names
from lightning_streamprof.analysis import intervals as iv
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.results import CATEGORIES, Steps, StepTimes, TraceIdentity
from lightning_streamprof.trace.table import Kind


@dataclass(frozen=True)
class Step:
    """One step. Times in ns; ``start_ns``/``end_ns`` include the device work the step launched."""

    name: str
    host_start_ns: int
    host_end_ns: int
    start_ns: int
    end_ns: int
    device_events: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def communication_kernels(ctx: TraceContext) -> np.ndarray:
    """Mask over kernels: names starting with ``nccl`` or launched by a ``nccl:``/``gloo:`` operator."""
    mask = ctx.mask(ctx.kernels, lambda n: n.lower().startswith("nccl"))
    ops = ctx.kernel_owner
    has = ops >= 0
    mask[has] |= ctx.mask(ops[has], names.is_communication)
    return mask


def _host_steps(ctx: TraceContext) -> tuple[list[str], np.ndarray, np.ndarray]:
    t = ctx.table
    rows = ctx.step_marks
    if rows.size:
        rows = rows[np.argsort(t.ts[rows], kind="stable")]
        return [t.names[i] for i in t.name[rows]], t.ts[rows], ctx.ends(rows)
    host = ctx.ops
    if host.size == 0:
        host = np.flatnonzero(t.kind != Kind.MEMORY) if len(t) else host
    if host.size == 0:
        return [], np.zeros(0, np.int64), np.zeros(0, np.int64)
    return ["whole trace"], np.array([int(t.ts[host].min())]), np.array([int(ctx.ends(host).max())])


def find_steps(ctx: TraceContext) -> tuple[Step, ...]:
    """Steps in time order; a trace without ``ProfilerStep#N`` is one step over its host operators."""
    t = ctx.table
    step_names, host_start, host_end = _host_steps(ctx)
    n = len(step_names)
    if n == 0:
        return ()
    linked = ctx.device_launch >= 0
    dev, rt = ctx.device_rows[linked], ctx.device_launch[linked]
    rt_start, rt_end = t.ts[rt], ctx.ends(rt)
    k = np.searchsorted(host_start, rt_start, side="right") - 1
    inside = k >= 0
    inside[inside] = rt_end[inside] <= host_end[k[inside]]
    k_in = k[inside]
    dev_start = t.ts[dev]
    dev_end = dev_start + t.dur[dev]
    counts = np.bincount(k_in, minlength=n)
    first = np.full(n, np.iinfo(np.int64).max)
    last = np.full(n, np.iinfo(np.int64).min)
    np.minimum.at(first, k_in, dev_start[inside])
    np.maximum.at(last, k_in, dev_end[inside])

    starts, ends = host_start.astype(np.int64).copy(), host_end.astype(np.int64).copy()
    if counts.sum() > 0:
        prev = int(host_start[0])
        if counts[0] > 0:  # device work of earlier steps still running delays the first step's device start
            matched = np.zeros(len(t), bool)
            matched[dev[inside]] = True
            other = ctx.device_rows[~matched[ctx.device_rows]]
            other_end = ctx.ends(other)
            before = other_end[other_end < first[0]]
            if before.size:
                prev = max(prev, int(before.max()))
        for i in range(n):
            start = max(prev, int(host_start[i]))
            end = max(int(host_end[i]), int(last[i])) if counts[i] else max(int(host_end[i]), start)
            starts[i], ends[i] = start, max(end, start)
            prev = int(ends[i])
    return tuple(
        Step(step_names[i], int(host_start[i]), int(host_end[i]), int(starts[i]), int(ends[i]), int(counts[i]))
        for i in range(n)
    )


def category_ranges(ctx: TraceContext) -> dict[str, iv.Intervals]:
    """Merged time ranges of each category before claiming (``other`` excluded)."""
    t = ctx.table

    def ranges(rows: np.ndarray) -> iv.Intervals:
        return iv.merge(t.ts[rows], t.ts[rows] + t.dur[rows])

    kernels = ctx.kernels
    comm = communication_kernels(ctx)
    host = ctx.host_ranges
    loader = ctx.mask(host, names.is_dataloader)
    if not loader.any():  # an iterable that is not a torch DataLoader: fall back to Lightning's fetch range
        loader = ctx.mask(host, names.is_lightning_fetch)
    host_comm = ctx.mask(host, names.is_communication)
    steps = ctx.mask(host, names.is_step)
    return {
        "kernel": ranges(kernels[~comm]),
        "memcpy": ranges(t.select(Kind.MEMCPY)),
        "memset": ranges(t.select(Kind.MEMSET)),
        "communication": ranges(np.concatenate([kernels[comm], host[host_comm]])),
        "runtime": ranges(ctx.runtime),
        "dataloader": ranges(host[loader]),
        "cpu_exec": ranges(host[~(loader | host_comm | steps)]),
    }


def step_breakdown(ctx: TraceContext, identity: TraceIdentity | None = None) -> Steps:
    """Time of each category in each step, claimed in priority order; the parts sum to the step time."""
    steps = ctx.steps
    if not steps:
        return Steps.of([])
    lo, hi = ctx.step_spans
    slots = iv.merge(lo, hi)
    per_cat: dict[str, np.ndarray] = {}
    for cat, ranges in category_ranges(ctx).items():
        claimed = iv.intersect(slots, ranges)
        per_cat[cat] = iv.integrate(*claimed, None, lo, hi)
        slots = iv.subtract(slots, claimed)
    per_cat["other"] = iv.integrate(*slots, None, lo, hi)
    rank = identity.rank if identity else None
    window = identity.window if identity else None
    return Steps.of([
        StepTimes(step=names.step_number(s.name), name=s.name, start_ns=s.start_ns, end_ns=s.end_ns,
                  host_start_ns=s.host_start_ns, host_end_ns=s.host_end_ns, device_events=s.device_events,
                  duration_ns=s.duration_ns, breakdown_ns={c: int(per_cat[c][i]) for c in CATEGORIES},
                  rank=rank, window=window)
        for i, s in enumerate(steps)
    ])
