"""Exact merging of results: sums over the full per-trace lists, means recomputed, every step kept."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from lightning_streamprof.results.hta_merge import merge_hta
from lightning_streamprof.results.schema import (
    HostTime,
    KernelStats,
    MemoryStats,
    OperatorMemory,
    OperatorStats,
    PipelineWork,
    Result,
    SourceLine,
    Steps,
    SyncCause,
    SyncWaits,
    TensorCoreUse,
    _ratio,
    operators_self_ns,
    sort_kernels,
    sort_memory_operators,
    sort_operators,
    source_lines_of,
)

def _merge_steps(results: Sequence[Result]) -> Steps:
    return Steps.of([s for r in results for s in r.steps.per_step])


def _merge_kernels(results: Sequence[Result]) -> list[KernelStats]:
    acc: dict[str, dict[str, Any]] = {}
    for r in results:
        for k in r.kernels:
            m = acc.setdefault(k.name, {"calls": 0, "total": 0, "max": k.max_ns, "min": k.min_ns, "tc": k.tensor_cores,
                                        "blocks": None, "occ": None})
            m["calls"] += k.calls
            m["total"] += k.total_ns
            m["max"], m["min"] = max(m["max"], k.max_ns), min(m["min"], k.min_ns)
            # a weighted mean times its weight is the weighted sum; a trace without values adds 0 (its weight counts)
            for key, value in (("blocks", k.blocks_per_sm), ("occ", k.occupancy)):
                if value is not None or m[key] is not None:
                    m[key] = (m[key] or 0.0) + (value or 0.0) * k.total_ns
    out = [
        KernelStats(name=name, calls=m["calls"], total_ns=m["total"], mean_ns=_ratio(m["total"], m["calls"]),
                    max_ns=m["max"], min_ns=m["min"],
                    blocks_per_sm=None if m["blocks"] is None else _ratio(m["blocks"], m["total"]),
                    occupancy=None if m["occ"] is None else _ratio(m["occ"], m["total"]), tensor_cores=m["tc"])
        for name, m in acc.items()
    ]
    return sort_kernels(out)


def _sum_structs(items: Iterable[msgspec.Struct], fields: Sequence[str]) -> dict[str, int]:
    out = dict.fromkeys(fields, 0)
    for item in items:
        for f in fields:
            out[f] += getattr(item, f)
    return out


def _group(items: Iterable[Any], key) -> dict[Any, list[Any]]:
    groups: dict[Any, list[Any]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


_OPERATOR_SUMS = ("calls", "host_total_ns", "host_self_ns", "device_self_ns", "device_total_ns")
_MEMORY_SUMS = ("calls", "self_increase_bytes", "self_allocation_bytes", "self_allocations", "increase_bytes",
                "allocation_bytes", "allocations")


def _merge_operators(results: Sequence[Result]) -> list[OperatorStats]:
    groups = _group((o for r in results for o in r.operators), lambda o: (o.name, o.input_shapes))
    return sort_operators(OperatorStats(name=name, input_shapes=shapes, **_sum_structs(ops, _OPERATOR_SUMS))
                          for (name, shapes), ops in groups.items())


def _merge_memory(results: Sequence[Result]) -> MemoryStats:
    groups = _group((o for r in results for o in r.memory.operators), lambda o: (o.name, o.device))
    operators = [OperatorMemory(name=name, device=device, **_sum_structs(rows, _MEMORY_SUMS))
                 for (name, device), rows in groups.items()]
    return MemoryStats(devices=[d for r in results for d in r.memory.devices], operators=sort_memory_operators(operators))


def _merge_source_lines(results: Sequence[Result], operators: list[OperatorStats]) -> list[SourceLine]:
    totals: dict[tuple[str, int, str], tuple[int, int]] = {}
    for r in results:
        for s in r.source_lines:
            h, d = totals.get((s.file, s.line, s.function), (0, 0))
            totals[(s.file, s.line, s.function)] = (h + s.host_self_ns, d + s.device_self_ns)
    return source_lines_of(totals, operators_self_ns(operators))


def _merge_syncs(results: Sequence[Result]) -> SyncWaits:
    groups = _group((c for r in results for c in r.syncs.causes), lambda c: (c.operator, c.source))
    causes = [SyncCause(operator=op, what=rows[0].what, source=src, **_sum_structs(rows, ("calls", "wait_ns")))
              for (op, src), rows in groups.items()]
    causes.sort(key=lambda c: -c.wait_ns)
    return SyncWaits(causes=causes, **_sum_structs((r.syncs for r in results), ("steps", "calls", "wait_ns")))


def _merge_pipeline(results: Sequence[Result]) -> PipelineWork:
    work = [r.pipeline for r in results]
    return PipelineWork(
        **_sum_structs(work, ("steps", "hook_ns", "frozen_ns")),
        hook_names=sorted({n for w in work for n in w.hook_names}),
        frozen_names=sorted({n for w in work for n in w.frozen_names}),
        pipelined=any(w.pipelined for w in work),
        module_frames=any(w.module_frames for w in work),
    )


def _any_known(flags: Iterable[bool | None]) -> bool | None:
    """True if any flag is, False if all known flags are False, None if none is known."""
    known = [f for f in flags if f is not None]
    return any(known) if known else None


def merge(results: Sequence[Result], run: str | None = None) -> Result:
    """One result for several traces: lists are concatenated (steps, GPUs, memory devices) or summed by name
    (kernels, operators, memory by operator, source lines, synchronising waits), means are recomputed from the
    sums. Recommendations are left empty: they are rules over results (``analysis.rules.recommend``)."""
    if len(results) == 1 and run == results[0].run:
        return results[0]
    operators = _merge_operators(results)
    tc = [r.tensor_cores for r in results]
    return Result(
        run=run,
        traces=[t for r in results for t in r.traces],
        gpu=[g for r in results for g in r.gpu],
        steps=_merge_steps(results),
        kernels=_merge_kernels(results),
        operators=operators,
        memory=_merge_memory(results),
        tensor_cores=TensorCoreUse.of(**_sum_structs(tc, ("kernel_ns", "tc_kernel_ns", "linked_kernel_ns",
                                                          "eligible_kernel_ns", "eligible_without_tc_ns"))),
        source_lines=_merge_source_lines(results, operators),
        host=HostTime(**_sum_structs((r.host for r in results),
                                     ("steps", "host_step_ns", "busy_ns", "sync_wait_ns", "launches",
                                      "graph_launches")),
                      loader_workers=_any_known(r.host.loader_workers for r in results)),
        syncs=_merge_syncs(results),
        pipeline=_merge_pipeline(results),
        recommendations=[],
        warnings=[w for r in results for w in r.warnings],
        hta=merge_hta([r.hta for r in results]),
    )


def group_runs(results: Sequence[Result]) -> dict[str | None, dict[int | None, list[Result]]]:
    """Per-trace results grouped run -> window -> ranks (each in order of window, then rank)."""
    out: dict[str | None, dict[int | None, list[Result]]] = {}

    def order(r: Result) -> tuple:
        t = r.traces[0]
        return (t.run or "", -1 if t.window is None else t.window, -1 if t.rank is None else t.rank, t.path)

    for r in sorted(results, key=order):
        t = r.traces[0]
        out.setdefault(t.run, {}).setdefault(t.window, []).append(r)
    return out
