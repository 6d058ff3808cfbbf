"""Recommendations from HTA's analyses (:class:`~lightning_streamprof.results.hta.HtaAnalyses`): causes that idle
time, the launch queue and copy bandwidth show and the step breakdown does not.

====================  ==========================================================================================
id                    rule
====================  ==========================================================================================
``gpu_waits_for_host``  on the busiest stream of a device, host wait > 20% of the stream's span (kernels launched
                      only after the previous one finished) or launch-call/launch-delay outliers >= 1% of the
                      launches, with a launch queue shorter than one operation on average: the host is the limit
                      (where ``host_bound`` holds, its finding gives these numbers instead)
``small_kernels``     a launch queue of 8 operations or more on average (the host is ahead) and kernel-wait gaps
                      (between back-to-back kernels) > 5% of the stream's span: many small kernels
``slow_copies``       a host-device copy name taking >= 1% of the step at under a quarter of the link's bandwidth
                      (the fastest copy of that direction in the traces, 10 GB/s at least): pageable memory, or
                      small copies
====================  ==========================================================================================
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lightning_streamprof.results import PipelineRun, Recommendation, Result
from lightning_streamprof.results.hta import CopyBandwidth, StreamIdle, StreamQueue

HOST_WAIT_SHARE = 0.20
OUTLIER_SHARE = 0.01
SHORT_QUEUE = 1.0
LONG_QUEUE = 8.0
KERNEL_WAIT_SHARE = 0.05
COPY_STEP_SHARE = 0.01
SLOW_COPY_SHARE = 0.25
#: a PCIe 3.0 x16 link's practical bandwidth (GB/s): the least a training GPU's host link reaches
LINK_FLOOR_GBPS = 10.0
#: copies smaller than this on average are "small" (bytes)
SMALL_COPY_BYTES = 256 * 1024


def _where(s: Any) -> str:
    return (f"rank {s.rank} " if s.rank is not None else "") + f"GPU {s.device} stream {s.stream}"


def _busiest(result: Result) -> list[tuple[StreamIdle, StreamQueue | None]]:
    """The stream with the most device time of each (rank, device), with its launch queue."""
    hta = result.hta
    best: dict[tuple[Any, int], StreamIdle] = {}
    for s in hta.idle.streams:
        key = (s.rank, s.device)
        if s.events > 1 and s.span_ns > 0 and (key not in best or s.busy_ns > best[key].busy_ns):
            best[key] = s
    queues = {(q.rank, q.device, q.stream): q for q in hta.queue.streams}
    return [(s, queues.get((s.rank, s.device, s.stream))) for s in best.values()]


def _per_step(ns: float, result: Result) -> float:
    """Milliseconds per step (per trace without steps)."""
    return ns / max(result.steps.count, 1) / 1e6


def queue_evidence(result: Result) -> tuple[str, dict[str, Any]]:
    """A sentence and evidence on the busiest stream's launch queue and host wait, for ``host_bound``; empty without
    HTA's analyses."""
    if result.hta is None:
        return "", {}
    streams = [(s, q) for s, q in _busiest(result) if q is not None]
    if not streams:
        return "", {}
    s, q = max(streams, key=lambda x: x[0].busy_ns)
    share = s.host_wait_ns / s.span_ns
    total = result.hta.launches.total
    return (f" On {_where(s)} the launch queue holds {q.mean_length:.2f} operations on average (at most "
            f"{q.max_length}) and the GPU idles {100 * share:.1f}% of the stream's time waiting for launches; "
            f"{total.runtime_outliers + total.delay_outliers} of {total.launches} launches are runtime or delay "
            "outliers.",
            {"mean_queue_length": q.mean_length, "host_wait_share": share,
             "runtime_outliers": total.runtime_outliers, "delay_outliers": total.delay_outliers})


def gpu_waits_for_host(result: Result, pipeline: PipelineRun | None = None) -> list[Recommendation]:
    """The GPU idles between kernels because they are launched late, and no queue builds up; said by ``host_bound``
    (with these numbers) where its thresholds hold."""
    from lightning_streamprof.analysis.rules import host_bound

    if result.hta is None or host_bound(result, pipeline):
        return []
    total = result.hta.launches.total
    outliers = total.runtime_outliers + total.delay_outliers
    found = []
    for s, q in _busiest(result):
        share = s.host_wait_ns / s.span_ns
        if q is None or q.mean_length >= SHORT_QUEUE:
            continue
        if share <= HOST_WAIT_SHARE and not (total.launches and outliers / total.launches >= OUTLIER_SHARE):
            continue
        found.append((share, s, q))
    if not found:
        return []
    share, s, q = max(found, key=lambda x: x[0])
    wait = _per_step(s.host_wait_ns, result)
    message = (f"The GPU waits for the host on {_where(s)}: {wait:.3f} ms per step ({100 * share:.1f}% of the "
               f"stream's time) it idles before kernels launched only after the previous one had finished, and its "
               f"launch queue holds {q.mean_length:.2f} operations on average (at most {q.max_length}), so the host "
               f"issues work no faster than the GPU runs it. {total.runtime_outliers} of {total.launches} launch "
               f"calls took over {result.hta.launches.runtime_cutoff_ns / 1e6:g} ms and {total.delay_outliers} "
               f"kernels started over {result.hta.launches.launch_delay_cutoff_ns / 1e6:g} ms after their launch "
               f"(mean delay {total.mean_delay_ns / 1e6:.4f} ms). Fewer, larger launches help: CUDA graphs "
               "(torch.compile(mode=\"reduce-overhead\")), a larger batch, fused optimizers (foreach=True or "
               "fused=True), and no host work between the step's kernels.")
    return [Recommendation(
        id="gpu_waits_for_host", message=message,
        evidence={"stream": s.stream, "device": s.device, "rank": s.rank, "host_wait_share": share,
                  "host_wait_ms_per_step": round(wait, 3), "mean_queue_length": q.mean_length,
                  "max_queue_length": q.max_length, "launches": total.launches,
                  "runtime_outliers": total.runtime_outliers, "delay_outliers": total.delay_outliers,
                  "mean_launch_delay_ms": round(total.mean_delay_ns / 1e6, 4)},
        summary=f"{_where(s)}: host wait {100 * share:.1f}% of its time, queue {q.mean_length:.2f} deep; "
                f"{outliers} launch outliers of {total.launches}",
    )]


