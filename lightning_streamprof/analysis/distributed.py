"""One rank's window for the distributed aggregation: per-step computation / communication / overlap and one row
per collective call (:class:`~lightning_streamprof.results.RankWindow`).

Collective calls are timed where they run: NCCL kernels (``ncclDevKernel_*``, ``ncclKernel_*``, or kernels
launched by a ``nccl:``/``gloo:`` operator) and gloo's ``gloo:<collective>`` work ranges on gloo's threads.
Their name, process group, sequence number and message size come from the kernel's own arguments, else from
the operator that launched it or the ``record_param_comms`` operator around that (PyTorch's spelling:
``Collective name``, ``Process Group Name``, ``Seq``, ``In msg nelems``, ``Out msg nelems``, ``dtype``).
Gloo runs a reduce-scatter as an all-reduce (its range says ``gloo:all_reduce``): a gloo call issued by a
``c10d::`` operator of another kind is named for that kind (``reduce_scatter``). Computation is kernel time other
than collectives; in a trace without kernels (CPU training) it is the time of the training thread's CPU operators
outside data loading and collectives. Each call's ``hidden_ns`` is its time that overlaps computation.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from lightning_streamprof import names
from lightning_streamprof.analysis import intervals as iv
from lightning_streamprof.analysis.collective_kinds import issued_kinds, kind
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.analysis.steps import communication_kernels
from lightning_streamprof.results import CollectiveCalls, RankWindow, Steps, TraceIdentity
from lightning_streamprof.trace.collectives import CommArgs

#: bytes per element of the ``dtype`` names PyTorch writes
DTYPE_BYTES = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Char": 1, "Byte": 1,
    "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "ComplexHalf": 4, "UInt16": 2, "UInt32": 4, "UInt64": 8,
    "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1,
}
_KERNEL_NAME = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
_NOT_COMPUTE = ("c10d::", "record_param_comms", "nccl:", "gloo:")
#: how far up the operator nesting the ``record_param_comms`` of a kernel's launching operator is looked for
_MAX_PARENTS = 4


def collective_name(event_name: str, args: CommArgs | None) -> str:
    """The collective's name: ``Collective name`` when the trace has it, else from the range or kernel name."""
    if args is not None and args.name:
        return args.name
    if names.is_communication(event_name):
        return event_name.split(":", 1)[1]
    match = _KERNEL_NAME.match(event_name)
    return match.group(1) if match else event_name


def message_bytes(args: CommArgs | None) -> int:
    """The larger of the input and output messages, in bytes (-1 unknown)."""
    if args is None or args.dtype not in DTYPE_BYTES:
        return -1
    nelems = max(args.in_nelems or 0, args.out_nelems or 0)
    return nelems * DTYPE_BYTES[args.dtype] if nelems else -1


def _kernel_args(ctx: TraceContext, rows: np.ndarray, kernel_pos: np.ndarray) -> list[CommArgs | None]:
    """Each comm kernel's arguments: its own, else its launching operator's or a ``record_param_comms`` above it."""
    table = ctx.table
    owners = ctx.kernel_owner[kernel_pos]
    parent = ctx.op_nesting.parent
    out: list[CommArgs | None] = []
    for row, owner in zip(rows.tolist(), owners.tolist()):
        found = table.comm_args.get(row)
        if found is None or not found.name or found.seq is None:
            op = int(np.searchsorted(ctx.ops, owner)) if owner >= 0 else -1
            for _ in range(_MAX_PARENTS):
                if op < 0:
                    break
                candidate = table.comm_args.get(int(ctx.ops[op]))
                if candidate is not None and candidate.name:
                    # the kernel's own arguments win; the operator's fill what the kernel lacks (e.g. ``Seq``)
                    found = candidate if found is None or not found.name else msgspec.structs.replace(
                        found, **{f: getattr(candidate, f) for f in candidate.__struct_fields__
                                  if getattr(found, f) is None})
                    break
                op = int(parent[op])
        out.append(found)
    return out


def _gloo_args(ctx: TraceContext, gloo: np.ndarray) -> list[CommArgs | None]:
    """Each gloo range's arguments, named for the kind of the ``c10d::`` operator that issued it where that kind
    differs from the range's (``gloo:all_reduce`` running a ``_reduce_scatter_base``)."""
    table = ctx.table
    args = [table.comm_args.get(int(r)) for r in gloo.tolist()]
    ops = ctx.ops[ctx.mask(ctx.ops, lambda n: n.startswith("c10d::"))]
    if not gloo.size or not ops.size:
        return args
    order = np.argsort(table.ts[gloo], kind="stable")
    range_kinds = [kind(ctx.name_of(int(r))) for r in gloo[order].tolist()]
    issued = issued_kinds(table.ts[gloo[order]], range_kinds, table.ts[ops], [kind(ctx.name_of(int(r)))
                                                                              for r in ops.tolist()])
    for i, ran, asked in zip(order.tolist(), range_kinds, issued):
        if asked is not None and asked != ran:
            a = args[i] or CommArgs()
            args[i] = a if a.name else msgspec.structs.replace(a, name=asked)
    return args


