"""The typed results model: what the analysis finds in traces, grouped run -> windows -> ranks.

One schema (msgspec structs) serves every reader: the JSON of ``streamprof analyze --json`` is this schema
encoded (:func:`to_json`), the profiler's loggers and summary read it, and :func:`merge` combines the results
of several traces exactly: every list is complete (nothing is cut to a top N before a renderer), totals are
sums over the traces, means are recomputed from those sums and every step is kept.

Times are integer nanoseconds except the step summary's ``mean_ms`` / ``breakdown_ms``; fractions are 0..1,
``None`` where a trace has no data for them.
"""

from __future__ import annotations

from typing import Any

import msgspec

from lightning_streamprof.results.cost import ProfilingCost
from lightning_streamprof.results.distributed import (
    CollectiveCalls,
    CommOpStats,
    DistributedStats,
    DistributedWindow,
    LateStart,
    RankStats,
    RankWindow,
    WaitedFor,
    rank_ranges,
)
from lightning_streamprof.results.merge import group_runs, merge
from lightning_streamprof.results.schema import (
    CATEGORIES,
    ChoiceWait,
    DeviceMemory,
    GpuMetrics,
    GpuTimeline,
    HostTime,
    KernelStats,
    MemoryStats,
    OperatorMemory,
    operators_self_ns,
    OperatorStats,
    PipelineRun,
    PipelineWork,
    Recommendation,
    Result,
    RunResults,
    sort_kernels,
    sort_memory_operators,
    sort_operators,
    sort_source_lines,
    source_lines_of,
    SourceLine,
    Steps,
    StepTimes,
    SyncCause,
    SyncWaits,
    TensorCoreUse,
    TraceIdentity,
    WindowResults,
    WindowWay,
)

__all__ = [
    "CATEGORIES",
    "ChoiceWait",
    "CollectiveCalls",
    "CommOpStats",
    "DistributedStats",
    "DistributedWindow",
    "LateStart",
    "RankStats",
    "RankWindow",
    "rank_ranges",
    "WaitedFor",
    "DeviceMemory",
    "from_json",
    "GpuMetrics",
    "GpuTimeline",
    "group_runs",
    "HostTime",
    "KernelStats",
    "MemoryStats",
    "merge",
    "OperatorMemory",
    "operators_self_ns",
    "OperatorStats",
    "PipelineRun",
    "PipelineWork",
    "ProfilingCost",
    "Recommendation",
    "Result",
    "RunResults",
    "sort_kernels",
    "sort_memory_operators",
    "sort_operators",
    "sort_source_lines",
    "source_lines_of",
    "SourceLine",
    "Steps",
    "StepTimes",
    "SyncCause",
    "SyncWaits",
    "TensorCoreUse",
    "to_builtins",
    "to_json",
    "TraceIdentity",
    "WindowResults",
    "WindowWay",
]

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
