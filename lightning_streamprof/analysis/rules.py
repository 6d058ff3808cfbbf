"""Recommendations: rules over results, with torch-tb-profiler's thresholds, the numbers and the expected gain.

Each rule reads a :class:`~lightning_streamprof.results.Result` (one trace's, or several merged) and returns
its findings, so the same rules explain a window, a rank or a whole run.

==========================  ==========================================================================
id                          rule
==========================  ==========================================================================
``dataloader``              DataLoader > 5% of the mean step and of the median step; the advice is more
                            workers only when the loader has none
``communication``           communication > 10% of the mean step
``low_gpu_utilization``     GPU utilization < 50% on a device
``tensor_cores``            TC-eligible operators' kernels run without Tensor Cores (compute capability >= 7):
                            no Tensor Core kernel at all (torch-tb-profiler's rule), or over half of the
                            eligible kernel time without them
``memory``                  peak allocated > 90% of the device's memory
``host_bound``              GPU utilization < 50% and the training thread busy > 80% of its step, i.e. not
                            waiting in a synchronising CUDA call or for the DataLoader: the host is the limit
``host_sync``               the training thread waits in synchronising CUDA calls > 5% of the step (``.item()``,
                            copies to the host, ``torch.cuda.synchronize``), with the operator and source line
                            of each kind of wait
``stream_pipeline``         ``on_after_batch_transfer`` or a frozen module's forward > 10% of the mean step,
                            unless StreamPipeline already stages batches in the trace
==========================  ==========================================================================
"""

from __future__ import annotations

from collections.abc import Callable

from lightning_streamprof.results import GpuMetrics, Recommendation, Result

DATALOADER_SHARE = 0.05
COMMUNICATION_SHARE = 0.10
LOW_UTILIZATION = 0.50
MEMORY_SHARE = 0.90
PIPELINE_SHARE = 0.10
SYNC_SHARE = 0.05
HOST_BUSY = 0.80
_NAMES_SHOWN = 5
_CAUSES_SHOWN = 3

Rule = Callable[[Result], list[Recommendation]]


def _ms(ns: float) -> float:
    return round(float(ns) / 1e6, 3)


def _pct(x: float) -> float:
    return round(float(x) * 100, 1)


def _gpu_label(g: GpuMetrics, result: Result) -> str:
    return f"rank {g.rank} GPU {g.device}" if len(result.traces) > 1 and g.rank is not None else str(g.device)


