"""Recommendations: torch-tb-profiler's rules and thresholds, with the numbers and the expected gain.

==========================  ==========================================================================
id                          rule
==========================  ==========================================================================
``dataloader``              DataLoader > 5% of the mean step
``communication``           communication > 10% of the mean step
``low_gpu_utilization``     GPU utilization < 50% on a device
``tensor_cores``            TC-eligible operators' kernels run without Tensor Cores (compute capability >= 7):
                            no Tensor Core kernel at all (torch-tb-profiler's rule), or over half of the
                            eligible kernel time without them
``memory``                  peak allocated > 90% of ``totalGlobalMem``
``stream_pipeline``         ``on_after_batch_transfer`` or a frozen module's forward > 10% of the mean step,
                           unless StreamPipeline already stages batches in the trace
``host_bound``              GPU utilization < 50% and the training thread busy > 80% of its step, i.e. not
                            waiting in a synchronising CUDA call or for the DataLoader: the host is the limit
``host_sync``               the training thread waits in synchronising CUDA calls > 5% of the step (``.item()``,
                            copies to the host, ``torch.cuda.synchronize``), with the operator and source line
                            of each kind of wait
==========================  ==========================================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lightning_streamprof.analysis import intervals as iv
from lightning_streamprof.analysis._links import thread_keys
from lightning_streamprof.analysis.gpu import GpuMetrics, device_properties
from lightning_streamprof.analysis.kernels import TensorCoreUse
from lightning_streamprof.analysis.memory import MemoryStats
from lightning_streamprof.analysis.operators import operator_nesting
from lightning_streamprof.analysis.source import user_frames_at
from lightning_streamprof.analysis.steps import StepBreakdown, is_step, name_mask
from lightning_streamprof.trace.reader import EventTable, Kind

DATALOADER_SHARE = 0.05
COMMUNICATION_SHARE = 0.10
LOW_UTILIZATION = 0.50
MEMORY_SHARE = 0.90
PIPELINE_SHARE = 0.10
SYNC_SHARE = 0.05
HOST_BUSY = 0.80
_LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
             "cudaGraphLaunch", "cuGraphLaunch")
_BLOCKING_COPIES = frozenset({"cudaMemcpy", "cudaMemcpy2D", "cuMemcpyDtoH", "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2"})

_HOOK = re.compile(r"^\[pl\]\[profile\]\[LightningModule\].*\.on_after_batch_transfer$")
_PIPELINE_RANGE = "[pl][profile][StreamPipeline]"
_FROZEN = re.compile(r"backbone|frozen|encoder", re.IGNORECASE)
_LIGHTNING_MODULE = re.compile(r"^\[pl\]\[profile\]\[LightningModule\](\w+)\.")


@dataclass(frozen=True)
class Recommendation:
    """One finding: a stable ``id``, a message for people and the numbers behind it."""

    id: str
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)


def _ms(ns: float) -> float:
    return round(float(ns) / 1e6, 3)


def _pct(x: float) -> float:
    return round(float(x) * 100, 1)


def _per_step_ns(table: EventTable, rows: np.ndarray, breakdown: StepBreakdown) -> float:
    """Mean per step of the merged time of ``rows`` inside the steps."""
    if breakdown.count == 0:
        return 0.0
    lo = np.array([s.step.start_ns for s in breakdown.steps])
    hi = np.array([s.step.end_ns for s in breakdown.steps])
    return _mean_inside(table, rows, lo, hi)


def _pipeline(table: EventTable, breakdown: StepBreakdown) -> list[Recommendation]:
    step = breakdown.mean_step_ns
    if step <= 0 or any(n.startswith(_PIPELINE_RANGE) for n in table.names):
        return []  # StreamPipeline is already staging batches in this run
    host = table.select(Kind.USER_ANNOTATION, Kind.CPU_OP)
    found = []
    hooks = host[name_mask(table, host, _HOOK.match)]
    frames = table.select(Kind.USER_ANNOTATION, Kind.PYTHON_FUNCTION)
    modules = {m.group(1) for n in table.names if (m := _LIGHTNING_MODULE.match(n))}

    def is_frozen(name: str) -> bool:
        module = name.split("nn.Module: ", 1)[-1].rsplit("_", 1)[0] if "nn.Module:" in name else None
        return module is not None and module not in modules and bool(_FROZEN.search(module))

    frozen = frames[name_mask(table, frames, is_frozen)]
    for what, rows in (("on_after_batch_transfer", hooks), ("frozen module forward", frozen)):
        ns = _per_step_ns(table, rows, breakdown)
        if ns / step > PIPELINE_SHARE:
            found.append(
                Recommendation(
                    "stream_pipeline",
                    f"{what} takes {_ms(ns)} ms per step ({_pct(ns / step)}% of the step). "
                    "lightning_streamprof.StreamPipeline can run it for the next batch on a side CUDA stream "
                    f"while the current batch trains, saving up to {_ms(ns)} ms/step ({_pct(ns / step)}%).",
                    {"what": what, "ms_per_step": _ms(ns), "share": ns / step,
                     "names": sorted({table.names[i] for i in table.name[rows]})[:5]},
                )
            )
    return found


def _is_blocking(name: str) -> bool:
    """CUDA calls in which the host thread waits for the device."""
    return "Synchronize" in name or name in _BLOCKING_COPIES


def _blocking(table: EventTable, runtime: np.ndarray) -> np.ndarray:
    """The runtime/driver rows in which the host thread waits for the device."""
    return runtime[name_mask(table, runtime, _is_blocking)]


def _starting_inside(table: EventTable, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Which ``rows`` start inside one of the (disjoint) windows ``[lo, hi)``."""
    ts = table.ts[rows][:, None]
    return ((ts >= lo) & (ts < hi)).any(axis=1)


