"""Recommendations: rules over results, with torch-tb-profiler's thresholds, the numbers and the expected gain.

Each rule reads a :class:`~lightning_streamprof.results.Result` (one trace's, or several merged) and returns
its findings, so the same rules explain a window, a rank or a whole run: a merged result names each device once,
with its value in each window. Every finding has a one-line ``summary`` of its numbers, and no advice is given
that the run already follows. What the run's StreamPipeline does comes from its own state
(:class:`~lightning_streamprof.results.PipelineRun`: the live run's, given to :func:`recommend`), else from the way the
traces' windows recorded it (their metadata, :func:`recorded_pipeline`), else from the StreamPipeline ranges in the
traces; a StreamPipeline still choosing its way is not advised on what it is choosing.

==========================  ==========================================================================
id                          rule
==========================  ==========================================================================
``dataloader``              DataLoader > 5% of the mean step and of the median step (time the GPU works
                            through does not count); more workers are advised only to a loader without them,
                            pinned memory only to a run whose batches StreamPipeline does not copy ahead
``communication``           communication > 10% of the mean step
``low_gpu_utilization``     GPU utilization < 50% on a device
``tensor_cores``            TC-eligible operators' kernels run without Tensor Cores (compute capability >= 7, or
                            an AMD device with matrix cores: CDNA, RDNA3):
                            no Tensor Core kernel at all (torch-tb-profiler's rule), or over half of the
                            eligible kernel time without them; mixed precision is advised only to a run
                            without half or bfloat16 kernels
``memory``                  peak allocated > 90% of the device's memory
``host_bound``              GPU utilization < 50% and the training thread busy > 80% of its step, i.e. not
                            waiting in a synchronising CUDA call or for the DataLoader: the host is the limit
                            (StreamPipeline's staging thread and CUDA graph are advised only to a run without
                            StreamPipeline; where it replays the backbone as a graph, the trained part is named)
``host_sync``               the training thread waits in synchronising CUDA calls > 5% of the step (``.item()``,
                            copies to the host, ``torch.cuda.synchronize``), with the operator and source line
                            of each kind of wait
``stream_pipeline``         ``on_after_batch_transfer`` or a frozen module's forward > 10% of the mean step,
                            unless StreamPipeline already stages batches or is still choosing its way; where
                            it runs serially, what it chose and why
==========================  ==========================================================================

and the rules over HTA's analyses (idle time, launch queue, copy bandwidth) of
:mod:`lightning_streamprof.analysis.hta_rules`: ``gpu_waits_for_host``, ``small_kernels``, ``slow_copies``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from lightning_streamprof.analysis.hta_rules import HTA_RULES, queue_evidence
from lightning_streamprof.analysis.kernels import reduced_precision
from lightning_streamprof.results import GpuMetrics, PipelineRun, Recommendation, Result

DATALOADER_SHARE = 0.05
COMMUNICATION_SHARE = 0.10
LOW_UTILIZATION = 0.50
MEMORY_SHARE = 0.90
PIPELINE_SHARE = 0.10
SYNC_SHARE = 0.05
HOST_BUSY = 0.80
#: share of the kernel time in half or bfloat16 kernels above which the run counts as mixed precision already
REDUCED_PRECISION_SHARE = 0.05
_NAMES_SHOWN = 5
_CAUSES_SHOWN = 3

Rule = Callable[[Result, PipelineRun | None], list[Recommendation]]


def _ms(ns: float) -> float:
    return round(float(ns) / 1e6, 3)


def _pct(x: float) -> float:
    return round(float(x) * 100, 1)


def _ms_text(ns: float) -> str:
    """Milliseconds as a summary writes them: 2 decimals, 3 significant digits below 0.1 ms."""
    ms = float(ns) / 1e6
    return f"{ms:.2f}" if ms >= 0.1 else f"{ms:.3g}"


def _per_device(result: Result, items: Sequence[tuple[int | None, object, int | None, float]]) -> str:
    """``GPU 0 of rank 0: 33.3% in window 0, 23.9% in window 1; GPU 1 of rank 0: ...`` for ``(rank, device,
    window, fraction)`` items: each device once, with its value in each window (``GPU 0 at 33.3%`` for one)."""
    ranks = {rank for rank, *_ in items}
    groups: dict[tuple[int | None, object], list[tuple[int | None, float]]] = {}
    for rank, device, window, value in items:
        groups.setdefault((rank, device), []).append((window, value))
    parts = []
    for (rank, device), values in groups.items():
        name = f"GPU {device}" + (f" of rank {rank}" if len(ranks) > 1 or (rank is not None and len(result.traces) > 1)
                                  else "")
        if len(values) == 1:
            parts.append(f"{name} at {_pct(values[0][1])}%")
        else:
            parts.append(f"{name}: " + ", ".join(
                f"{_pct(v)}%" + (f" in window {w}" if w is not None else "") for w, v in values))
    return "; ".join(parts)


def _reduced_precision_share(result: Result) -> float:
    """The share of the kernel time in half or bfloat16 kernels (mixed precision, by the kernels' names)."""
    total = sum(k.total_ns for k in result.kernels)
    reduced = sum(k.total_ns for k in result.kernels if reduced_precision(k.name))
    return reduced / total if total else 0.0


def has_gpu(result: Result) -> bool:
    """Whether the traces hold a GPU's work: advice that needs CUDA is for such runs only."""
    return bool(result.gpu or result.kernels)


def _median_loader_share(result: Result) -> float:
    """The DataLoader's share of the median step (by share): small when only a few steps wait for data."""
    shares = sorted(s.breakdown_ns["dataloader"] / s.duration_ns for s in result.steps.per_step if s.duration_ns > 0)
    return shares[len(shares) // 2] if shares else 0.0


def dataloader(result: Result, pipeline: PipelineRun | None = None) -> list[Recommendation]:
    """DataLoader > 5% of the mean step, and of the median step (a loader that keeps up in most steps and waits
    only after validation or at an epoch start needs nothing); the DataLoader's time during which the GPU works
    is not counted (the step breakdown gives it to the kernels). More workers are advised only to a loader that
    reads in the training process; one that already uses worker processes is told to make batches cheaper."""
    step, loader_ns = result.steps.mean_step_ns, result.steps.mean_ns("dataloader")
    median = _median_loader_share(result)
    if step <= 0 or loader_ns / step <= DATALOADER_SHARE or median <= DATALOADER_SHARE:
        return []
    share = loader_ns / step
    workers = result.host.loader_workers
    wait = (f"The training thread waits for its next batch {_pct(share)}% of each step ({_ms(loader_ns)} ms of "
            f"{_ms(step)} ms)")
    saving = f"Removing the wait saves up to {_ms(loader_ns)} ms per step ({_pct(share)}%)."
    gpu = has_gpu(result)
    cheaper = ("make each batch cheaper to produce and to hand over: small dtypes (uint8 images and labels), "
               + ("" if not gpu or (pipeline is not None and pipeline.staged) else "pin_memory=True, ")
               + "persistent_workers=True"
               + (", random augmentation on the GPU in on_after_batch_transfer" if gpu else "")
               + (" (StreamPipeline already copies each batch to the device ahead of its step)"
                  if gpu and pipeline is not None and pipeline.staged else ""))
    if workers:
        message = (f"{wait}, although the DataLoader already reads with worker processes: they do not make batches "
                   f"as fast as the steps use them. Rather than more workers, {cheaper}. {saving}")
    elif workers is False:
        message = (f"{wait}, and the DataLoader reads in the training process (num_workers=0). Set num_workers on the "
                   "DataLoader (with persistent_workers=True) so that worker processes make the next batches while "
                   f"the model trains. {saving}")
    else:
        message = (f"{wait}, in the data iterable (no torch DataLoader in the trace): the batches are made in the "
                   "training thread. A torch DataLoader with num_workers > 0 makes them in worker processes while the "
                   f"model trains. {saving}")
    return [Recommendation(
        id="dataloader",
        message=message,
        evidence={"dataloader_ms": _ms(loader_ns), "step_ms": _ms(step), "share": share,
                  "median_step_share": median, "workers": workers, "saving_ms_per_step": _ms(loader_ns)},
        summary=f"waits {_ms_text(loader_ns)} ms of a {_ms_text(step)} ms step for data ({_pct(share)}%; "
                f"{_pct(median)}% in the median step)",
    )]


def communication(result: Result, pipeline: PipelineRun | None = None) -> list[Recommendation]:
    step, comm_ns = result.steps.mean_step_ns, result.steps.mean_ns("communication")
    if step <= 0 or comm_ns / step <= COMMUNICATION_SHARE:
        return []
    share = comm_ns / step
    return [Recommendation(
        id="communication",
        message=f"Communication takes {_pct(share)}% of each step ({_ms(comm_ns)} ms of {_ms(step)} ms) that no "
                "computation hides. Fewer or smaller exchanges help: gradient accumulation (one all-reduce for "
                "several batches; it raises the effective batch size, which may change convergence), a larger batch, "
                "or gradient compression (a DDP communication hook such as bf16_compress_hook).",
        evidence={"communication_ms": _ms(comm_ns), "step_ms": _ms(step), "share": share},
        summary=f"communication {_ms_text(comm_ns)} ms of a {_ms_text(step)} ms step ({_pct(share)}%)",
    )]


def low_gpu_utilization(result: Result, pipeline: PipelineRun | None = None) -> list[Recommendation]:
    low = [g for g in result.gpu if g.utilization < LOW_UTILIZATION]
    if not low:
        return []
    where = _per_device(result, [(g.rank, g.device, g.window, g.utilization) for g in low])
    busy = sum(g.kernel_ns for g in low) / max(1, sum(g.span_ns for g in low))
    head = (f"The GPU is busy less than half of the step time ({where})" if len({(g.rank, g.device) for g in low}) == 1
            else f"GPUs are busy less than half of the step time ({where})")
    host = " The training thread is the limit here: see host_bound." if host_bound(result) else ""
    return [Recommendation(
        id="low_gpu_utilization",
        message=f"{head}. A larger batch gives each kernel more work and spreads the step's fixed costs over more "
                f"samples (the learning rate may need to follow it).{host}",
        evidence={"devices": [g.device for g in low], "ranks": [g.rank for g in low],
                  "windows": [g.window for g in low], "utilization": [g.utilization for g in low],
                  "idle_ms": [_ms(g.span_ns - g.kernel_ns) for g in low], "busy_share": busy},
        summary="; ".join(f"GPU {g.device} busy {_pct(g.utilization)}%, idle {_ms_text(g.span_ns - g.kernel_ns)} ms "
                          f"of {_ms_text(g.span_ns)} ms" for g in low),
    )]


def has_matrix_units(gpu: GpuMetrics) -> bool:
    """Whether a device has Tensor Cores or AMD matrix cores (an AMD device whose architecture the trace does not
    tell has none to advise on; an older result without the field: compute capability 7 or more)."""
    if gpu.matrix_cores is not None:
        return gpu.matrix_cores
    return gpu.vendor != "amd" and (gpu.compute_major or 0) >= 7


def tensor_cores(result: Result, pipeline: PipelineRun | None = None) -> list[Recommendation]:
    """Tensor-Core-eligible operators' kernels without Tensor Cores. Mixed precision is advised only to a run that
    has no half or bfloat16 kernels yet; a mixed-precision run is told which part still runs in float32."""
    tc = result.tensor_cores
    without = tc.eligible_without_tc_ns / tc.eligible_kernel_ns if tc.eligible_kernel_ns else 0.0
    if not any(map(has_matrix_units, result.gpu)) or tc.eligible_kernel_ns <= 0 \
            or (tc.tc_kernel_ns > 0 and without <= 0.5):
        return []
    amd = all(g.vendor == "amd" for g in result.gpu)
    units = "matrix cores" if amd else "Tensor Cores"
    per_step = tc.eligible_without_tc_ns / max(result.steps.count, 1)
    reduced = _reduced_precision_share(result)
    head = (f"{_pct(without)}% of the kernel time of Tensor Core eligible operators (convolutions, matrix products, "
            f"attention: {_pct(tc.eligible_share)}% of the kernel time) runs without {units}, "
            f"{_ms(per_step)} ms per step")
    if reduced > REDUCED_PRECISION_SHARE:
        message = (f"Mixed precision is on ({_pct(reduced)}% of the kernel time is in half or bfloat16 kernels), yet "
                   f"{head[0].lower()}{head[1:]}: those operators run in float32, outside autocast or kept in float32 "
                   "by it. Running them on half or bfloat16 inputs (inside autocast, or the module cast) puts them on "
                   f"{units}.")
    else:
        message = (f"{head}. Mixed precision (Lightning: precision=\"bf16-mixed\") runs them on {units}"
                   + ("." if amd else "; in float32, torch.set_float32_matmul_precision(\"high\") lets matrix products "
                      "use TF32 Tensor Cores."))
    return [Recommendation(
        id="tensor_cores",
        message=message,
        evidence={"tc_share": tc.tc_share, "eligible_share": tc.eligible_share, "eligible_without_tc_share": without,
                  "eligible_without_tc_ms_per_step": _ms(per_step), "reduced_precision_share": reduced},
        summary=f"{_ms_text(per_step)} ms per step of eligible kernels without Tensor Cores ({_pct(without)}% of "
                f"theirs; {_pct(reduced)}% of the kernel time in half or bfloat16)",
    )]


def memory(result: Result, pipeline: PipelineRun | None = None) -> list[Recommendation]:
    full = [d for d in result.memory.devices
            if d.total_memory and d.peak_allocated_bytes > MEMORY_SHARE * d.total_memory]
    if not full:
        return []
    top = max(full, key=lambda d: d.peak_allocated_bytes / d.total_memory)
    share = top.peak_allocated_bytes / top.total_memory
    where = _per_device(result, [(d.rank, d.device_id, d.window, d.peak_allocated_bytes / d.total_memory)
                                 for d in full])
    amp = ("" if _reduced_precision_share(result) > REDUCED_PRECISION_SHARE
           else ", mixed precision (precision=\"bf16-mixed\": half the activation memory)")
    return [Recommendation(
        id="memory",
        message=f"Allocated memory peaks near the GPU's capacity ({where} of {top.total_memory / 1024 ** 3:.1f} GiB). "
                f"To train a larger batch or model: activation checkpointing (recompute instead of keep){amp}, or a "
                "smaller batch with gradient accumulation.",
        evidence={"device": top.device, "rank": top.rank, "peak_allocated_bytes": top.peak_allocated_bytes,
                  "total_memory": int(top.total_memory), "share": share},
        summary=f"peak {top.peak_allocated_bytes / 1024 ** 3:.2f} GiB of {top.total_memory / 1024 ** 3:.1f} GiB on "
                f"{top.device} ({_pct(share)}%)",
    )]


def host_bound(result: Result, pipeline: PipelineRun | None = None) -> list[Recommendation]:
    """The training thread busy issuing work (operators, CUDA runtime, Python between them) for most of its step,
    not waiting for the device or for data, while the GPU idles. StreamPipeline's staging thread and CUDA graph are
    advised only to a run without StreamPipeline (``pipeline`` None, and no StreamPipeline staging in the trace): one
    with it has chosen them or not itself; where it replays the backbone as a CUDA graph, the advice is about the
    trained part."""
    steps, host = result.steps, result.host
    step = steps.mean_step_ns
    if step <= 0 or not result.gpu or min(g.utilization for g in result.gpu) >= LOW_UTILIZATION:
        return []
    if host.steps == 0 or host.host_step_ns <= 0 or host.busy_ns <= 0:
        return []
    host_step = host.host_step_ns / host.steps
    wait = host.sync_wait_ns / host.steps + steps.mean_ns("dataloader")
    share = 1.0 - wait / host_step
    if share <= HOST_BUSY:
        return []
    per_step = host.launches / host.steps
    in_ops = host.busy_ns / host.steps
    gpu_ns = steps.mean_ns("kernel") + steps.mean_ns("memcpy") + steps.mean_ns("memset")
    graphs_per_step = host.graph_launches / host.steps
    queue, queue_numbers = queue_evidence(result)
    launches = f"{per_step:.1f}" if per_step < 10 else f"{per_step:.0f}"  # 3.5, not 4, in a short trace
    return [Recommendation(
        id="host_bound",
        message=f"The training thread is busy {_pct(share)}% of each step issuing work ({launches} kernel launches; "
                f"{_ms(in_ops)} ms in operators and the CUDA runtime, the rest in Python between them) while the GPU "
                f"works {_ms(gpu_ns)} ms of the {_ms(step)} ms step: the host is the limit, not the GPU.{queue} "
                f"{_fewer_launches(result, pipeline, graphs_per_step)} The GPU alone needs {_ms(gpu_ns)} ms per step.",
        evidence={"host_busy_share": share, "host_wait_ms_per_step": _ms(wait), "operators_ms_per_step": _ms(in_ops),
                  "launches_per_step": per_step, "gpu_busy_ms_per_step": _ms(gpu_ns), "step_ms": _ms(step),
                  "saving_ms_per_step": _ms(step - gpu_ns), "graph_launches_per_step": graphs_per_step,
                  **queue_numbers},
        summary=f"training thread busy {_pct(share)}% of a {_ms_text(step)} ms step, {launches} launches; "
                f"GPU busy {_ms_text(gpu_ns)} ms",
    )]


def _fewer_launches(result: Result, pipeline: PipelineRun | None, graphs_per_step: float) -> str:
    """host_bound's advice: what would make fewer, larger launches, less what the run does already."""
    compiled = "torch.compile(mode=\"reduce-overhead\")"
    if pipeline is not None and pipeline.staged and pipeline.graph:
        where = " on its staging thread" if pipeline.thread else ""
        return (f"StreamPipeline already replays the frozen backbone as a CUDA graph{where}, so the remaining launches "
                f"are in the trained part: a larger batch, or CUDA graphs for the trained modules ({compiled} on "
                "them) help.")
    if graphs_per_step:
        graphs = f"capturing more of the step in CUDA graphs (it replays {graphs_per_step:.0f} per step already)"
    elif pipeline is not None:  # StreamPipeline chooses its own graph (or is choosing it)
        graphs = f"CUDA graphs for the trained modules ({compiled})"
    else:
        graphs = (f"CUDA graphs ({compiled}, or lightning_streamprof.StreamPipeline(cuda_graph=True) for a frozen "
                  "backbone)")
    if pipeline is not None:
        staging = (", and StreamPipeline(mode=\"auto\") (off in this run) to take batch preparation off the training "
                   "thread" if pipeline.mode == "off" else "")
    else:
        staging = ("" if result.pipeline.pipelined else
                   ", and StreamPipeline's staging thread to take batch preparation off the training thread")
    return f"Fewer, larger launches help: a larger batch, {graphs}{staging}."


def host_sync(result: Result, pipeline: PipelineRun | None = None) -> list[Recommendation]:
    """The training thread waiting for the device inside steps: each wait empties the GPU's queue."""
    steps, syncs = result.steps, result.syncs
    step = steps.mean_step_ns
    if step <= 0 or syncs.steps == 0 or syncs.calls == 0:
        return []
    n = syncs.steps
    wait = syncs.wait_ns / n
    if wait / step <= SYNC_SHARE:
        return []
    found = [{"operator": c.operator, "what": c.what, "source": c.source, "calls_per_step": c.calls / n,
              "ms_per_step": _ms(c.wait_ns / n)} for c in syncs.causes]
    shown = "; ".join(
        f"{c['what']} {c['calls_per_step']:.1f}x, {c['ms_per_step']} ms" + (f" at {c['source']}" if c["source"] else "")
        for c in found[:_CAUSES_SHOWN])
    idle = max(0.0, step - steps.mean_ns("kernel") - steps.mean_ns("memcpy") - steps.mean_ns("memset"))
    per_step = syncs.calls / n
    return [Recommendation(
        id="host_sync",
        message=f"The training thread waits for the GPU {per_step:.1f} times per step in synchronising CUDA calls, "
                f"{_ms(wait)} ms/step ({_pct(wait / step)}% of the step): {shown}. Each wait empties the GPU's queue, "
                "and the GPU then idles until the host has issued the next kernels (it is idle "
                f"{_ms(idle)} ms of each {_ms(step)} ms step). Keep values on the device during the step: no .item(), "
                ".cpu() or printing of tensors, no Python condition on a tensor's value; Lightning's progress bar reads "
                "the values logged with prog_bar=True at each refresh (a larger refresh_rate reads them less often).",
        evidence={"syncs_per_step": per_step, "wait_ms_per_step": _ms(wait), "share": wait / step,
                  "gpu_idle_ms_per_step": _ms(idle), "step_ms": _ms(step), "causes": found},
        summary=f"{per_step:.1f} synchronising calls per step waiting {_ms_text(wait)} ms of a {_ms_text(step)} ms "
                f"step ({_pct(wait / step)}%)",
    )]


def stream_pipeline(result: Result, pipeline: PipelineRun | None = None) -> list[Recommendation]:
    """Work StreamPipeline could run ahead, a large share of the step. Not for a run whose StreamPipeline stages
    batches already or is still choosing its way; a run whose StreamPipeline runs serially is told what it chose."""
    work, step = result.pipeline, result.steps.mean_step_ns
    if step <= 0 or work.steps == 0 or work.pipelined or not has_gpu(result):
        return []  # StreamPipeline is already staging batches in this run, or there is no CUDA device to stage on
    if pipeline is not None and (pipeline.staged or not pipeline.settled):
        return []  # it stages batches now (this trace recorded another way), or it is choosing whether to
    found = []
    for what, total, names in (("on_after_batch_transfer", work.hook_ns, work.hook_names),
                               ("frozen module forward", work.frozen_ns, work.frozen_names)):
        ns = total / work.steps
        if ns / step > PIPELINE_SHARE:
            found.append(Recommendation(
                id="stream_pipeline",
                message=f"{what} takes {_ms(ns)} ms per step ({_pct(ns / step)}% of the step). "
                        + _pipeline_advice(pipeline, f"saving up to {_ms(ns)} ms/step ({_pct(ns / step)}%)"),
                evidence={"what": what, "ms_per_step": _ms(ns), "share": ns / step, "names": names[:_NAMES_SHOWN]},
                summary=f"{what} {_ms_text(ns)} ms of a {_ms_text(step)} ms step ({_pct(ns / step)}%)",
            ))
    return found


def _pipeline_advice(pipeline: PipelineRun | None, saving: str) -> str:
    """stream_pipeline's advice to a run without StreamPipeline, or to one whose StreamPipeline runs serially."""
    ahead = "for the next batch on a side CUDA stream while the current batch trains"
    if pipeline is None:
        return f"lightning_streamprof.StreamPipeline can run it {ahead}, {saving}."
    if pipeline.mode == "off":
        return f"StreamPipeline is off in this run (mode=\"off\"); mode=\"auto\" runs it {ahead}, {saving}."
    if pipeline.mode == "auto":
        return ("StreamPipeline (auto) runs it in the step, serially: auto stages it ahead only with a CUDA device "
                "and where its trials measure that faster than serial training; StreamPipeline.report() says which "
                "held here.")
    return f"StreamPipeline runs serially in this run ({pipeline.way}); StreamPipeline.report() says why."


#: every rule, in the order of their findings
RULES: tuple[Rule, ...] = (dataloader, communication, low_gpu_utilization, tensor_cores, memory, host_bound,
                           host_sync, stream_pipeline, *HTA_RULES)


def recommend(result: Result, rules: tuple[Rule, ...] | None = None,
              pipeline: PipelineRun | None = None) -> list[Recommendation]:
    """The findings of every rule on ``result``; ``pipeline``: what the run's StreamPipeline does, from its own state
    (default: the way the traces' windows recorded it, :func:`recorded_pipeline`)."""
    seen = pipeline if pipeline is not None else recorded_pipeline(result)
    return [rec for rule in (RULES if rules is None else rules) for rec in rule(result, seen)]


def recorded_pipeline(result: Result) -> PipelineRun | None:
    """What StreamPipeline did as the traces' windows recorded it (their metadata): the latest window recorded on a
    settled way, else the latest, marked as recorded during the choice; None for traces without it."""
    ways = sorted(((t.window if t.window is not None else -1, i, t.pipeline) for i, t in enumerate(result.traces)
                   if t.pipeline is not None), key=lambda x: x[:2])
    if not ways:
        return None
    settled = [w for _, _, w in ways if not w.in_trials and not w.first.deciding]
    if settled:
        return settled[-1].first
    return msgspec.structs.replace(ways[-1][2].first, in_trials=True)
