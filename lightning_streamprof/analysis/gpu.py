"""Per-device GPU utilization, Est. SM efficiency and Est. achieved occupancy (torch-tb-profiler's definitions).

Over the span ``[first step start, last step end]``:

- utilization = merged kernel busy time / span (memcpy and memset do not count);
- SM efficiency = Σ over time slices of ``min(1, Σ blocks-per-SM of the kernels running)`` × slice / span;
- achieved occupancy = Σ occupancy × kernel time / Σ kernel time (kernels clipped to the span).

The timeline uses torch-tb-profiler's buckets: a power-of-ten number of microseconds giving at most
``max_bins`` buckets over the whole trace, the last bucket taking the remainder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from lightning_streamprof.analysis import intervals as iv
from lightning_streamprof.trace.reader import EventTable, Kind


@dataclass(frozen=True)
class GpuTimeline:
    """Bucketed metrics: ``starts_ns[i]`` is the start of bucket ``i``; the last ends at ``end_ns``."""

    starts_ns: tuple[int, ...]
    end_ns: int
    bucket_ns: int
    utilization: tuple[float, ...]
    sm_efficiency: tuple[float, ...]


@dataclass(frozen=True)
class GpuMetrics:
    """Metrics of one device (fractions 0..1; None where the trace has no data for it)."""

    device: int
    utilization: float
    sm_efficiency: float | None
    achieved_occupancy: float | None
    kernel_ns: int
    span_ns: int
    name: str | None = None
    num_sms: int | None = None
    total_memory: int | None = None
    timeline: GpuTimeline | None = None


def device_properties(table: EventTable) -> dict[int, dict[str, Any]]:
    """``deviceProperties`` of the trace keyed by device id."""
    props = table.metadata.get("deviceProperties") or []
    out: dict[int, dict[str, Any]] = {}
    for i, p in enumerate(props):
        if isinstance(p, dict):
            out[int(p.get("id", i))] = p
    return out


def sm_efficiency_ranges(starts: np.ndarray, ends: np.ndarray, blocks: np.ndarray) -> tuple[np.ndarray, ...]:
    """Disjoint slices ``(start, end, min(1, Σ blocks per SM))`` where at least one kernel with blocks runs."""
    keep = (blocks > 0) & (ends > starts)
    starts, ends, blocks = starts[keep], ends[keep], blocks[keep].astype(np.float64)
    if starts.size == 0:
        z = np.zeros(0, np.int64)
        return z, z, np.zeros(0)
    times = np.concatenate([starts, ends])
    order = np.argsort(times, kind="stable")
    times = times[order]
    level = np.cumsum(np.concatenate([blocks, -blocks])[order])[:-1]
    active = np.cumsum(np.concatenate([np.ones(starts.size, np.int64), -np.ones(starts.size, np.int64)])[order])[:-1]
    keep = (active > 0) & (times[1:] > times[:-1])
    return times[:-1][keep], times[1:][keep], np.minimum(np.maximum(level[keep], 0.0), 1.0)


def _buckets(start: int, end: int, max_bins: int) -> tuple[np.ndarray, int]:
    span_us = (end - start) / 1000.0
    size_us = 1
    while span_us / size_us > max_bins:
        size_us *= 10
    n = max(int(span_us / size_us), 1)
    return start + np.arange(n, dtype=np.int64) * size_us * 1000, size_us * 1000


def _ratio(a: float, b: float) -> float:
    return float(a) / float(b) if b > 0 else 0.0


def gpu_metrics(
    table: EventTable, span: tuple[int, int] | None = None, *, timeline: bool = True, max_bins: int = 100
) -> list[GpuMetrics]:
    """Metrics of every device that ran a kernel, over ``span`` (default: all steps, see :mod:`.steps`)."""
    from lightning_streamprof.analysis.steps import find_steps

    kernels = table.select(Kind.KERNEL)
    if kernels.size == 0:
        return []
    if span is None:
        steps = find_steps(table)
        span = (steps[0].start_ns, steps[-1].end_ns) if steps else (0, 0)
    lo, hi = int(span[0]), int(span[1])
    span_ns = hi - lo
    valid = np.flatnonzero(table.kind != Kind.MEMORY)
    trace_lo = int(table.ts[valid].min())
    trace_hi = int((table.ts[valid] + table.dur[valid]).max())
    props = device_properties(table)
    out = []
    for device in np.unique(table.device[kernels]).tolist():
        rows = kernels[table.device[kernels] == device]
        ks, ke = table.ts[rows], table.ts[rows] + table.dur[rows]
        busy = iv.merge(ks, ke)
        busy_in = int(iv.integrate(*busy, None, np.array([lo]), np.array([hi]))[0])
        blocks = table.blocks_per_sm[rows]
        has_blocks = ~np.isnan(blocks)
        sm = sm_efficiency_ranges(ks[has_blocks], ke[has_blocks], blocks[has_blocks])
        sm_eff = None
        if sm[0].size and span_ns > 0:
            sm_eff = float(iv.integrate(sm[0], sm[1], sm[2], np.array([lo]), np.array([hi]))[0]) / span_ns
        occ = table.occupancy[rows].astype(np.float64)
        clipped = np.clip(np.minimum(ke, hi) - np.maximum(ks, lo), 0, None)
        has_occ = ~np.isnan(occ) & (occ >= 0) & (clipped > 0)
        weight = clipped[has_occ].sum()
        occupancy = float((occ[has_occ] * clipped[has_occ]).sum() / weight) if weight > 0 else None
        line = None
        if timeline and trace_hi > trace_lo:
            starts, size = _buckets(trace_lo, trace_hi, max_bins)
            ends = np.append(starts[1:], trace_hi)
            util = iv.integrate(*busy, None, starts, ends) / (ends - starts)
            sm_line = iv.integrate(sm[0], sm[1], sm[2], starts, ends) / (ends - starts)
            line = GpuTimeline(
                tuple(int(s) for s in starts), trace_hi, int(size),
                tuple(float(u) for u in util), tuple(float(s) for s in sm_line),
            )
        p = props.get(int(device), {})
        out.append(
            GpuMetrics(
                device=int(device),
                utilization=_ratio(busy_in, span_ns),
                sm_efficiency=sm_eff,
                achieved_occupancy=occupancy,
                kernel_ns=busy_in,
                span_ns=span_ns,
                name=p.get("name"),
                num_sms=p.get("numSms"),
                total_memory=p.get("totalGlobalMem"),
                timeline=line,
            )
        )
    return out