def _median_loader_share(result: Result) -> float:
    """The DataLoader's share of the median step (by share): small when only a few steps wait for data."""
    shares = sorted(s.breakdown_ns["dataloader"] / s.duration_ns for s in result.steps.per_step if s.duration_ns > 0)
    return shares[len(shares) // 2] if shares else 0.0


def dataloader(result: Result) -> list[Recommendation]:
    """DataLoader > 5% of the mean step, and of the median step (a loader that keeps up in most steps and waits
    only after validation or at an epoch start needs nothing). With worker processes already in use, more
    workers are not the advice: the batches are too costly to make or to hand over."""
    step, loader_ns = result.steps.mean_step_ns, result.steps.mean_ns("dataloader")
    if step <= 0 or loader_ns / step <= DATALOADER_SHARE or _median_loader_share(result) <= DATALOADER_SHARE:
        return []
    share = loader_ns / step
    workers = result.host.loader_workers
    head = (f"{_pct(share)}% of the step time ({_ms(loader_ns)} ms of {_ms(step)} ms) is in DataLoader")
    if workers:
        message = (f"The DataLoader does not keep up although it already uses worker processes: {head}. More workers "
                   "help only while CPU cores are idle; otherwise make each batch cheaper to produce and hand over "
                   "(small dtypes such as uint8 images and labels, pin_memory=True, persistent_workers=True, random "
                   "augmentation on the GPU in on_after_batch_transfer). Removing the wait saves up to "
                   f"{_ms(loader_ns)} ms/step ({_pct(share)}%).")
    else:
        message = (f"This run has high time cost on input data loading. {head}. You could try to set num_workers on "
                   "DataLoader's construction and enable multi-processes on data loading; removing the wait saves up "
                   f"to {_ms(loader_ns)} ms/step ({_pct(share)}%).")
    return [Recommendation(
        id="dataloader",
        message=message,
        evidence={"dataloader_ms": _ms(loader_ns), "step_ms": _ms(step), "share": share,
                  "median_step_share": _median_loader_share(result), "workers": workers,
                  "saving_ms_per_step": _ms(loader_ns)},
    )]


def communication(result: Result) -> list[Recommendation]:
    step, comm_ns = result.steps.mean_step_ns, result.steps.mean_ns("communication")
    if step <= 0 or comm_ns / step <= COMMUNICATION_SHARE:
        return []
    return [Recommendation(
        id="communication",
        message=f"This run has high time cost on communication. {_pct(comm_ns / step)}% of the step time is in "
                "communication. You could try Gradient Compression or Gradient Accumulation or increase the batch "
                "size. Note: Gradient accumulation will increase global effective batch size, which may hurt model "
                "convergence and accuracy.",
        evidence={"communication_ms": _ms(comm_ns), "step_ms": _ms(step), "share": comm_ns / step},
    )]


def low_gpu_utilization(result: Result) -> list[Recommendation]:
    low = [g for g in result.gpu if g.utilization < LOW_UTILIZATION]
    if not low:
        return []
    ids = ", ".join(_gpu_label(g, result) for g in low)
    return [Recommendation(
        id="low_gpu_utilization",
        message=f"GPU {ids} {'has' if len(low) == 1 else 'have'} low utilization "
                f"({', '.join(f'{_pct(g.utilization)}%' for g in low)}). You could try to increase batch size to "
                "improve. Note: Increasing batch size may affect the speed and stability of model convergence.",
        evidence={"devices": [g.device for g in low], "ranks": [g.rank for g in low],
                  "utilization": [g.utilization for g in low], "idle_ms": [_ms(g.span_ns - g.kernel_ns) for g in low]},
    )]


def tensor_cores(result: Result) -> list[Recommendation]:
    tc = result.tensor_cores
    majors = [g.compute_major for g in result.gpu if g.compute_major is not None]
    without = tc.eligible_without_tc_ns / tc.eligible_kernel_ns if tc.eligible_kernel_ns else 0.0
    if not majors or max(majors) < 7 or tc.eligible_kernel_ns <= 0 or (tc.tc_kernel_ns > 0 and without <= 0.5):
        return []
    per_step = tc.eligible_without_tc_ns / max(result.steps.count, 1)
    return [Recommendation(
        id="tensor_cores",
        message=f"Kernels with {round(tc.eligible_share * 100)}% time are launched by Tensor Cores eligible "
                f"operators, {_pct(without)}% of it without Tensor Cores. You could enable Automatic Mixed Precision "
                f"(Lightning: precision='bf16-mixed') to speed up {_ms(per_step)} ms/step of kernels.",
        evidence={"tc_share": tc.tc_share, "eligible_share": tc.eligible_share,
                  "eligible_without_tc_ms_per_step": _ms(per_step)},
    )]


def memory(result: Result) -> list[Recommendation]:
    for dev in result.memory.devices:
        total = dev.total_memory
        if total and dev.peak_allocated_bytes > MEMORY_SHARE * total:
            share = dev.peak_allocated_bytes / total
            where = f"{dev.device} of rank {dev.rank}" if len(result.traces) > 1 and dev.rank is not None else dev.device
            return [Recommendation(
                id="memory",
                message=f"Device memory usage is at the limit of device memory capacity ({_pct(share)}% of "
                        f"{total / 1024 ** 3:.1f}GB on {where}). To get better value of your GPU or to use larger batch "
                        "size for training, please refer to Gradient Checkpoint or Automatic Mixed Precision.",
                evidence={"device": dev.device, "rank": dev.rank, "peak_allocated_bytes": dev.peak_allocated_bytes,
                          "total_memory": int(total), "share": share},
            )]
    return []


def host_bound(result: Result) -> list[Recommendation]:
    """The training thread busy issuing work (operators, CUDA runtime, Python between them) for most of its step,
    not waiting for the device or for data, while the GPU idles."""
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
    return [Recommendation(
        id="host_bound",
        message=f"The training thread is busy {_pct(share)}% of each step issuing work ({per_step:.0f} kernel launches; "
                f"{_ms(in_ops)} ms in operators and the CUDA runtime, the rest in Python between them) while the GPU "
                f"works {_ms(gpu_ns)} ms of the {_ms(step)} ms step: the host is the limit, not the GPU. Fewer, larger "
                "launches help: a larger batch, CUDA graphs (torch.compile(mode=\"reduce-overhead\"), or "
                "lightning_streamprof.StreamPipeline(cuda_graph=True) for a frozen backbone), and StreamPipeline's "
                f"staging thread to take batch preparation off the training thread. The GPU alone needs {_ms(gpu_ns)} "
                "ms per step.",
        evidence={"host_busy_share": share, "host_wait_ms_per_step": _ms(wait), "operators_ms_per_step": _ms(in_ops),
                  "launches_per_step": per_step, "gpu_busy_ms_per_step": _ms(gpu_ns), "step_ms": _ms(step),
                  "saving_ms_per_step": _ms(step - gpu_ns)},
    )]


def host_sync(result: Result) -> list[Recommendation]:
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
    )]


def stream_pipeline(result: Result) -> list[Recommendation]:
    work, step = result.pipeline, result.steps.mean_step_ns
    if step <= 0 or work.steps == 0 or work.pipelined:
        return []  # StreamPipeline is already staging batches in this run
    found = []
    for what, total, names in (("on_after_batch_transfer", work.hook_ns, work.hook_names),
                               ("frozen module forward", work.frozen_ns, work.frozen_names)):
        ns = total / work.steps
        if ns / step > PIPELINE_SHARE:
            found.append(Recommendation(
                id="stream_pipeline",
                message=f"{what} takes {_ms(ns)} ms per step ({_pct(ns / step)}% of the step). "
                        "lightning_streamprof.StreamPipeline can run it for the next batch on a side CUDA stream "
                        f"while the current batch trains, saving up to {_ms(ns)} ms/step ({_pct(ns / step)}%).",
                evidence={"what": what, "ms_per_step": _ms(ns), "share": ns / step, "names": names[:_NAMES_SHOWN]},
            ))
    return found


#: every rule, in the order of their findings
RULES: tuple[Rule, ...] = (dataloader, communication, low_gpu_utilization, tensor_cores, memory, host_bound,
                           host_sync, stream_pipeline)


def recommend(result: Result, rules: tuple[Rule, ...] | None = None) -> list[Recommendation]:
    """The findings of every rule on ``result``."""
    return [rec for rule in (RULES if rules is None else rules) for rec in rule(result)]
