"""The critical path of each step: the chain of host and device work that decided when the step ended, and what lies
on it (a simplified HTA ``critical_path_analysis``).

**The graph.** Nodes are the device events (kernels, copies, sets) and host states "thread T at time t" (a launch
call's start, the step's host end, the moment a helper thread started). Each node has one predecessor, the
dependency that finished last before it could start:

- a device event waited for the previous event on its stream if that one ended at or after the launch call
  started (link: *kernel gap*, previous end to start); otherwise for its launch call (link: *launch delay*, call
  start to event start), i.e. for the host at the call's start;
- the host at time t on a thread ran since the last *waiting* synchronising call on that thread (``cudaMemcpy``,
  ``*Synchronize``, HIP's too) that ended before t: that call was released by the device event that ended last
  before it returned, provided it was still running when the call began (link: *sync*, event end to call return);
  without one, a helper thread (PyTorch's autograd engine, a staging thread) ran since its first activity in the
  step, which the training thread's state at that moment precedes; the training thread runs back to the step start.

Following predecessors from the step's end (its last device event if the device finished last, else the training
thread at the host end) gives a chain covering the step's span backwards in time without gap or overlap: its parts
— host (*cpu*), device bodies (*gpu_compute*, *gpu_copy*, *gpu_communication* for NCCL kernels) and the links —
sum to the step's span; a chain that stops early (a device event with neither a launch call nor a predecessor on
its stream) leaves the rest *unattributed*. Host time on the path is also split by the innermost CPU operator on
its thread (``(no operator)``: Python between operators).

**Differences from HTA.** HTA builds a DAG of every operator's start and end (nested operators chained on their
thread, consecutive top-level operators joined by zero-weight edges, blocking calls given zero weight), launch and
kernel-kernel edges decided from the queue length, and GPU-to-host and GPU-to-GPU edges from Kineto's
``cuda_sync`` events (``cudaStreamWaitEvent``, event and stream synchronisation, which need
``_ExperimentalConfig(enable_cuda_sync_events=True)``), then takes networkx's longest weighted path. Its path
therefore leaves out time between top-level operators and time spent waiting, and follows cross-stream events.
Here the path is the last-arriving chain through time: host time between operators counts as host time, waits are
*sync* links, a synchronising call is released by the device event that ended last (not by the stream or event it
names), cross-stream event waits and cross-thread hand-offs other than a helper thread's first activity are not
followed. HTA's ``bound_by`` classes map to ``cpu`` (cpu_bound), ``gpu_compute``+``gpu_copy`` (gpu_compute_bound),
``gpu_communication``, ``kernel_gap`` (gpu_kernel_kernel_overhead) and ``launch_delay``
(gpu_kernel_launch_overhead). The chain is found for every step at once by pointer doubling (n log n, vectorised).
"""

from __future__ import annotations

import numpy as np

from lightning_streamprof import names
from lightning_streamprof.analysis import intervals as iv
from lightning_streamprof.analysis._links import group
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.analysis.host import is_blocking
from lightning_streamprof.analysis.idle import stream_order
from lightning_streamprof.analysis.steps import communication_kernels
from lightning_streamprof.results import TraceIdentity
from lightning_streamprof.results.hta import CRITICAL_CATEGORIES, CriticalItem, CriticalPath, CriticalStep, sort_items
from lightning_streamprof.trace.table import Kind

#: items kept per kind and trace
LIMIT = 50
NO_OPERATOR = "(no operator)"
_CAT = {c: i for i, c in enumerate(CRITICAL_CATEGORIES)}
_NONE = -1


class _Graph:
    """Nodes (device events first, then host states) with their body, link and predecessor."""

    def __init__(self, n: int) -> None:
        self.body_start = np.zeros(n, np.int64)
        self.body_end = np.zeros(n, np.int64)
        self.link_start = np.zeros(n, np.int64)
        self.body_cat = np.zeros(n, np.int64)
        self.link_cat = np.full(n, _NONE, np.int64)
        self.pred = np.full(n, -1, np.int64)
        self.thread = np.zeros(n, np.int64)


