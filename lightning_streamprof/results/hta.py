"""Results of the analyses Holistic Trace Analysis (HTA) has and torch-tb-profiler had not (merged exactly by
:mod:`lightning_streamprof.results.hta_merge`).

Idle time per stream (:class:`IdleTime`), kernel-launch statistics (:class:`LaunchStats`), GPU time per
``record_function`` range (:class:`AnnotationTimes`), launch-queue length (:class:`QueueLengths`), copy bandwidth
(:class:`Bandwidth`), the critical path of each step (:class:`CriticalPath`) and frequent kernel sequences
(:class:`KernelSequences`); the analyses are in ``lightning_streamprof.analysis`` (``idle``, ``launches``,
``user_ranges``, ``queue``, ``bandwidth``, ``critical_path``, ``sequences``).

Times are integer nanoseconds, as in the rest of the results; counts and sums are kept rather than means, so that
every result merges exactly, and means are properties.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

#: HTA's ``consecutive_kernel_delay`` default, 30, compared with gaps in the trace's microseconds
KERNEL_WAIT_NS = 30_000
#: HTA's ``runtime_cutoff`` (µs) of ``get_cuda_kernel_launch_stats``
RUNTIME_CUTOFF_NS = 50_000
#: HTA's ``launch_delay_cutoff`` (µs)
LAUNCH_DELAY_CUTOFF_NS = 100_000
#: the CUDA runtime's launch queue: a launch blocks while this many operations wait on the stream
MAX_QUEUE_LENGTH = 1024
#: the parts of a step's critical path, in the order they are reported (they sum to the step)
CRITICAL_CATEGORIES = ("cpu", "gpu_compute", "gpu_copy", "gpu_communication", "launch_delay", "kernel_gap", "sync",
                       "unattributed")


class _Result(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=False):
    """Immutable, keyword-built, encoded with every field (as every result struct)."""


def _ratio(a: float, b: float) -> float:
    return float(a) / float(b) if b else 0.0


def sum_fields(rows: Sequence[Any], fields: Sequence[str]) -> dict[str, Any]:
    return {f: sum(getattr(r, f) for r in rows) for f in fields}


# ---------------------------------------------------------------------------------------------------- idle time
class StreamIdle(_Result):
    """One stream's idle time between consecutive device events, split as HTA splits it.

    ``host_wait``: the event's launch started after the previous event ended (the host was behind);
    ``kernel_wait``: otherwise, a gap shorter than the threshold (back-to-back launch overhead); ``other``: the rest
    (e.g. waiting on another stream's event). ``*_gaps`` count the gaps of each kind; ``busy_ns`` is the events'
    summed duration and ``span_ns`` first start to last end.
    """

    device: int
    stream: int
    events: int
    busy_ns: int
    span_ns: int
    host_wait_ns: int
    kernel_wait_ns: int
    other_ns: int
    host_wait_gaps: int
    kernel_wait_gaps: int
    other_gaps: int
    rank: int | None = None

    @property
    def idle_ns(self) -> int:
        return self.host_wait_ns + self.kernel_wait_ns + self.other_ns

    def ratio(self, category: str) -> float:
        """HTA's ``idle_time_ratio``: a category's share of the stream's idle time."""
        return _ratio(getattr(self, f"{category}_ns"), self.idle_ns)


class IdleTime(_Result):
    """Idle time of every stream that ran device work (``kernel_wait_threshold_ns``: the kernel-wait cut-off)."""

    kernel_wait_threshold_ns: int = KERNEL_WAIT_NS
    streams: list[StreamIdle] = []


def sort_streams(rows: Iterable[Any]) -> list[Any]:
    """By rank, device, stream."""
    return sorted(rows, key=lambda s: (-1 if s.rank is None else s.rank, s.device, s.stream))


# ---------------------------------------------------------------------------------------------------- launches
class LaunchName(_Result):
    """The launches by one runtime call name, each paired with its device event by correlation id.

    ``cpu_ns``: the calls' summed duration; ``gpu_ns``: their device events'; ``delay_ns``: summed launch delay
    (device start − call end, negative counted as 0, HTA's ``launch_delay``). ``short``: launches whose device
    event is shorter than the call, the call being at most the runtime cut-off (HTA's short kernels);
    ``runtime_outliers``: calls longer than the runtime cut-off; ``delay_outliers``: delays over the delay cut-off.
    """

    name: str
    launches: int
    cpu_ns: int
    gpu_ns: int
    delay_ns: int
    max_cpu_ns: int
    max_gpu_ns: int
    max_delay_ns: int
    short: int
    short_gpu_ns: int
    short_cpu_ns: int
    runtime_outliers: int
    runtime_outlier_ns: int
    delay_outliers: int
    delay_outlier_ns: int

    @property
    def mean_delay_ns(self) -> float:
        return _ratio(self.delay_ns, self.launches)


class OperatorLaunch(_Result):
    """Instances of one ATen operator that launched one kernel sequence (HTA's ``get_aten_op_kernels_and_delay``).

    ``launch_delay_ns``: summed over the instances, operator start to its first launch call's start;
    ``runtime_delay_ns``: that launch call's start to its kernel's start (means: divide by ``count``).
    """

    operator: str
    kernels: list[str]
    count: int
    launch_delay_ns: int
    runtime_delay_ns: int

    @property
    def mean_launch_delay_ns(self) -> float:
        return _ratio(self.launch_delay_ns, self.count)

    @property
    def mean_runtime_delay_ns(self) -> float:
        return _ratio(self.runtime_delay_ns, self.count)


class LaunchStats(_Result):
    """Launch statistics per runtime call name, and per ATen operator and kernel sequence (most instances first;
    ``truncated`` when the operator list was cut to its largest entries)."""

    runtime_cutoff_ns: int = RUNTIME_CUTOFF_NS
    launch_delay_cutoff_ns: int = LAUNCH_DELAY_CUTOFF_NS
    launches: list[LaunchName] = []
    operators: list[OperatorLaunch] = []
    truncated: bool = False

    @property
    def total(self) -> LaunchName:
        """All launches together (``name="all"``)."""
        return sum_launches("all", self.launches)


_LAUNCH_SUMS = ("launches", "cpu_ns", "gpu_ns", "delay_ns", "short", "short_gpu_ns", "short_cpu_ns",
                "runtime_outliers", "runtime_outlier_ns", "delay_outliers", "delay_outlier_ns")
_LAUNCH_MAXES = ("max_cpu_ns", "max_gpu_ns", "max_delay_ns")


def sum_launches(name: str, rows: Sequence[LaunchName]) -> LaunchName:
    maxes = {f: max((getattr(r, f) for r in rows), default=0) for f in _LAUNCH_MAXES}
    return LaunchName(name=name, **sum_fields(rows, _LAUNCH_SUMS), **maxes)


def sort_launches(rows: Iterable[LaunchName]) -> list[LaunchName]:
    return sorted(rows, key=lambda r: (-r.launches, r.name))


def sort_operator_launches(rows: Iterable[OperatorLaunch]) -> list[OperatorLaunch]:
    return sorted(rows, key=lambda r: (-r.count, -r.launch_delay_ns, r.operator, r.kernels))


# ---------------------------------------------------------------------------------------------------- annotations
class AnnotationTime(_Result):
    """One ``record_function`` range name (Lightning's ``[pl][profile]...`` actions and hooks, ``Optimizer.step#...``,
    ``[pl][module]...``): its host time and the device time of what was launched inside it.

    ``calls``/``host_ns``: instances and their summed duration (an instance inside another of its name is not
    counted twice). ``kernel_ns``/``device_ns``: kernels (``device_ns``: kernels, copies and sets) whose launch call
    started inside an instance, CUDA-graph replays and side streams included; ``self_*``: only those for which this
    is the innermost range (the ``self`` values of all names plus the trace's ``outside_*`` make its total).
    ``gpu_span_*``: HTA's ``get_gpu_user_annotation_breakdown``: the range's GPU-side copies
    (``gpu_user_annotation``), their count, summed, longest and shortest duration and summed squares (for the
    standard deviation). ``gpu_overlap_device_ns``: HTA's ``get_gpu_kernels_with_user_annotations``: the device
    events whose start lies inside a GPU-side copy of this name on their stream, the innermost copy taking each.
    """

    name: str
    calls: int
    host_ns: int
    kernels: int
    kernel_ns: int
    device_ns: int
    self_kernel_ns: int
    self_device_ns: int
    gpu_span_calls: int = 0
    gpu_span_ns: int = 0
    gpu_span_max_ns: int = 0
    gpu_span_min_ns: int = 0
    gpu_span_sq_ns2: float = 0.0
    gpu_overlap_device_ns: int = 0

    @property
    def gpu_span_std_ns(self) -> float:
        """Sample standard deviation of the GPU-side copies' durations (pandas' ``std``; 0 for one copy)."""
        n = self.gpu_span_calls
        if n < 2:
            return 0.0
        return math.sqrt(max(self.gpu_span_sq_ns2 - self.gpu_span_ns ** 2 / n, 0.0) / (n - 1))


class AnnotationTimes(_Result):
    """Every range name (steps excepted), most device time first, and the trace's device time.

    ``device_ns``/``kernel_ns``: all device events'/kernels' time; ``outside_*``: of those launched inside no range;
    ``unlinked_device_ns``: device events without a launch call in the trace (attributed to no range).
    """

    rows: list[AnnotationTime] = []
    device_ns: int = 0
    kernel_ns: int = 0
    outside_device_ns: int = 0
    outside_kernel_ns: int = 0
    unlinked_device_ns: int = 0


def sort_annotations(rows: Iterable[AnnotationTime]) -> list[AnnotationTime]:
    return sorted(rows, key=lambda r: (-r.device_ns, -r.gpu_span_ns, -r.host_ns, r.name))


# ---------------------------------------------------------------------------------------------------- queue length
class StreamQueue(_Result):
    """One stream's launch queue: operations launched and not yet started (HTA's queue length: +1 at each launch
    call's start, −1 at its device event's start).

    ``launches``: device events with a launch call; ``span_ns``: first change to last; ``length_ns``: the length
    integrated over time (``mean_length`` = ``length_ns / span_ns``); ``max_length``/``min_length``; ``points``,
    ``point_sum``, ``point_sq_sum``: the series' values at its changes (HTA's ``get_queue_length_summary`` count,
    mean and std); ``blocked_ns``: time at ``max_queue_length`` or more (``get_time_spent_blocked_on_full_queue``).
    """

    device: int
    stream: int
    launches: int
    span_ns: int
    length_ns: int
    max_length: int
    min_length: int
    points: int
    point_sum: int
    point_sq_sum: int
    blocked_ns: int
    rank: int | None = None

    @property
    def mean_length(self) -> float:
        """Time-weighted mean queue length."""
        return _ratio(self.length_ns, self.span_ns)

    @property
    def point_mean(self) -> float:
        """HTA's ``mean`` (over the series' change points)."""
        return _ratio(self.point_sum, self.points)

    @property
    def point_std(self) -> float:
        """HTA's ``std`` (sample standard deviation over the change points)."""
        n = self.points
        if n < 2:
            return 0.0
        return math.sqrt(max(self.point_sq_sum - self.point_sum ** 2 / n, 0.0) / (n - 1))


class QueueLengths(_Result):
    """Launch-queue statistics of every stream (``max_queue_length``: the length at which launches block)."""

    max_queue_length: int = MAX_QUEUE_LENGTH
    streams: list[StreamQueue] = []


# ---------------------------------------------------------------------------------------------------- bandwidth
class CopyBandwidth(_Result):
    """Copies (or sets) of one Kineto name, e.g. ``Memcpy HtoD (Pageable -> Device)``.

    ``calls``/``bytes``/``busy_ns``: all of them; ``timed_*``: those with a size and a duration (the bandwidth's
    base; AMD traces record no size). ``max_gbps``: the fastest copy's GB/s; ``sum_gbps``: the copies' GB/s summed
    (``mean_gbps``: their mean); ``gbps``: ``timed_bytes / timed_ns``, the bandwidth of the copies taken together.
    """

    name: str
    kind: str
    calls: int
    bytes: int
    busy_ns: int
    timed_calls: int
    timed_bytes: int
    timed_ns: int
    max_gbps: float
    sum_gbps: float

    @property
    def gbps(self) -> float | None:
        return self.timed_bytes / self.timed_ns if self.timed_ns else None

    @property
    def mean_gbps(self) -> float | None:
        return self.sum_gbps / self.timed_calls if self.timed_calls else None

    @property
    def mean_bytes(self) -> float:
        return _ratio(self.bytes, self.calls)

    @property
    def pageable(self) -> bool:
        """A copy from or to pageable host memory (staged through a pinned buffer by the driver)."""
        return "Pageable" in self.name


class BandwidthSeries(_Result):
    """HTA's ``get_memory_bw_summary`` for one kind (``Memcpy HtoD``, ``Memset``...): the summed bandwidth of the
    copies running at each change, over the changes where it is above 0 (``points``, their sum and the peak)."""

    kind: str
    points: int
    point_sum_gbps: float
    peak_gbps: float

    @property
    def mean_gbps(self) -> float:
        return _ratio(self.point_sum_gbps, self.points)


class Bandwidth(_Result):
    copies: list[CopyBandwidth] = []
    series: list[BandwidthSeries] = []


def sort_copies(rows: Iterable[CopyBandwidth]) -> list[CopyBandwidth]:
    return sorted(rows, key=lambda c: (-c.busy_ns, c.name))


# ---------------------------------------------------------------------------------------------------- critical path
class CriticalStep(_Result):
    """One step's critical path: ``breakdown_ns`` over :data:`CRITICAL_CATEGORIES` sums to ``span_ns`` (the step's
    span, device work included); ``nodes``: events and host segments on the path."""

    step: int | None
    name: str
    span_ns: int
    breakdown_ns: dict[str, int]
    nodes: int
    rank: int | None = None
    window: int | None = None


class CriticalItem(_Result):
    """Time on the critical paths of ``kind`` ``"kernel"`` (kernels, copies and sets by name) or ``"operator"``
    (host time by innermost CPU operator; ``(no operator)`` for Python between them), over all steps."""

    kind: str
    name: str
    ns: int
    segments: int


class CriticalPath(_Result):
    """Every step's critical path and what lies on them (largest first; ``truncated`` when cut to the largest)."""

    steps: list[CriticalStep] = []
    items: list[CriticalItem] = []
    truncated: bool = False

    def breakdown_ns(self) -> dict[str, int]:
        """The categories summed over the steps."""
        return {c: sum(s.breakdown_ns.get(c, 0) for s in self.steps) for c in CRITICAL_CATEGORIES}


def sort_items(rows: Iterable[CriticalItem]) -> list[CriticalItem]:
    return sorted(rows, key=lambda r: (-r.ns, r.kind, r.name))


# ---------------------------------------------------------------------------------------------------- sequences
class KernelSequence(_Result):
    """One operator name and the exact sequence of device events launched under it (HTA's
    ``get_frequent_cuda_kernel_sequences``): ``count`` instances, their device time and their own duration."""

    operator: str
    kernels: list[str]
    count: int
    kernel_ns: int
    op_ns: int


class KernelSequences(_Result):
    """Sequences of at least ``min_length`` device events under the outermost operators (``operator``: the name
    filter, None for all), most frequent first; ``truncated`` when cut to the most frequent."""

    min_length: int = 3
    operator: str | None = None
    sequences: list[KernelSequence] = []
    truncated: bool = False


def sort_sequences(rows: Iterable[KernelSequence]) -> list[KernelSequence]:
    return sorted(rows, key=lambda s: (-s.count, -s.kernel_ns, s.operator, s.kernels))


# ---------------------------------------------------------------------------------------------------- all of them
class HtaAnalyses(_Result):
    """HTA's analyses of one trace, or of several merged (:func:`~lightning_streamprof.results.hta_merge.merge_hta`):
    idle time, kernel launches, GPU time per ``record_function`` range and per Lightning hook, launch queue,
    copy bandwidth, critical path and kernel sequences."""

    idle: IdleTime = msgspec.field(default_factory=IdleTime)
    launches: LaunchStats = msgspec.field(default_factory=LaunchStats)
    annotations: AnnotationTimes = msgspec.field(default_factory=AnnotationTimes)
    #: Lightning's actions and hooks alone, each device event with the innermost hook that launched it
    hooks: AnnotationTimes = msgspec.field(default_factory=AnnotationTimes)
    queue: QueueLengths = msgspec.field(default_factory=QueueLengths)
    bandwidth: Bandwidth = msgspec.field(default_factory=Bandwidth)
    critical_path: CriticalPath = msgspec.field(default_factory=CriticalPath)
    sequences: KernelSequences = msgspec.field(default_factory=KernelSequences)