def _host_bound(table: EventTable, breakdown: StepBreakdown, gpus: list[GpuMetrics]) -> list[Recommendation]:
    """The training thread busy issuing work (operators, CUDA runtime, Python between them) for most of its
    step, not waiting for the device or for data, while the GPU idles."""
    step = breakdown.mean_step_ns
    mean = breakdown.mean_ns
    if step <= 0 or not gpus or min(g.utilization for g in gpus) >= LOW_UTILIZATION:
        return []
    host = _on_training_thread(table, table.select(Kind.CPU_OP, Kind.RUNTIME, Kind.DRIVER))
    if host.size == 0:
        return []
    runtime = host[table.kind[host] != Kind.CPU_OP]
    lo, hi = _host_steps(breakdown)
    host_step = float((hi - lo).mean())
    if host_step <= 0:
        return []
    wait = _mean_inside(table, _blocking(table, runtime), lo, hi) + mean["dataloader"]
    share = 1.0 - wait / host_step
    if share <= HOST_BUSY:
        return []
    launches = runtime[name_mask(table, runtime, lambda n: n.startswith(_LAUNCHES))]
    per_step = float(_starting_inside(table, launches, lo, hi).sum() / breakdown.count)
    in_ops = _mean_inside(table, host, lo, hi)
    gpu_ns = mean["kernel"] + mean["memcpy"] + mean["memset"]
    return [
        Recommendation(
            "host_bound",
            f"The training thread is busy {_pct(share)}% of each step issuing work ({per_step:.0f} kernel launches; "
            f"{_ms(in_ops)} ms in operators and the CUDA runtime, the rest in Python between them) while the GPU "
            f"works {_ms(gpu_ns)} ms of the {_ms(step)} ms step: the host is the limit, not the GPU. Fewer, larger "
            "launches help: a larger batch, CUDA graphs (torch.compile(mode=\"reduce-overhead\"), or "
            "lightning_streamprof.StreamPipeline(cuda_graph=True) for a frozen backbone), and StreamPipeline's "
            "staging thread to take batch preparation off the training thread. The GPU alone needs "
            f"{_ms(gpu_ns)} ms per step.",
            {"host_busy_share": share, "host_wait_ms_per_step": _ms(wait), "operators_ms_per_step": _ms(in_ops),
             "launches_per_step": per_step, "gpu_busy_ms_per_step": _ms(gpu_ns), "step_ms": _ms(step),
             "saving_ms_per_step": _ms(step - gpu_ns)},
        )
    ]


