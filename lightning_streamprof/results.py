"""The typed results model: what the analysis finds in traces, grouped run -> windows -> ranks.

One schema (msgspec structs) serves every reader: the JSON of ``streamprof analyze --json`` is this schema
encoded (:func:`to_json`), the profiler's loggers and summary read it, and :func:`merge` combines the results
of several traces exactly: every list is complete (nothing is cut to a top N before a renderer), totals are
sums over the traces, means are recomputed from those sums and every step is kept.

Times are integer nanoseconds except the step summary's ``mean_ms`` / ``breakdown_ms``; fractions are 0..1,
``None`` where a trace has no data for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

#: the step breakdown's categories, in claiming order (``other`` is the rest)
CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other")


class _Result(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=False):
    """Base of every result struct: immutable, keyword-built, encoded with every field."""


class TraceIdentity(_Result):
    """Where a trace comes from: its run, profiling window (index and first step), global rank and host."""

    path: str
    run: str | None = None
    window: int | None = None
    first_step: int | None = None
    rank: int | None = None
    world_size: int | None = None
    host: str | None = None


class GpuTimeline(_Result):
    """Bucketed utilization and SM efficiency: bucket ``i`` starts at ``starts_ns[i]``, the last ends at ``end_ns``."""

    starts_ns: list[int]
    end_ns: int
    bucket_ns: int
    utilization: list[float]
    sm_efficiency: list[float]


class GpuMetrics(_Result):
    """One device of one trace over the steps' span (see :mod:`lightning_streamprof.analysis.gpu`)."""

    device: int
    utilization: float
    sm_efficiency: float | None
    achieved_occupancy: float | None
    kernel_ns: int
    span_ns: int
    name: str | None = None
    num_sms: int | None = None
    total_memory: int | None = None
    compute_major: int | None = None
    timeline: GpuTimeline | None = None
    rank: int | None = None
    window: int | None = None


class StepTimes(_Result):
    """One step: its number (``ProfilerStep#N``; None for a trace without steps), spans and breakdown (ns).

    ``start_ns``/``end_ns`` include the device work the step launched; ``breakdown_ns`` sums to ``duration_ns``.
    """

    step: int | None
    name: str
    start_ns: int
    end_ns: int
    host_start_ns: int
    host_end_ns: int
    device_events: int
    duration_ns: int
    breakdown_ns: dict[str, int]
    rank: int | None = None
    window: int | None = None


class Steps(_Result):
    """Every step and the mean over them (ms); build with :meth:`of`."""

    count: int
    mean_ms: float
    breakdown_ms: dict[str, float]
    per_step: list[StepTimes]

    @classmethod
    def of(cls, per_step: Sequence[StepTimes]) -> Steps:
        n = len(per_step)
        if n == 0:
            return cls(count=0, mean_ms=0.0, breakdown_ms={c: 0.0 for c in CATEGORIES}, per_step=[])
        mean = {c: sum(s.breakdown_ns[c] for s in per_step) / n / 1e6 for c in CATEGORIES}
        return cls(count=n, mean_ms=sum(s.duration_ns for s in per_step) / n / 1e6, breakdown_ms=mean,
                   per_step=list(per_step))

    @property
    def mean_step_ns(self) -> float:
        return self.mean_ms * 1e6

    def mean_ns(self, category: str) -> float:
        return self.breakdown_ms[category] * 1e6


class KernelStats(_Result):
    """One kernel name. Blocks per SM and occupancy (0..1) are kernel-time weighted means (missing values count
    as 0, as in torch-tb-profiler; None when no kernel of the name has the value)."""

    name: str
    calls: int
    total_ns: int
    mean_ns: float
    max_ns: int
    min_ns: int
    blocks_per_sm: float | None
    occupancy: float | None
    tensor_cores: bool


class OperatorStats(_Result):
    """Totals for one operator name (and input shapes, when grouped by them).

    ``host_self_ns`` excludes child operators and the operator's own CUDA runtime calls (torch's self time);
    ``device_self_ns`` is the device work the operator launched itself, ``device_total_ns`` adds its children's.
    """

    name: str
    calls: int
    host_total_ns: int
    host_self_ns: int
    device_self_ns: int
    device_total_ns: int
    input_shapes: str | None = None


