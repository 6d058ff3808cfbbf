"""Per-device GPU utilization, Est. SM efficiency and Est. achieved occupancy (torch-tb-profiler's definitions).

Over the span ``[first step start, last step end]``:

- utilization = merged kernel busy time / span (memcpy and memset do not count);
- SM efficiency = Σ over time slices of ``min(1, Σ blocks-per-SM of the kernels running)`` × slice / span;
  None ("unknown") when no kernel with blocks per SM runs inside the span;
- achieved occupancy = Σ occupancy × kernel time / Σ kernel time (kernels clipped to the span).

The timeline covers the profiler's own span (Kineto's ``PyTorch Profiler (0)`` event; without one, the
trace's events) in torch-tb-profiler's buckets: a power-of-ten number of microseconds giving at most
``max_bins`` buckets, the last bucket taking the remainder.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lightning_streamprof import names
from lightning_streamprof.analysis import intervals as iv
from lightning_streamprof.analysis import vendors
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.results import GpuMetrics, GpuTimeline, TraceIdentity
from lightning_streamprof.trace.table import EventTable, Kind


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


def profiler_span(ctx: TraceContext) -> tuple[int, int] | None:
    """The profiler's own span (its ``PyTorch Profiler (0)`` event), else the span of the trace's events."""
    t = ctx.table
    spans = t.select(Kind.TRACE)
    spans = spans[ctx.mask(spans, lambda n: n == names.PROFILER_SPAN)]
    if spans.size:
        return int(t.ts[spans].min()), int(ctx.ends(spans).max())
    valid = np.flatnonzero(t.kind != Kind.MEMORY)
    return (int(t.ts[valid].min()), int(ctx.ends(valid).max())) if valid.size else None


def _timeline(busy: iv.Intervals, sm: tuple[np.ndarray, ...], span: tuple[int, int], max_bins: int) -> GpuTimeline:
    lo, hi = span
    starts, size = _buckets(lo, hi, max_bins)
    ends = np.append(starts[1:], hi)
    util = iv.integrate(*busy, None, starts, ends) / (ends - starts)
    sm_line = iv.integrate(sm[0], sm[1], sm[2], starts, ends) / (ends - starts)
    return GpuTimeline(starts_ns=starts.tolist(), end_ns=hi, bucket_ns=int(size), utilization=util.tolist(),
                       sm_efficiency=sm_line.tolist())


def _vendor_fields(props: dict[str, Any]) -> dict[str, Any]:
    """GpuMetrics' vendor, AMD architecture, matrix cores, warp size and shared memory (LDS) per SM of a device."""
    if not props:
        return {}
    amd = vendors.is_amd_device(props)
    return {"vendor": "amd" if amd else "nvidia", "arch": vendors.amd_arch(props)[0] if amd else None,
            "matrix_cores": vendors.matrix_cores(props), "warp_size": props.get("warpSize"),
            "shared_memory_per_sm": props.get("maxSharedMemoryPerMultiProcessor")}


def gpu_metrics(
    ctx: TraceContext, identity: TraceIdentity | None = None, *, span: tuple[int, int] | None = None,
    timeline: bool = True, max_bins: int = 100,
) -> list[GpuMetrics]:
    """Metrics of every device that ran a kernel, over ``span`` (default: all steps)."""
    t = ctx.table
    kernels = ctx.kernels
    if kernels.size == 0:
        return []
    if span is None:
        steps = ctx.steps
        span = (steps[0].start_ns, steps[-1].end_ns) if steps else (0, 0)
    lo, hi = int(span[0]), int(span[1])
    span_ns = hi - lo
    line_span = profiler_span(ctx) if timeline else None
    props = device_properties(t)
    out = []
    for device in np.unique(t.device[kernels]).tolist():
        rows = kernels[t.device[kernels] == device]
        ks, ke = t.ts[rows], ctx.ends(rows)
        busy = iv.merge(ks, ke)
        busy_in = int(iv.integrate(*busy, None, np.array([lo]), np.array([hi]))[0])
        blocks = t.blocks_per_sm[rows]
        has_blocks = ~np.isnan(blocks)
        sm = sm_efficiency_ranges(ks[has_blocks], ke[has_blocks], blocks[has_blocks])
        inside = (sm[0] < hi) & (sm[1] > lo)
        sm_eff = None
        if inside.any() and span_ns > 0:
            sm_eff = float(iv.integrate(sm[0], sm[1], sm[2], np.array([lo]), np.array([hi]))[0]) / span_ns
        occ = t.occupancy[rows].astype(np.float64)
        clipped = np.clip(np.minimum(ke, hi) - np.maximum(ks, lo), 0, None)
        has_occ = ~np.isnan(occ) & (occ >= 0) & (clipped > 0)
        weight = clipped[has_occ].sum()
        occupancy = float((occ[has_occ] * clipped[has_occ]).sum() / weight) if weight > 0 else None
        line = None
        if line_span is not None and line_span[1] > line_span[0]:
            line = _timeline(busy, sm, line_span, max_bins)
        p = props.get(int(device), {})
        out.append(GpuMetrics(
            device=int(device), utilization=busy_in / span_ns if span_ns > 0 else 0.0, sm_efficiency=sm_eff,
            achieved_occupancy=occupancy, kernel_ns=busy_in, span_ns=span_ns, name=p.get("name"),
            num_sms=p.get("numSms"), total_memory=p.get("totalGlobalMem"), compute_major=p.get("computeMajor"),
            timeline=line, rank=identity.rank if identity else None, window=identity.window if identity else None,
            **_vendor_fields(p),
        ))
    return out