#: the operator in which a synchronising call waits, as people write it
_SYNC_CAUSES = {
    "aten::_local_scalar_dense": ".item() / float(t) / bool(t)",
    "aten::item": ".item() / float(t) / bool(t)",
    "aten::copy_": "a copy to the host (.cpu(), .to('cpu'), .numpy())",
    "aten::nonzero": "nonzero (an output shape that depends on the data)",
    "aten::masked_select": "masked_select (an output shape that depends on the data)",
}


def _host_syncs(table: EventTable, breakdown: StepBreakdown) -> list[Recommendation]:
    """The training thread waiting for the device inside steps: each wait empties the GPU's queue."""
    step = breakdown.mean_step_ns
    if step <= 0 or breakdown.count == 0:
        return []
    blocking = _blocking(table, _on_training_thread(table, table.select(Kind.RUNTIME, Kind.DRIVER)))
    lo, hi = _host_steps(breakdown)
    blocking = blocking[_starting_inside(table, blocking, lo, hi)]
    if blocking.size == 0:
        return []
    wait = _mean_inside(table, blocking, lo, hi)
    if wait / step <= SYNC_SHARE:
        return []
    ops, nesting = operator_nesting(table)
    owner = nesting.enclosing(table.ts[blocking], thread_keys(table, blocking))
    lines = user_frames_at(table, blocking)
    causes: dict[tuple[str, str | None], list[float]] = {}
    for row, op, line in zip(blocking.tolist(), owner.tolist(), lines):
        name = table.names[table.name[ops[op]]] if op >= 0 else table.names[table.name[row]]
        entry = causes.setdefault((name, line), [0.0, 0.0])
        entry[0] += 1
        entry[1] += float(table.dur[row])
    n = breakdown.count
    rows = sorted(causes.items(), key=lambda kv: -kv[1][1])
    found = [{"operator": name, "what": _SYNC_CAUSES.get(name, name), "source": line,
              "calls_per_step": calls / n, "ms_per_step": _ms(ns / n)} for (name, line), (calls, ns) in rows]
    shown = "; ".join(
        f"{c['what']} {c['calls_per_step']:.1f}x, {c['ms_per_step']} ms" + (f" at {c['source']}" if c["source"] else "")
        for c in found[:3])
    idle = max(0.0, step - breakdown.mean_ns["kernel"] - breakdown.mean_ns["memcpy"] - breakdown.mean_ns["memset"])
    per_step = blocking.size / n
    return [
        Recommendation(
            "host_sync",
            f"The training thread waits for the GPU {per_step:.1f} times per step in synchronising CUDA calls, "
            f"{_ms(wait)} ms/step ({_pct(wait / step)}% of the step): {shown}. Each wait empties the GPU's queue, "
            "and the GPU then idles until the host has issued the next kernels (it is idle "
            f"{_ms(idle)} ms of each {_ms(step)} ms step). Keep values on the device during the step: no .item(), "
            ".cpu() or printing of tensors, no Python condition on a tensor's value; Lightning's progress bar reads "
            "the values logged with prog_bar=True at each refresh (a larger refresh_rate reads them less often).",
            {"syncs_per_step": per_step, "wait_ms_per_step": _ms(wait), "share": wait / step,
             "gpu_idle_ms_per_step": _ms(idle), "step_ms": _ms(step), "causes": found},
        )
    ]