def _training_thread(ctx: TraceContext) -> int:
    keys = ctx.thread_keys(ctx.step_marks)
    if keys.size:
        return int(keys[0])
    keys = ctx.thread_keys(ctx.ops if ctx.ops.size else ctx.runtime)
    if keys.size == 0:
        return 0
    codes, g = group(keys)
    return int(codes[np.argmax(np.bincount(g))])


def _waiting_syncs(ctx: TraceContext, dev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Synchronising calls that waited for the device, and the index (into ``dev``) of the event released each."""
    t = ctx.table
    syncs = ctx.runtime[ctx.mask(ctx.runtime, is_blocking)]
    if syncs.size == 0 or dev.size == 0:
        return syncs[:0], np.zeros(0, np.int64)
    end = t.ts[dev] + t.dur[dev]
    by_end = np.argsort(end, kind="stable")
    sync_end = t.ts[syncs] + t.dur[syncs]
    k = np.searchsorted(end[by_end], sync_end, side="right") - 1
    ok = k >= 0
    released = np.where(ok, by_end[np.maximum(k, 0)], -1)
    ok &= end[np.maximum(released, 0)] > t.ts[syncs]
    return syncs[ok], released[ok]


def _step_of(starts: np.ndarray, times: np.ndarray) -> np.ndarray:
    return np.searchsorted(starts, times, side="right") - 1


def _last_before(keys: np.ndarray, times: np.ndarray, qkeys: np.ndarray, qtimes: np.ndarray) -> np.ndarray:
    """For each query, the index of the entry with its key and the latest time <= its time, or -1 (keys are small
    non-negative codes)."""
    out = np.full(qkeys.size, -1, np.int64)
    if keys.size == 0 or qkeys.size == 0:
        return out
    base = int(min(times.min(), qtimes.min()))
    shift = int(max(times.max(), qtimes.max()) - base + 1).bit_length()
    skey = (keys << shift) + (times - base)
    by = np.argsort(skey, kind="stable")
    k = np.searchsorted(skey[by], (qkeys << shift) + (qtimes - base), side="right") - 1
    cand = by[np.maximum(k, 0)]
    ok = (k >= 0) & (keys[cand] == qkeys)
    out[ok] = cand[ok]
    return out


def _build(ctx: TraceContext, main: int) -> tuple[_Graph, np.ndarray, np.ndarray]:
    """The graph, each step's root node and the device rows (node ``i < len(dev)`` is ``dev[i]``)."""
    t = ctx.table
    lo, hi = ctx.step_spans
    hhi = ctx.host_step_spans[1]
    nsteps = lo.size
    imin = np.iinfo(np.int64).min
    order, _, first = stream_order(ctx)
    dev = ctx.device_rows[order]
    ng = dev.size
    launch = ctx.device_launch[order]
    has_launch = launch >= 0
    launch_nodes = np.flatnonzero(has_launch)
    nl = launch_nodes.size
    syncs, released = _waiting_syncs(ctx, dev)
    host = np.concatenate([ctx.ops, ctx.runtime])
    # thread codes of everything that has a thread here (the training thread first)
    keys = np.concatenate([[main], ctx.thread_keys(host), ctx.thread_keys(launch[launch_nodes]),
                           ctx.thread_keys(syncs)])
    _, codes = group(keys)
    main_code = int(codes[0])
    host_code = codes[1:1 + host.size]
    launch_code = codes[1 + host.size:1 + host.size + nl]
    sync_code = codes[1 + host.size + nl:]
    # helper threads' first activity in each step: one host state each
    host_step = _step_of(lo, t.ts[host])
    helper = (host_code != main_code) & (host_step >= 0)
    helper[helper] = t.ts[host[helper]] < hi[host_step[helper]]
    slot_key = host_code[helper] * (nsteps + 1) + host_step[helper]
    slots, inv = group(slot_key)
    first_seen = np.full(slots.size, np.iinfo(np.int64).max)
    np.minimum.at(first_seen, inv, t.ts[host[helper]])
    nh = slots.size
    n = ng + nl + nsteps + nh
    graph = _Graph(n)
    # device events: wait for the previous event on the stream, or for the launch call
    start, end = t.ts[dev], t.ts[dev] + t.dur[dev]
    graph.body_start[:ng], graph.body_end[:ng] = start, end
    is_kernel = t.kind[dev] == Kind.KERNEL
    comm = np.zeros(len(t), bool)
    comm[ctx.kernels[communication_kernels(ctx)]] = True
    comm = comm[dev]
    graph.body_cat[:ng] = np.where(~is_kernel, _CAT["gpu_copy"],
                                   np.where(comm, _CAT["gpu_communication"], _CAT["gpu_compute"]))
    call = np.where(has_launch, t.ts[np.maximum(launch, 0)], imin)
    call_ts = np.where(has_launch, np.minimum(call, start), start)
    prev = np.where(first, -1, np.arange(ng) - 1)
    prev_end = np.where(prev >= 0, end[np.maximum(prev, 0)], imin)
    by_launch = has_launch & (prev_end < call)
    by_prev = ~by_launch & (prev >= 0)
    state_of = np.full(ng, -1, np.int64)
    state_of[launch_nodes] = ng + np.arange(nl)
    graph.pred[:ng] = np.where(by_launch, state_of, np.where(by_prev, prev, -1))
    graph.link_start[:ng] = np.where(by_launch, call_ts, np.where(by_prev, np.minimum(prev_end, start), start))
    graph.link_cat[:ng] = np.where(by_launch, _CAT["launch_delay"], np.where(by_prev, _CAT["kernel_gap"], _NONE))
    # host states (thread, time): launch calls, step host ends, helper threads' first activity
    hosts = slice(ng, n)
    st_code = np.concatenate([launch_code, np.full(nsteps + nh, main_code, np.int64)])
    st_time = np.concatenate([call_ts[launch_nodes], hhi, first_seen])
    graph.thread[hosts] = np.concatenate([ctx.thread_keys(launch[launch_nodes]), np.full(nsteps + nh, main, np.int64)])
    graph.body_end[hosts] = st_time
    graph.body_cat[hosts] = _CAT["cpu"]
    st_step = _step_of(lo, st_time)
    st_lo = np.where(st_step >= 0, lo[np.maximum(st_step, 0)], st_time)
    slot = np.searchsorted(slots, st_code * (nsteps + 1) + st_step) if nh else np.zeros(st_time.size, np.int64)
    slot = np.minimum(slot, max(nh - 1, 0))
    found = (st_code != main_code) & (st_step >= 0)
    if nh:
        found &= slots[slot] == st_code * (nsteps + 1) + st_step
    else:
        found[:] = False
    helper_first = np.where(found, first_seen[slot] if nh else imin, imin)
    handover = np.where(found, ng + nl + nsteps + slot, -1)
    # the last waiting synchronising call on the state's thread before its time
    sync_end = t.ts[syncs] + t.dur[syncs]
    last = _last_before(sync_code, sync_end, st_code, st_time)
    s_end = np.where(last >= 0, sync_end[np.maximum(last, 0)] if syncs.size else imin, imin)
    by_sync = (last >= 0) & (s_end >= helper_first) & (s_end > st_lo)
    by_hand = ~by_sync & (handover >= 0) & (helper_first > st_lo)
    rel = np.where(by_sync, released[np.maximum(last, 0)] if syncs.size else -1, -1)
    body_start = np.minimum(np.where(by_sync, s_end, np.where(by_hand, helper_first, st_lo)), st_time)
    graph.body_start[hosts] = body_start
    graph.pred[hosts] = np.where(by_sync, rel, np.where(by_hand, handover, -1))
    rel_end = np.where(rel >= 0, end[np.maximum(rel, 0)], body_start) if ng else body_start
    graph.link_start[hosts] = np.where(by_sync, np.minimum(rel_end, body_start), body_start)
    graph.link_cat[hosts] = np.where(by_sync, _CAT["sync"], _NONE)
    _keep_acyclic(graph)
    return graph, _roots(ctx, launch, end, ng + nl, hhi, hi), dev


def _keep_acyclic(g: _Graph) -> None:
    """Drop every predecessor that is not strictly earlier (body end, then body start, then index)."""
    p = g.pred
    has = p >= 0
    idx = np.flatnonzero(has)
    q = p[idx]
    earlier = (g.body_end[q] < g.body_end[idx]) | ((g.body_end[q] == g.body_end[idx]) & (
        (g.body_start[q] < g.body_start[idx]) | ((g.body_start[q] == g.body_start[idx]) & (q < idx))))
    bad = idx[~earlier]
    p[bad] = -1
    g.link_cat[bad] = _NONE
    g.link_start[bad] = g.body_start[bad]


def _roots(ctx: TraceContext, launch: np.ndarray, end: np.ndarray, first_step_node: int, hhi: np.ndarray,
           hi: np.ndarray) -> np.ndarray:
    """Each step's last node: its last device event when the device finished after the host, else its host end."""
    t = ctx.table
    hlo = ctx.host_step_spans[0]
    nsteps = hlo.size
    roots = first_step_node + np.arange(nsteps)
    linked = np.flatnonzero(launch >= 0)
    if linked.size == 0:
        return roots
    calls = launch[linked]
    k = _step_of(hlo, t.ts[calls])
    ok = k >= 0
    ok[ok] = t.ts[calls[ok]] + t.dur[calls[ok]] <= hhi[k[ok]]
    linked, k = linked[ok], k[ok]
    best = np.full(nsteps, np.iinfo(np.int64).min)
    np.maximum.at(best, k, end[linked])
    last = np.full(nsteps, -1, np.int64)
    hit = end[linked] == best[k]
    last[k[hit]] = linked[hit]
    device_last = (last >= 0) & (best > hhi) & (best >= hi)
    return np.where(device_last, last, roots)


def _chains(graph: _Graph, roots: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every node on each step's chain: (node, step, offset from the end), by pointer doubling."""
    node, step = roots.copy(), np.arange(roots.size)
    offset = np.zeros(roots.size, np.int64)
    jump = graph.pred.copy()
    k = 0
    while True:
        nxt = jump[node]
        ok = nxt >= 0
        ok[ok] = graph.body_end[nxt[ok]] > lo[step[ok]]
        if not ok.any():
            break
        node = np.concatenate([node, nxt[ok]])
        step = np.concatenate([step, step[ok]])
        offset = np.concatenate([offset, offset[ok] + (1 << k)])
        live = jump >= 0
        jump[live] = jump[jump[live]]
        k += 1
    return node, step, offset


def _pieces(graph: _Graph, node: np.ndarray, step: np.ndarray, offset: np.ndarray, lo: np.ndarray, hi: np.ndarray
            ) -> tuple[np.ndarray, ...]:
    """Each chain node's body and link lengths, clipped to its step and below the nodes after it on the chain (so
    the pieces of a chain never overlap), with the body's clipped start and end."""
    order = np.lexsort((offset, step))
    node, step = node[order], step[order]
    start = graph.link_start[node]
    base = int(min(start.min(), lo.min()))
    big = int(max(graph.body_end[node].max(), hi.max(), start.max()) - base + 1)
    # a running minimum per step: each step's values shifted below every earlier step's
    cum = np.minimum.accumulate((start - base) - step * big)
    after = np.r_[0, cum[:-1] + step[:-1] * big + base]
    new_step = np.r_[True, step[1:] != step[:-1]]
    top = np.minimum(graph.body_end[node], np.where(new_step, hi[step], np.minimum(after, hi[step])))
    bottom = np.maximum(start, lo[step])
    b0 = np.maximum(graph.body_start[node], bottom)
    body = np.clip(top - b0, 0, None)
    link = np.clip(np.minimum(graph.body_start[node], top) - bottom, 0, None)
    return node, step, body, link, b0, b0 + body


def _operator_items(ctx: TraceContext, threads: np.ndarray, starts: np.ndarray, ends: np.ndarray
                    ) -> dict[str, list[int]]:
    """Host time of the pieces split by the innermost CPU operator on their thread."""
    t = ctx.table
    out: dict[str, list[int]] = {}
    if threads.size == 0:
        return out
    op_threads = ctx.thread_keys(ctx.ops)
    nesting = ctx.op_nesting
    for thread in group(threads)[0].tolist():
        mine = threads == thread
        ps, pe = iv.merge(starts[mine], ends[mine])
        total = int((pe - ps).sum())
        on = np.flatnonzero(op_threads == thread)
        covered = 0
        if on.size:
            bounds = group(np.concatenate([nesting.starts[on], nesting.ends[on]]))[0]
            seg_lo, seg_hi = bounds[:-1], bounds[1:]
            cover = iv.integrate(ps, pe, None, seg_lo, seg_hi)
            hit = np.flatnonzero(cover > 0)
            inner = nesting.enclosing(seg_lo[hit], np.full(hit.size, thread, np.int64))
            has = inner >= 0
            if has.any():
                codes, g = group(t.name[ctx.ops[inner[has]]])
                ns = np.bincount(g, weights=cover[hit[has]])
                segs = np.bincount(g)
                for c, v, k in zip(codes.tolist(), ns.tolist(), segs.tolist()):
                    entry = out.setdefault(t.names[c], [0, 0])
                    entry[0] += int(v)
                    entry[1] += int(k)
                covered = int(cover[hit[has]].sum())
        if total - covered > 0:
            entry = out.setdefault(NO_OPERATOR, [0, 0])
            entry[0] += total - covered
            entry[1] += 1
    return out


def critical_path(ctx: TraceContext, identity: TraceIdentity | None = None, *, limit: int = LIMIT) -> CriticalPath:
    """Each step's critical path broken down by category, and the kernels and operators on the paths."""
    steps = ctx.steps
    if not steps:
        return CriticalPath()
    t = ctx.table
    lo, hi = ctx.step_spans
    graph, roots, dev = _build(ctx, _training_thread(ctx))
    node, step, offset = _chains(graph, roots, lo)
    node, step, body, link, b0, b1 = _pieces(graph, node, step, offset, lo, hi)
    nsteps, ncat = lo.size, len(CRITICAL_CATEGORIES)
    parts = np.zeros((nsteps, ncat), np.int64)
    np.add.at(parts, (step, graph.body_cat[node]), body)
    has_link = graph.link_cat[node] >= 0
    np.add.at(parts, (step[has_link], graph.link_cat[node][has_link]), link[has_link])
    span = hi - lo
    parts[:, _CAT["unattributed"]] += span - parts.sum(1)
    on_path = (body + link) > 0
    nodes = np.bincount(step[on_path], minlength=nsteps)
    rank = identity.rank if identity else None
    window = identity.window if identity else None
    rows = [CriticalStep(step=names.step_number(s.name), name=s.name, span_ns=int(span[i]),
                         breakdown_ns={c: int(parts[i, j]) for j, c in enumerate(CRITICAL_CATEGORIES)},
                         nodes=int(nodes[i]), rank=rank, window=window) for i, s in enumerate(steps)]
    ng = dev.size
    gpu = (node < ng) & (body > 0)
    items: list[CriticalItem] = []
    if gpu.any():
        codes, g = group(t.name[dev[node[gpu]]])
        ns, segs = np.bincount(g, weights=body[gpu]), np.bincount(g)
        items += sort_items(CriticalItem(kind="kernel", name=t.names[c], ns=int(v), segments=int(s))
                            for c, v, s in zip(codes.tolist(), ns.tolist(), segs.tolist()))
    cpu = (node >= ng) & (body > 0)
    ops = _operator_items(ctx, graph.thread[node[cpu]], b0[cpu], b1[cpu])
    op_items = sort_items(CriticalItem(kind="operator", name=k, ns=v[0], segments=v[1]) for k, v in ops.items())
    kernel_items = items
    truncated = len(kernel_items) > limit or len(op_items) > limit
    return CriticalPath(steps=rows, items=sort_items(kernel_items[:limit] + op_items[:limit]), truncated=truncated)
