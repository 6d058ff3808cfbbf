"""The results schema: msgspec structs, immutable and keyword-built, and the orders their lists are kept in."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from lightning_streamprof.results.distributed import DistributedStats
from lightning_streamprof.results.triggers import WindowTrigger
from lightning_streamprof.results.hta import HtaAnalyses

CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other")


class _Result(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=False):
    """Base of every result struct: immutable, keyword-built, encoded with every field."""


class PipelineRun(_Result):
    """What a staging callback (:class:`~lightning_streamprof.StreamPipeline`) does at one moment, from its own state
    (``StreamPipeline.state``), for the recommendations and the reports: its ``mode``; the ``way`` batches run (its
    label) and whether that way stages batch N+1 ahead (``staged``), on the staging thread (``thread``), with the
    backbone's forward as a CUDA graph (``graph``); ``graphed``: the staged frozen calls replayed a CUDA graph in this
    fit; ``deciding``: ``auto`` has not settled on its first choice yet; ``in_trials``: ``auto`` is timing ways (the
    way changes from block to block); ``staged_calls``: frozen calls run ahead; ``name``: the callback's, for people."""

    mode: str
    name: str = "StreamPipeline"
    way: str = "serial"
    staged: bool = False
    thread: bool = False
    graph: bool = False
    graphed: bool = False
    deciding: bool = False
    in_trials: bool = False
    staged_calls: int = 0

    @property
    def settled(self) -> bool:
        """The way is chosen: neither ``auto``'s first choice nor its trials are under way."""
        return not (self.deciding or self.in_trials)


class WindowWay(_Result):
    """The way a staging callback ran a window's recorded steps, as the profiler recorded it in the trace's metadata:
    the state at the window's first recorded step (``first``), every way's label over its recorded steps in the order
    they came (``ways``), and whether ``auto`` was timing ways during any of them (``in_trials``)."""

    first: PipelineRun
    ways: list[str] = []
    in_trials: bool = False


class ChoiceWait(_Result):
    """A window held while a staging callback (``waited_for``) chose its way: the schedule placed its first recorded
    step at ``planned``, it recorded from ``first_step``; ``bound`` (the most steps a window waits) when the choice
    had not come by then and the window recorded anyway."""

    window: int
    planned: int
    first_step: int
    waited_for: str
    bound: int | None = None


class TraceIdentity(_Result):
    """Where a trace comes from: its run, profiling window (index and first step), global rank and host, and the way a
    staging callback ran its steps (``pipeline``, None without one), and why a window off the schedule was recorded
    (``trigger``: a slowdown, a request; None for a scheduled one)."""

    path: str
    run: str | None = None
    window: int | None = None
    first_step: int | None = None
    rank: int | None = None
    world_size: int | None = None
    host: str | None = None
    pipeline: WindowWay | None = None
    trigger: WindowTrigger | None = None


class GpuTimeline(_Result):
    """Bucketed utilization and SM efficiency: bucket ``i`` starts at ``starts_ns[i]``, the last ends at ``end_ns``."""

    starts_ns: list[int]
    end_ns: int
    bucket_ns: int
    utilization: list[float]
    sm_efficiency: list[float]


class GpuMetrics(_Result):
    """One device of one trace over the steps' span (see :mod:`lightning_streamprof.analysis.gpu`).

    From the trace's ``deviceProperties``: ``vendor`` (``"nvidia"``/``"amd"``), ``arch`` (AMD's architecture, e.g.
    CDNA2), ``matrix_cores`` (Tensor Cores or AMD's matrix cores; None where the properties do not tell),
    ``warp_size`` (an AMD wavefront is 64) and ``shared_memory_per_sm`` (AMD: LDS per compute unit, bytes)."""

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
    vendor: str | None = None
    arch: str | None = None
    matrix_cores: bool | None = None
    warp_size: int | None = None
    shared_memory_per_sm: int | None = None


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
    ``launches``: kernel launches (``graph_launches`` of them CUDA graphs'); ``loader_workers``: whether the
    DataLoader reads with worker processes (None: no DataLoader range in the trace).
    """

    steps: int = 0
    host_step_ns: int = 0
    busy_ns: int = 0
    sync_wait_ns: int = 0
    launches: int = 0
    loader_workers: bool | None = None
    graph_launches: int = 0


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
    hook and frozen modules' forwards; ``pipelined`` when the trace shows StreamPipeline already staging;
    ``module_frames`` when it holds modules' frames (``with_stack=True``), without which ``frozen_ns`` is unknown."""

    steps: int = 0
    hook_ns: int = 0
    hook_names: list[str] = []
    frozen_ns: int = 0
    frozen_names: list[str] = []
    pipelined: bool = False
    module_frames: bool = False


class Recommendation(_Result):
    """One finding: a stable ``id``, a message for people, the numbers behind it, and those numbers in a few words
    (``summary``, the evidence line of each trace where several are merged)."""

    id: str
    message: str
    evidence: dict[str, Any] = {}
    summary: str = ""


class Result(_Result):
    """The analysis of one trace, or of several merged (:func:`merge`); ``traces`` says which. ``warnings``
    say, one line each naming the file, what the reader ignored and which traces could not be read. ``hta``: HTA's
    analyses (idle time, launches, GPU time per range and hook, queue, bandwidth, critical path, kernel sequences;
    None in a result decoded from JSON written before them)."""

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
    distributed: DistributedStats | None = None
    runs: list[str] = []
    warnings: list[str] = []
    hta: HtaAnalyses | None = None


class WindowResults(_Result):
    """One profiling window of a run: the result of each rank's trace."""

    window: int | None
    first_step: int | None
    ranks: list[Result]


class RunResults(_Result):
    """One run: its windows in order, and all of its traces merged; ``pipeline``: what the run's staging callback
    did at its end, from its own state (the live run's; None post hoc or without one)."""

    run: str | None
    windows: list[WindowResults]
    merged: Result
    pipeline: PipelineRun | None = None


def _ratio(a: float, b: float) -> float:
    return float(a) / float(b) if b else 0.0


# ------------------------------------------------------------------------------------------------ orders
def sort_kernels(kernels: Iterable[KernelStats]) -> list[KernelStats]:
    """Largest total time first."""
    return sorted(kernels, key=lambda k: (-k.total_ns, k.name))


def sort_operators(operators: Iterable[OperatorStats]) -> list[OperatorStats]:
    """Most host + device self time first."""
    return sorted(operators, key=lambda o: (-(o.host_self_ns + o.device_self_ns), o.name, o.input_shapes or ""))


def sort_memory_operators(rows: Iterable[OperatorMemory]) -> list[OperatorMemory]:
    """Largest allocations first."""
    return sorted(rows, key=lambda m: (-m.allocation_bytes, -m.increase_bytes, m.device, m.name))


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