def _on_training_thread(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """The rows on the thread(s) that ran the training steps."""
    marks = table.select(Kind.USER_ANNOTATION, Kind.CPU_OP)
    marks = marks[name_mask(table, marks, is_step)]
    return rows[np.isin(thread_keys(table, rows), np.unique(thread_keys(table, marks)))]


def _host_steps(breakdown: StepBreakdown) -> tuple[np.ndarray, np.ndarray]:
    """Each step's host start and end."""
    return (np.array([s.step.host_start_ns for s in breakdown.steps], np.int64),
            np.array([s.step.host_end_ns for s in breakdown.steps], np.int64))


def _mean_inside(table: EventTable, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """Mean over the windows ``[lo, hi)`` of the merged time of ``rows`` inside them."""
    if rows.size == 0:
        return 0.0
    merged = iv.merge(table.ts[rows], table.ts[rows] + table.dur[rows])
    return float(iv.integrate(*merged, None, lo, hi).mean())


def recommend(
    table: EventTable,
    breakdown: StepBreakdown,
    gpus: list[GpuMetrics],
    tensor_cores: TensorCoreUse,
    memory: MemoryStats,
) -> list[Recommendation]:
    """All findings for a trace."""
    out: list[Recommendation] = []
    step = breakdown.mean_step_ns
    mean = breakdown.mean_ns
    if step > 0:
        loader = mean["dataloader"] / step
        if loader > DATALOADER_SHARE:
            out.append(
                Recommendation(
                    "dataloader",
                    f"This run has high time cost on input data loading. {_pct(loader)}% of the step time "
                    f"({_ms(mean['dataloader'])} ms of {_ms(step)} ms) is in DataLoader. You could try to set "
                    "num_workers on DataLoader's construction and enable multi-processes on data loading; "
                    f"removing the wait saves up to {_ms(mean['dataloader'])} ms/step ({_pct(loader)}%).",
                    {"dataloader_ms": _ms(mean["dataloader"]), "step_ms": _ms(step), "share": loader,
                     "saving_ms_per_step": _ms(mean["dataloader"])},
                )
            )
        comm = mean["communication"] / step
        if comm > COMMUNICATION_SHARE:
            out.append(
                Recommendation(
                    "communication",
                    f"This run has high time cost on communication. {_pct(comm)}% of the step time is in "
                    "communication. You could try Gradient Compression or Gradient Accumulation or increase "
                    "the batch size. Note: Gradient accumulation will increase global effective batch size, "
                    "which may hurt model convergence and accuracy.",
                    {"communication_ms": _ms(mean["communication"]), "step_ms": _ms(step), "share": comm},
                )
            )
    low = [g for g in gpus if g.utilization < LOW_UTILIZATION]
    if low:
        ids = ", ".join(str(g.device) for g in low)
        idle = [g.span_ns - g.kernel_ns for g in low]
        out.append(
            Recommendation(
                "low_gpu_utilization",
                f"GPU {ids} {'has' if len(low) == 1 else 'have'} low utilization "
                f"({', '.join(f'{_pct(g.utilization)}%' for g in low)}). You could try to increase batch size "
                "to improve. Note: Increasing batch size may affect the speed and stability of model convergence.",
                {"devices": [g.device for g in low], "utilization": [g.utilization for g in low],
                 "idle_ms": [_ms(i) for i in idle]},
            )
        )
    props = device_properties(table)
    majors = [p.get("computeMajor") for p in props.values() if p.get("computeMajor") is not None]
    tc = tensor_cores
    eligible_without = tc.eligible_without_tc_ns / tc.eligible_kernel_ns if tc.eligible_kernel_ns else 0.0
    if majors and max(majors) >= 7 and tc.eligible_kernel_ns > 0 and (tc.tc_kernel_ns == 0 or eligible_without > 0.5):
        per_step = tc.eligible_without_tc_ns / max(breakdown.count, 1)
        out.append(
            Recommendation(
                "tensor_cores",
                f"Kernels with {round(tc.eligible_share * 100)}% time are launched by Tensor Cores eligible "
                f"operators, {_pct(eligible_without)}% of it without Tensor Cores. You could enable Automatic "
                "Mixed Precision (Lightning: precision='bf16-mixed') to speed up "
                f"{_ms(per_step)} ms/step of kernels.",
                {"tc_share": tc.tc_share, "eligible_share": tc.eligible_share,
                 "eligible_without_tc_ms_per_step": _ms(per_step)},
            )
        )
    for dev in memory.devices:
        total = props.get(dev.device_id, {}).get("totalGlobalMem") if dev.device != "CPU" else None
        if total and dev.peak_allocated_bytes > MEMORY_SHARE * total:
            share = dev.peak_allocated_bytes / total
            out.append(
                Recommendation(
                    "memory",
                    f"Device memory usage is at the limit of device memory capacity ({_pct(share)}% of "
                    f"{total / 1024 ** 3:.1f}GB on {dev.device}). To get better value of your GPU or to use larger "
                    "batch size for training, please refer to Gradient Checkpoint or Automatic Mixed Precision.",
                    {"device": dev.device, "peak_allocated_bytes": dev.peak_allocated_bytes, "total_memory": int(total),
                     "share": share},
                )
            )
            break
    out.extend(_host_bound(table, breakdown, gpus))
    out.extend(_host_syncs(table, breakdown))
    out.extend(_pipeline(table, breakdown))
    return out
