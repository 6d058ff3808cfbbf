"""The training thread's host time inside its steps: busy issuing work, or waiting in synchronising CUDA calls.

Both are sums over the steps' host spans (``ProfilerStep#N``) of the thread(s) that ran the steps; a trace
without steps has neither.
"""

from __future__ import annotations

import numpy as np

from lightning_streamprof import names
from lightning_streamprof.analysis import intervals as iv
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.analysis.vendors import HIP_BLOCKING_COPIES, HIP_GRAPH_LAUNCHES, HIP_KERNEL_LAUNCHES
from lightning_streamprof.results import HostTime, SyncCause, SyncWaits

#: graph launches, CUDA's and HIP's (ROCm traces)
_GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch", *HIP_GRAPH_LAUNCHES)
#: kernel launches (prefixes), CUDA's and HIP's
_LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
             *HIP_KERNEL_LAUNCHES, *_GRAPH_LAUNCHES)
_BLOCKING_COPIES = frozenset({"cudaMemcpy", "cudaMemcpy2D", "cuMemcpyDtoH", "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2",
                              *HIP_BLOCKING_COPIES})

#: the operator in which a synchronising call waits, as people write it
SYNC_CAUSES = {
    "aten::_local_scalar_dense": ".item() / float(t) / bool(t)",
    "aten::item": ".item() / float(t) / bool(t)",
    "aten::copy_": "a copy to the host (.cpu(), .to('cpu'), .numpy())",
    "aten::nonzero": "nonzero (an output shape that depends on the data)",
    "aten::masked_select": "masked_select (an output shape that depends on the data)",
}


def is_blocking(name: str) -> bool:
    """CUDA (and HIP) calls in which the host thread waits for the device."""
    return "Synchronize" in name or name in _BLOCKING_COPIES


def is_launch(name: str) -> bool:
    """A kernel or graph launch, CUDA's or HIP's."""
    return name.startswith(_LAUNCHES)


def is_graph_launch(name: str) -> bool:
    return name.startswith(_GRAPH_LAUNCHES)


def starting_inside(ts: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Which times fall inside one of the sorted, disjoint windows ``[lo, hi)``."""
    k = np.searchsorted(lo, ts, side="right") - 1
    inside = k >= 0
    inside[inside] = ts[inside] < hi[k[inside]]
    return inside


def time_inside(ctx: TraceContext, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> int:
    """Merged time of ``rows`` inside the windows ``[lo, hi)``, summed over the windows."""
    if rows.size == 0 or lo.size == 0:
        return 0
    merged = iv.merge(ctx.table.ts[rows], ctx.ends(rows))
    return int(iv.integrate(*merged, None, lo, hi).sum())


def _training_runtime(ctx: TraceContext) -> np.ndarray:
    return ctx.on_training_thread(ctx.runtime)


def _blocking(ctx: TraceContext) -> np.ndarray:
    runtime = _training_runtime(ctx)
    return runtime[ctx.mask(runtime, is_blocking)]


def host_time(ctx: TraceContext) -> HostTime:
    """Busy time (operators and runtime calls), synchronising waits and kernel launches of the training thread."""
    if ctx.step_marks.size == 0:
        return HostTime()
    lo, hi = ctx.host_step_spans
    runtime = _training_runtime(ctx)
    host = np.concatenate([ctx.on_training_thread(ctx.ops), runtime])
    launches = runtime[ctx.mask(runtime, is_launch)]
    graphs = runtime[ctx.mask(runtime, is_graph_launch)]
    return HostTime(
        steps=int(lo.size),
        host_step_ns=int((hi - lo).sum()),
        busy_ns=time_inside(ctx, host, lo, hi),
        sync_wait_ns=time_inside(ctx, _blocking(ctx), lo, hi),
        launches=int(starting_inside(ctx.table.ts[launches], lo, hi).sum()),
        loader_workers=_loader_workers(ctx),
        graph_launches=int(starting_inside(ctx.table.ts[graphs], lo, hi).sum()),
    )


def _loader_workers(ctx: TraceContext) -> bool | None:
    """Whether the trace's DataLoader ranges are the multi-process iterator's; None without DataLoader ranges."""
    host = ctx.host_ranges
    loader = ctx.mask(host, names.is_dataloader)
    if not loader.any():
        return None
    return bool(ctx.mask(host[loader], names.loader_uses_workers).any())


def sync_waits(ctx: TraceContext) -> SyncWaits:
    """Synchronising calls starting inside the steps, by the operator they wait in and the user-code line."""
    if ctx.step_marks.size == 0:
        return SyncWaits()
    lo, hi = ctx.host_step_spans
    t = ctx.table
    blocking = _blocking(ctx)
    blocking = blocking[starting_inside(t.ts[blocking], lo, hi)]
    if blocking.size == 0:
        return SyncWaits(steps=int(lo.size))
    owner = ctx.op_nesting.enclosing(t.ts[blocking], ctx.thread_keys(blocking))
    frames = ctx.user_frame_of(blocking)
    causes: dict[tuple[str, str | None], list[int]] = {}
    for row, op, frame in zip(blocking.tolist(), owner.tolist(), frames.tolist()):
        name = ctx.name_of(ctx.ops[op]) if op >= 0 else ctx.name_of(row)
        line = _location(ctx.name_of(frame)) if frame >= 0 else None
        entry = causes.setdefault((name, line), [0, 0])
        entry[0] += 1
        entry[1] += int(t.dur[row])
    rows = sorted(causes.items(), key=lambda kv: -kv[1][1])
    return SyncWaits(
        steps=int(lo.size), calls=int(blocking.size), wait_ns=time_inside(ctx, blocking, lo, hi),
        causes=[SyncCause(operator=name, what=SYNC_CAUSES.get(name, name), source=line, calls=calls, wait_ns=ns)
                for (name, line), (calls, ns) in rows],
    )


def _location(frame: str) -> str | None:
    from lightning_streamprof.analysis.frames import parse_frame

    parsed = parse_frame(frame)
    return f"{parsed[0]}:{parsed[1]}" if parsed else None
