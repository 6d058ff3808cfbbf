"""Exact merges of the HTA-style results (:mod:`lightning_streamprof.results.hta`) over windows and ranks.

Every ``merge_*`` combines the results of several traces: counts and times are summed, maxima and minima taken,
means recomputed from the sums. Per-stream rows are summed per (rank, device, stream): the windows of one rank add
up, ranks stay separate rows. Lists a trace keeps to its largest entries (operator delays, kernel sequences,
critical-path items) merge exactly for every entry that each trace listed; the merged list says ``truncated`` when
any trace's was cut. HTA's quartiles (queue length, bandwidth) are not kept: they do not merge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from lightning_streamprof.results.hta import (
    KERNEL_WAIT_NS,
    LAUNCH_DELAY_CUTOFF_NS,
    MAX_QUEUE_LENGTH,
    RUNTIME_CUTOFF_NS,
    AnnotationTime,
    AnnotationTimes,
    Bandwidth,
    BandwidthSeries,
    CopyBandwidth,
    CriticalItem,
    CriticalPath,
    HtaAnalyses,
    IdleTime,
    KernelSequence,
    KernelSequences,
    LaunchStats,
    OperatorLaunch,
    QueueLengths,
    StreamIdle,
    StreamQueue,
    sum_launches,
    sum_fields,
    sort_annotations,
    sort_copies,
    sort_items,
    sort_launches,
    sort_operator_launches,
    sort_sequences,
    sort_streams,
)


def _group(items: Iterable[Any], key: Callable[[Any], Any]) -> dict[Any, list[Any]]:
    out: dict[Any, list[Any]] = {}
    for item in items:
        out.setdefault(key(item), []).append(item)
    return out


def _same(values: Iterable[Any], what: str) -> Any:
    distinct = set(values)
    if len(distinct) > 1:
        raise ValueError(f"cannot merge results computed with different {what}: {sorted(distinct)}")
    return distinct.pop() if distinct else None


_IDLE_SUMS = ("events", "busy_ns", "span_ns", "host_wait_ns", "kernel_wait_ns", "other_ns", "host_wait_gaps",
              "kernel_wait_gaps", "other_gaps")


def merge_idle_time(results: Sequence[IdleTime]) -> IdleTime:
    """Sums per (rank, device, stream): exact, the windows of one rank adding up; ranks stay separate rows."""
    threshold = _same((r.kernel_wait_threshold_ns for r in results), "kernel-wait thresholds") or KERNEL_WAIT_NS
    groups = _group((s for r in results for s in r.streams), lambda s: (s.rank, s.device, s.stream))
    streams = [StreamIdle(device=d, stream=st, rank=rank, **sum_fields(rows, _IDLE_SUMS))
               for (rank, d, st), rows in groups.items()]
    return IdleTime(kernel_wait_threshold_ns=threshold, streams=sort_streams(streams))


def merge_launch_stats(results: Sequence[LaunchStats], limit: int | None = None) -> LaunchStats:
    """Sums per runtime call name (exact) and per (operator, kernel sequence) (exact for the sequences every trace
    listed; ``truncated`` if any trace's list was cut or ``limit`` cuts the merged one)."""
    runtime_cutoff = _same((r.runtime_cutoff_ns for r in results), "runtime cut-offs") or RUNTIME_CUTOFF_NS
    delay_cutoff = _same((r.launch_delay_cutoff_ns for r in results), "launch-delay cut-offs") or LAUNCH_DELAY_CUTOFF_NS
    names = _group((x for r in results for x in r.launches), lambda x: x.name)
    ops = _group((x for r in results for x in r.operators), lambda x: (x.operator, tuple(x.kernels)))
    operators = sort_operator_launches(
        OperatorLaunch(operator=op, kernels=list(ks),
                       **sum_fields(rows, ("count", "launch_delay_ns", "runtime_delay_ns")))
        for (op, ks), rows in ops.items())
    truncated = any(r.truncated for r in results) or (limit is not None and len(operators) > limit)
    return LaunchStats(runtime_cutoff_ns=runtime_cutoff, launch_delay_cutoff_ns=delay_cutoff,
                       launches=sort_launches(sum_launches(n, rows) for n, rows in names.items()),
                       operators=operators[:limit] if limit is not None else operators, truncated=truncated)


_ANNOTATION_SUMS = ("calls", "host_ns", "kernels", "kernel_ns", "device_ns", "self_kernel_ns", "self_device_ns",
                    "gpu_span_calls", "gpu_span_ns", "gpu_span_sq_ns2", "gpu_overlap_device_ns")


def merge_annotation_times(results: Sequence[AnnotationTimes]) -> AnnotationTimes:
    """Sums per name (exact); longest/shortest GPU-side copies over the traces that have one."""
    groups = _group((x for r in results for x in r.rows), lambda x: x.name)
    rows = []
    for name, items in groups.items():
        spans = [x for x in items if x.gpu_span_calls]
        rows.append(AnnotationTime(name=name, **sum_fields(items, _ANNOTATION_SUMS),
                                   gpu_span_max_ns=max((x.gpu_span_max_ns for x in spans), default=0),
                                   gpu_span_min_ns=min((x.gpu_span_min_ns for x in spans), default=0)))
    totals = ("device_ns", "kernel_ns", "outside_device_ns", "outside_kernel_ns", "unlinked_device_ns")
    return AnnotationTimes(rows=sort_annotations(rows), **sum_fields(results, totals))


_QUEUE_SUMS = ("launches", "span_ns", "length_ns", "points", "point_sum", "point_sq_sum", "blocked_ns")


def merge_queue_lengths(results: Sequence[QueueLengths]) -> QueueLengths:
    """Sums per (rank, device, stream), maxima and minima over them: exact (HTA's quartiles are not kept: they do
    not merge)."""
    limit = _same((r.max_queue_length for r in results), "queue limits") or MAX_QUEUE_LENGTH
    groups = _group((s for r in results for s in r.streams), lambda s: (s.rank, s.device, s.stream))
    streams = [StreamQueue(device=d, stream=st, rank=rank, **sum_fields(rows, _QUEUE_SUMS),
                           max_length=max(s.max_length for s in rows), min_length=min(s.min_length for s in rows))
               for (rank, d, st), rows in groups.items()]
    return QueueLengths(max_queue_length=limit, streams=sort_streams(streams))


def merge_bandwidth(results: Sequence[Bandwidth]) -> Bandwidth:
    """Sums per name and kind; peaks are maxima: exact."""
    copies = _group((c for r in results for c in r.copies), lambda c: c.name)
    series = _group((s for r in results for s in r.series), lambda s: s.kind)
    return Bandwidth(
        copies=sort_copies(CopyBandwidth(name=n, kind=rows[0].kind, max_gbps=max(c.max_gbps for c in rows),
                                         **sum_fields(rows, ("calls", "bytes", "busy_ns", "timed_calls", "timed_bytes",
                                                        "timed_ns", "sum_gbps")))
                           for n, rows in copies.items()),
        series=sorted((BandwidthSeries(kind=k, points=sum(s.points for s in rows),
                                       point_sum_gbps=sum(s.point_sum_gbps for s in rows),
                                       peak_gbps=max(s.peak_gbps for s in rows)) for k, rows in series.items()),
                      key=lambda s: s.kind),
    )


def merge_critical_paths(results: Sequence[CriticalPath], limit: int | None = None) -> CriticalPath:
    """Steps concatenated (exact), items summed by (kind, name) (exact for the items every trace listed)."""
    groups = _group((i for r in results for i in r.items), lambda i: (i.kind, i.name))
    items = sort_items(CriticalItem(kind=k, name=n, **sum_fields(rows, ("ns", "segments")))
                       for (k, n), rows in groups.items())
    truncated = any(r.truncated for r in results) or (limit is not None and len(items) > limit)
    return CriticalPath(steps=[s for r in results for s in r.steps],
                        items=items[:limit] if limit is not None else items, truncated=truncated)


def merge_kernel_sequences(results: Sequence[KernelSequences], limit: int | None = None) -> KernelSequences:
    """Sums per (operator, sequence) (exact for the sequences every trace listed)."""
    min_length = _same((r.min_length for r in results), "minimum lengths") or 3
    operator = _same((r.operator for r in results), "operator filters")
    groups = _group((s for r in results for s in r.sequences), lambda s: (s.operator, tuple(s.kernels)))
    rows = sort_sequences(KernelSequence(operator=op, kernels=list(ks),
                                         **sum_fields(items, ("count", "kernel_ns", "op_ns")))
                          for (op, ks), items in groups.items())
    truncated = any(r.truncated for r in results) or (limit is not None and len(rows) > limit)
    return KernelSequences(min_length=min_length, operator=operator,
                           sequences=rows[:limit] if limit is not None else rows,
                           truncated=truncated)


def merge_hta(results: Sequence[HtaAnalyses | None]) -> HtaAnalyses | None:
    """Every analysis merged as above; None when a result has none (one decoded from an older JSON)."""
    if not results or any(r is None for r in results):
        return None
    if len(results) == 1:
        return results[0]
    return HtaAnalyses(
        idle=merge_idle_time([r.idle for r in results]), launches=merge_launch_stats([r.launches for r in results]),
        annotations=merge_annotation_times([r.annotations for r in results]),
        hooks=merge_annotation_times([r.hooks for r in results]),
        queue=merge_queue_lengths([r.queue for r in results]), bandwidth=merge_bandwidth([r.bandwidth for r in results]),
        critical_path=merge_critical_paths([r.critical_path for r in results]),
        sequences=merge_kernel_sequences([r.sequences for r in results]),
    )