def small_kernels(result: Result, pipeline: PipelineRun | None = None) -> list[Recommendation]:
    """A full launch queue and gaps between back-to-back kernels: the GPU's time goes to starting small kernels."""
    if result.hta is None:
        return []
    found = [(s.kernel_wait_ns / s.span_ns, s, q) for s, q in _busiest(result)
             if q is not None and q.mean_length >= LONG_QUEUE and s.kernel_wait_ns / s.span_ns > KERNEL_WAIT_SHARE]
    if not found:
        return []
    share, s, q = max(found, key=lambda x: x[0])
    steps = max(result.steps.count, 1)
    per_step, mean_us = s.events / steps, s.busy_ns / s.events / 1e3
    gaps = _per_step(s.kernel_wait_ns, result)
    top = result.hta.sequences.sequences[0] if result.hta.sequences.sequences else None
    fusion = (f" The most frequent kernel sequence, {len(top.kernels)} kernels under {top.operator}, runs {top.count} "
              "times." if top is not None else "")
    message = (f"{_where(s).capitalize()} runs {per_step:.0f} device operations per step of {mean_us / 1e3:.4f} ms on "
               f"average, with {s.kernel_wait_gaps / steps:.0f} gaps per step between back-to-back kernels costing "
               f"{gaps:.3f} ms ({100 * share:.1f}% of its time), while its launch queue holds {q.mean_length:.1f} "
               f"operations on average (at most {q.max_length}): the host is ahead, and the GPU spends its time "
               f"between many small kernels. Fusing them helps: torch.compile, fused optimizers (fused=True), "
               f"a larger batch per kernel.{fusion}")
    return [Recommendation(
        id="small_kernels", message=message,
        evidence={"stream": s.stream, "device": s.device, "rank": s.rank, "kernel_wait_share": share,
                  "kernel_wait_ms_per_step": round(gaps, 3), "operations_per_step": per_step,
                  "mean_operation_ms": round(mean_us / 1e3, 4), "mean_queue_length": q.mean_length,
                  "max_queue_length": q.max_length},
        summary=f"{_where(s)}: {per_step:.0f} operations per step of {mean_us / 1e3:.4f} ms, kernel-wait gaps "
                f"{100 * share:.1f}% of its time, queue {q.mean_length:.1f} deep",
    )]


def _direction(name: str) -> str | None:
    return next((d for d in ("HtoD", "DtoH") if d in name), None)


def _links(copies: Iterable[CopyBandwidth]) -> dict[str, float]:
    """The bandwidth each direction reached (its fastest copy), LINK_FLOOR_GBPS at least."""
    out: dict[str, float] = {}
    for c in copies:
        d = _direction(c.name)
        if d and c.timed_calls:
            out[d] = max(out.get(d, LINK_FLOOR_GBPS), c.max_gbps)
    return out


def slow_copies(result: Result, pipeline: PipelineRun | None = None) -> list[Recommendation]:
    """Host-device copies far below the link's bandwidth, a share of the step: pageable memory or small copies."""
    step = result.steps.mean_step_ns
    if result.hta is None or step <= 0:
        return []
    copies = result.hta.bandwidth.copies
    links = _links(copies)
    out = []
    for c in copies:
        d = _direction(c.name)
        if d is None or c.gbps is None or _per_step(c.busy_ns, result) * 1e6 < COPY_STEP_SHARE * step:
            continue
        link = links[d]
        if c.gbps >= SLOW_COPY_SHARE * link:
            continue
        if c.pageable:
            cause = ("from pageable host memory, which the driver copies through a pinned staging buffer: "
                     "pin_memory=True on the DataLoader (with non_blocking=True copies) copies at the link's speed")
        elif c.mean_bytes < SMALL_COPY_BYTES:
            cause = ("in small pieces, each paying the copy's fixed cost: one larger copy (stack the tensors first), "
                     "or values kept on the device, cost less")
        else:
            continue
        ms = _per_step(c.busy_ns, result)
        out.append(Recommendation(
            id="slow_copies",
            message=f"{c.name}: {c.calls} copies of {c.mean_bytes / 1e3:.1f} KB on average run at {c.gbps:.2f} GB/s, "
                    f"{100 * c.gbps / link:.0f}% of the {link:.1f} GB/s this link reaches, and take {ms:.3f} ms per "
                    f"step ({100 * ms * 1e6 / step:.1f}% of the step). They copy {cause}.",
            evidence={"what": c.name, "gbps": c.gbps, "link_gbps": link, "calls": c.calls, "mean_bytes": c.mean_bytes,
                      "ms_per_step": round(ms, 3), "pageable": c.pageable},
            summary=f"{c.name} at {c.gbps:.2f} GB/s of {link:.1f}, {ms:.3f} ms per step",
        ))
    return out


#: the rules over HTA's analyses, in the order of their findings
HTA_RULES = (gpu_waits_for_host, small_kernels, slow_copies)