class SourceLine(_Result):
    """Operator self time attributed to one user-code line; ``share`` is of all operators' self time."""

    file: str
    line: int
    function: str
    host_self_ns: int
    device_self_ns: int
    share: float

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"


class DeviceMemory(_Result):
    """Peaks and a downsampled curve ``(ts_ns, allocated, reserved)`` of one device of one trace."""

    device: str
    device_id: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int | None
    curve: list[tuple[int, int, int]]
    total_memory: int | None = None
    rank: int | None = None
    window: int | None = None


class OperatorMemory(_Result):
    """Memory of one operator name on one device (bytes); ``self_`` values exclude child operators."""

    name: str
    device: str
    calls: int
    self_increase_bytes: int
    self_allocation_bytes: int
    self_allocations: int
    increase_bytes: int
    allocation_bytes: int
    allocations: int


class MemoryStats(_Result):
    devices: list[DeviceMemory] = []
    operators: list[OperatorMemory] = []

    def peak(self, device_id: int) -> int | None:
        """Peak ``Total Allocated`` of a CUDA device, or None without memory events for it."""
        return next((d.peak_allocated_bytes for d in self.devices if d.device_id == device_id and d.device != "CPU"),
                    None)


class TensorCoreUse(_Result):
    """Kernel time in Tensor Core kernels, and of Tensor-Core-eligible operators' kernels run without them."""

    kernel_ns: int = 0
    tc_kernel_ns: int = 0
    tc_share: float = 0.0
    linked_kernel_ns: int = 0
    eligible_kernel_ns: int = 0
    eligible_share: float = 0.0
    eligible_without_tc_ns: int = 0
    eligible_without_tc: bool = False

    @classmethod
    def of(cls, kernel_ns: int, tc_kernel_ns: int, linked_kernel_ns: int, eligible_kernel_ns: int,
           eligible_without_tc_ns: int) -> TensorCoreUse:
        return cls(kernel_ns=kernel_ns, tc_kernel_ns=tc_kernel_ns, tc_share=_ratio(tc_kernel_ns, kernel_ns),
                   linked_kernel_ns=linked_kernel_ns, eligible_kernel_ns=eligible_kernel_ns,
                   eligible_share=_ratio(eligible_kernel_ns, linked_kernel_ns),
                   eligible_without_tc_ns=eligible_without_tc_ns, eligible_without_tc=eligible_without_tc_ns > 0)


class HostTime(_Result):
    """The training thread inside its steps' host spans, summed over ``steps`` steps (ns).

    ``busy_ns``: in operators or CUDA runtime calls; ``sync_wait_ns``: waiting in synchronising CUDA calls;
    ``launches``: kernel launches.
    """

    steps: int = 0
    host_step_ns: int = 0
    busy_ns: int = 0
    sync_wait_ns: int = 0
    launches: int = 0


class SyncCause(_Result):
    """One kind of synchronising wait: the operator it happens in and the user-code line (with ``with_stack``)."""

    operator: str
    what: str
    source: str | None
    calls: int
    wait_ns: int


class SyncWaits(_Result):
    """Synchronising CUDA calls of the training thread inside its steps, summed over ``steps`` steps."""

    steps: int = 0
    calls: int = 0
    wait_ns: int = 0
    causes: list[SyncCause] = []


class PipelineWork(_Result):
    """Work StreamPipeline could run ahead, summed over ``steps`` steps (ns): the ``on_after_batch_transfer``
    hook and frozen modules' forwards; ``pipelined`` when the trace shows StreamPipeline already staging."""

    steps: int = 0
    hook_ns: int = 0
    hook_names: list[str] = []
    frozen_ns: int = 0
    frozen_names: list[str] = []
    pipelined: bool = False


class Recommendation(_Result):
    """One finding: a stable ``id``, a message for people and the numbers behind it."""

    id: str
    message: str
    evidence: dict[str, Any] = {}


