"""Training steps (``ProfilerStep#N``) and the per-step time breakdown.

A step's host span is its ``ProfilerStep#N`` range. Device work is linked to the runtime/driver call that
launched it (``correlation``); a step that launched device work ends when the last of it ends, and starts no
earlier than the previous step's end, as in torch-tb-profiler. The breakdown claims time in priority order
kernel > memcpy > memset > communication > runtime > dataloader > cpu_exec from what is still unclaimed;
``other`` is the rest, so the parts of a step sum to its duration.

``cpu_exec`` is CPU operator (``cpu_op``) time, as in torch-tb-profiler, which reads no other
``user_annotation`` ranges: time in Lightning's ``[pl][profile]`` hook ranges outside operators is ``other``.
DataLoader time also counts Lightning's ``[pl][profile]..._dataloader_next`` range.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lightning_streamprof.analysis import intervals as iv
from lightning_streamprof.analysis._links import DEVICE_KINDS, LAUNCH_KINDS, launches, launching_ops
from lightning_streamprof.trace.reader import EventTable, Kind

CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other")

_COMM_OP_PREFIXES = ("nccl:", "gloo:")


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


@dataclass(frozen=True)
class StepTimes:
    """A step and its time in each of :data:`CATEGORIES` (ns); ``parts`` sum to the step's duration."""

    step: Step
    parts: dict[str, int]


@dataclass(frozen=True)
class StepBreakdown:
    """Per-step breakdown and the mean over steps (ns)."""

    steps: tuple[StepTimes, ...]
    mean_ns: dict[str, float]
    mean_step_ns: float

    @property
    def count(self) -> int:
        return len(self.steps)


def is_dataloader(name: str) -> bool:
    """PyTorch's DataLoader ranges, as torch-tb-profiler reads them: ``enumerate(DataLoader)#...__next__``."""
    return (name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__")) or name.startswith(
        "enumerate(DataPipe)#"
    )


def is_lightning_fetch(name: str) -> bool:
    """Lightning's batch fetch range, recorded by StreamProfiler: the DataLoader signal of last resort."""
    return name.startswith("[pl][profile]") and name.endswith("_dataloader_next")


def is_step(name: str) -> bool:
    return name.startswith("ProfilerStep#")


def name_mask(table: EventTable, rows: np.ndarray, predicate) -> np.ndarray:
    """``predicate(name)`` evaluated once per distinct name, for each row."""
    flags = np.fromiter((bool(predicate(n)) for n in table.names), bool, len(table.names))
    return flags[table.name[rows]] if rows.size else np.zeros(0, bool)


def communication_kernels(table: EventTable, kernels: np.ndarray) -> np.ndarray:
    """Mask of collective kernels: names starting with ``nccl`` or launched by a ``nccl:``/``gloo:`` operator."""
    mask = name_mask(table, kernels, lambda n: n.lower().startswith("nccl"))
    ops = launching_ops(table, kernels)
    has = ops >= 0
    mask[has] |= name_mask(table, ops[has], lambda n: n.startswith(_COMM_OP_PREFIXES))
    return mask


def _host_steps(table: EventTable) -> tuple[list[str], np.ndarray, np.ndarray]:
    rows = table.select(Kind.USER_ANNOTATION, Kind.CPU_OP)
    rows = rows[name_mask(table, rows, is_step)]
    if rows.size:
        rows = rows[np.argsort(table.ts[rows], kind="stable")]
        return [table.names[i] for i in table.name[rows]], table.ts[rows], table.ts[rows] + table.dur[rows]
    host = table.select(Kind.CPU_OP)
    if host.size == 0:
        host = np.flatnonzero(table.kind != Kind.MEMORY) if len(table) else host
    if host.size == 0:
        return [], np.zeros(0, np.int64), np.zeros(0, np.int64)
    start = int(table.ts[host].min())
    end = int((table.ts[host] + table.dur[host]).max())
    return ["whole trace"], np.array([start]), np.array([end])