def collective_rows(ctx: TraceContext) -> tuple[np.ndarray, list[CommArgs | None]]:
    """The rows that time collectives (comm kernels, gloo work ranges) and their arguments."""
    table = ctx.table
    comm = communication_kernels(ctx)
    kernel_pos = np.flatnonzero(comm)
    kernels = ctx.kernels[kernel_pos]
    kernel_args = _kernel_args(ctx, kernels, kernel_pos) if kernels.size else []
    host = ctx.host_ranges
    gloo = host[ctx.mask(host, lambda n: n.startswith("gloo:"))]
    rows = np.concatenate([kernels, gloo])
    args = kernel_args + _gloo_args(ctx, gloo)
    order = np.argsort(table.ts[rows], kind="stable")
    return rows[order], [args[i] for i in order.tolist()]


def _compute_ranges(ctx: TraceContext) -> iv.Intervals:
    t = ctx.table
    kernels = ctx.kernels
    if kernels.size:
        rows = kernels[~communication_kernels(ctx)]
        return iv.merge(t.ts[rows], ctx.ends(rows))
    ops = ctx.on_training_thread(ctx.ops) if ctx.step_marks.size else ctx.ops
    ops = ops[~ctx.mask(ops, lambda n: n.startswith(_NOT_COMPUTE) or names.is_dataloader(n))]
    merged = iv.merge(t.ts[ops], ctx.ends(ops))
    host = ctx.host_ranges
    loader = host[ctx.mask(host, names.is_dataloader)]
    return iv.subtract(merged, iv.merge(t.ts[loader], ctx.ends(loader)))


def _calls(ctx: TraceContext, rows: np.ndarray, args: list[CommArgs | None], lo: np.ndarray,
           hi: np.ndarray, comp: iv.Intervals) -> CollectiveCalls:
    t = ctx.table
    starts = t.ts[rows]
    step = np.searchsorted(lo, starts, side="right") - 1
    inside = step >= 0
    inside[inside] = starts[inside] < hi[step[inside]]
    step = np.where(inside, step, -1)
    name_table: dict[str, int] = {}
    group_table: dict[str, int] = {}
    name_idx, group_idx, seq, occurrence, nbytes = [], [], [], [], []
    seen: dict[tuple[int, int, int], int] = {}
    for row, a, s in zip(rows.tolist(), args, step.tolist()):
        n = name_table.setdefault(collective_name(ctx.name_of(row), a), len(name_table))
        g = group_table.setdefault((a.group if a is not None and a.group is not None else ""), len(group_table))
        key = (g, n, s)
        occurrence.append(seen.get(key, 0))
        seen[key] = occurrence[-1] + 1
        name_idx.append(n)
        group_idx.append(g)
        seq.append(a.seq if a is not None and a.seq is not None else -1)
        nbytes.append(message_bytes(a))
    return CollectiveCalls(
        names=list(name_table), groups=list(group_table), name=name_idx, group=group_idx, seq=seq,
        step=step.tolist(), occurrence=occurrence, start_ns=starts.tolist(), dur_ns=t.dur[rows].tolist(),
        bytes=nbytes, hidden_ns=iv.integrate(*comp, None, starts, starts + t.dur[rows]).astype(np.int64).tolist(),
    )


def is_distributed(ctx: TraceContext, identity: TraceIdentity | None) -> bool:
    """A trace of a distributed run: more than one rank, or collectives in it."""
    if identity is not None and (identity.world_size or 1) > 1:
        return True
    return bool(communication_kernels(ctx).any()) or bool(ctx.mask(ctx.host_ranges, names.is_communication).any())


def rank_window(ctx: TraceContext, identity: TraceIdentity | None, steps: Steps) -> RankWindow:
    """One rank's window: per-step times and its collective calls."""
    lo, hi = ctx.step_spans
    rows, args = collective_rows(ctx)
    t = ctx.table
    comm = iv.merge(t.ts[rows], ctx.ends(rows))
    comp = _compute_ranges(ctx)
    overlap = iv.intersect(comp, comm)

    def per_step(ranges: iv.Intervals) -> list[int]:
        return iv.integrate(*ranges, None, lo, hi).astype(np.int64).tolist() if lo.size else []

    identity = identity or TraceIdentity(path=t.source)
    return RankWindow(
        rank=identity.rank if identity.rank is not None else 0, world_size=identity.world_size, host=identity.host,
        window=identity.window, first_step=identity.first_step,
        step_numbers=[-1 if s.step is None else s.step for s in steps.per_step],
        step_start_ns=lo.tolist(), step_end_ns=hi.tolist(),
        comp_ns=per_step(comp), comm_ns=per_step(comm), overlap_ns=per_step(overlap),
        dataloader_ns=[s.breakdown_ns["dataloader"] for s in steps.per_step],
        collectives=_calls(ctx, rows, args, lo, hi, comp),
    )