class Result(_Result):
    """The analysis of one trace, or of several merged (:func:`merge`); ``traces`` says which."""

    run: str | None
    traces: list[TraceIdentity]
    gpu: list[GpuMetrics]
    steps: Steps
    kernels: list[KernelStats]
    operators: list[OperatorStats]
    memory: MemoryStats
    tensor_cores: TensorCoreUse
    source_lines: list[SourceLine]
    host: HostTime
    syncs: SyncWaits
    pipeline: PipelineWork
    recommendations: list[Recommendation]
    distributed: Any | None = None
    runs: list[str] = []


class WindowResults(_Result):
    """One profiling window of a run: the result of each rank's trace."""

    window: int | None
    first_step: int | None
    ranks: list[Result]


class RunResults(_Result):
    """One run: its windows in order, and all of its traces merged."""

    run: str | None
    windows: list[WindowResults]
    merged: Result


def _ratio(a: float, b: float) -> float:
    return float(a) / float(b) if b else 0.0


# ------------------------------------------------------------------------------------------------ merging
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


def sort_kernels(kernels: Iterable[KernelStats]) -> list[KernelStats]:
    """Largest total time first."""
    return sorted(kernels, key=lambda k: (-k.total_ns, k.name))


def sort_operators(operators: Iterable[OperatorStats]) -> list[OperatorStats]:
    """Most host + device self time first."""
    return sorted(operators, key=lambda o: (-(o.host_self_ns + o.device_self_ns), o.name, o.input_shapes or ""))


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


def sort_memory_operators(rows: Iterable[OperatorMemory]) -> list[OperatorMemory]:
    """Largest allocations first."""
    return sorted(rows, key=lambda m: (-m.allocation_bytes, -m.increase_bytes, m.device, m.name))


def _merge_memory(results: Sequence[Result]) -> MemoryStats:
    groups = _group((o for r in results for o in r.memory.operators), lambda o: (o.name, o.device))
    operators = [OperatorMemory(name=name, device=device, **_sum_structs(rows, _MEMORY_SUMS))
                 for (name, device), rows in groups.items()]
    return MemoryStats(devices=[d for r in results for d in r.memory.devices], operators=sort_memory_operators(operators))


def sort_source_lines(lines: Iterable[SourceLine]) -> list[SourceLine]:
    """Most host + device self time first."""
    return sorted(lines, key=lambda s: (-(s.host_self_ns + s.device_self_ns), s.file, s.line))


def source_lines_of(totals: dict[tuple[str, int, str], tuple[int, int]], operators_self_ns: int) -> list[SourceLine]:
    """Source lines from ``{(file, line, function): (host_self_ns, device_self_ns)}``, shares of all operators'
    self time."""
    return sort_source_lines(
        SourceLine(file=f, line=ln, function=fn, host_self_ns=h, device_self_ns=d,
                   share=_ratio(h + d, operators_self_ns))
        for (f, ln, fn), (h, d) in totals.items()
    )


def operators_self_ns(operators: Iterable[OperatorStats]) -> int:
    """Host + device self time of all operators (what source line shares are of)."""
    return sum(o.host_self_ns + o.device_self_ns for o in operators)


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
    )


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
                                     ("steps", "host_step_ns", "busy_ns", "sync_wait_ns", "launches"))),
        syncs=_merge_syncs(results),
        pipeline=_merge_pipeline(results),
        recommendations=[],
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


# ------------------------------------------------------------------------------------------------ JSON
_ENCODER = msgspec.json.Encoder()


def to_json(value: msgspec.Struct) -> bytes:
    """The JSON of a result (the ``--json`` contract), encoded from the schema."""
    return _ENCODER.encode(value)


def to_builtins(value: msgspec.Struct) -> Any:
    """A result as plain dicts and lists (what :func:`to_json` encodes)."""
    return msgspec.to_builtins(value)


def from_json(data: bytes | str, kind: type = Result) -> Any:
    """Decode and validate the JSON of a result."""
    return msgspec.json.decode(data, type=kind)