def find_steps(table: EventTable) -> tuple[Step, ...]:
    """Steps in time order; a trace without ``ProfilerStep#N`` is one step over its host operators."""
    names, host_start, host_end = _host_steps(table)
    n = len(names)
    if n == 0:
        return ()
    dev = table.select(*DEVICE_KINDS)
    rt = launches(table, dev)
    linked = rt >= 0
    dev, rt = dev[linked], rt[linked]
    rt_start, rt_end = table.ts[rt], table.ts[rt] + table.dur[rt]
    k = np.searchsorted(host_start, rt_start, side="right") - 1
    inside = k >= 0
    inside[inside] = rt_end[inside] <= host_end[k[inside]]
    k_in = k[inside]
    dev_start = table.ts[dev]
    dev_end = dev_start + table.dur[dev]
    counts = np.bincount(k_in, minlength=n)
    first = np.full(n, np.iinfo(np.int64).max)
    last = np.full(n, np.iinfo(np.int64).min)
    np.minimum.at(first, k_in, dev_start[inside])
    np.maximum.at(last, k_in, dev_end[inside])

    starts, ends = host_start.astype(np.int64).copy(), host_end.astype(np.int64).copy()
    if counts.sum() > 0:
        prev = int(host_start[0])
        if counts[0] > 0:
            all_dev = table.select(*DEVICE_KINDS)
            matched = np.zeros(len(table), bool)
            matched[dev[inside]] = True
            other = all_dev[~matched[all_dev]]
            other_end = table.ts[other] + table.dur[other]
            before = other_end[other_end < first[0]]
            if before.size:
                prev = max(prev, int(before.max()))
        for i in range(n):
            start = max(prev, int(host_start[i]))
            end = max(int(host_end[i]), int(last[i])) if counts[i] else max(int(host_end[i]), start)
            starts[i], ends[i] = start, max(end, start)
            prev = int(ends[i])
    return tuple(
        Step(names[i], int(host_start[i]), int(host_end[i]), int(starts[i]), int(ends[i]), int(counts[i]))
        for i in range(n)
    )


def category_ranges(table: EventTable) -> dict[str, iv.Intervals]:
    """Merged time ranges of each category before claiming (``other`` excluded)."""

    def ranges(rows: np.ndarray) -> iv.Intervals:
        return iv.merge(table.ts[rows], table.ts[rows] + table.dur[rows])

    kernels = table.select(Kind.KERNEL)
    comm = communication_kernels(table, kernels)
    host = table.select(Kind.CPU_OP, Kind.USER_ANNOTATION)
    loader = name_mask(table, host, is_dataloader)
    if not loader.any():  # an iterable that is not a torch DataLoader: fall back to Lightning's fetch range
        loader = name_mask(table, host, is_lightning_fetch)
    host_comm = name_mask(table, host, lambda n: n.startswith(_COMM_OP_PREFIXES))
    steps = name_mask(table, host, is_step)
    operators = table.kind[host] == Kind.CPU_OP
    return {
        "kernel": ranges(kernels[~comm]),
        "memcpy": ranges(table.select(Kind.MEMCPY)),
        "memset": ranges(table.select(Kind.MEMSET)),
        "communication": ranges(np.concatenate([kernels[comm], host[host_comm]])),
        "runtime": ranges(table.select(*LAUNCH_KINDS)),
        "dataloader": ranges(host[loader]),
        "cpu_exec": ranges(host[operators & ~(loader | host_comm | steps)]),
    }


def step_breakdown(table: EventTable, steps: tuple[Step, ...] | None = None) -> StepBreakdown:
    """Time of each category in each step, claimed in priority order; the parts sum to the step time."""
    steps = find_steps(table) if steps is None else steps
    if not steps:
        return StepBreakdown((), {c: 0.0 for c in CATEGORIES}, 0.0)
    lo = np.array([s.start_ns for s in steps], np.int64)
    hi = np.array([s.end_ns for s in steps], np.int64)
    slots = iv.merge(lo, hi)
    per_cat: dict[str, np.ndarray] = {}
    for cat, ranges in category_ranges(table).items():
        claimed = iv.intersect(slots, ranges)
        per_cat[cat] = iv.integrate(*claimed, None, lo, hi)
        slots = iv.subtract(slots, claimed)
    per_cat["other"] = iv.integrate(*slots, None, lo, hi)
    rows = tuple(StepTimes(s, {c: int(per_cat[c][i]) for c in CATEGORIES}) for i, s in enumerate(steps))
    mean = {c: float(per_cat[c].mean()) for c in CATEGORIES}
    return StepBreakdown(rows, mean, float((hi - lo).mean()))
