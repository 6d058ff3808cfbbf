"""Pure functions from an :class:`~lightning_streamprof.trace.EventTable` to frozen result dataclasses.

:func:`analyze_table` runs every analysis; :meth:`TraceAnalysis.to_json` gives the public JSON form::

    {"gpu": [{"device", "utilization", "sm_efficiency", "achieved_occupancy", ...}],   # fractions 0..1
     "steps": {"count", "mean_ms", "breakdown_ms": {kernel, memcpy, memset, communication, runtime,
               dataloader, cpu_exec, other}, "per_step": [...]},
     "kernels": [...], "tensor_cores": {...}, "operators": [...], "source_lines": [...],
     "memory": {"devices": [...], "operators": [...]}, "recommendations": [{"id", "message", "evidence"}]}
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from lightning_streamprof.analysis.gpu import GpuMetrics, gpu_metrics
from lightning_streamprof.analysis.kernels import KernelStats, TensorCoreUse, kernel_stats, tensor_core_use
from lightning_streamprof.analysis.memory import MemoryStats, memory_stats
from lightning_streamprof.analysis.merge import merge_results
from lightning_streamprof.analysis.operators import OperatorStats, operator_stats
from lightning_streamprof.analysis.recommendations import Recommendation, recommend
from lightning_streamprof.analysis.source import SourceLine, source_lines
from lightning_streamprof.analysis.steps import CATEGORIES, StepBreakdown, step_breakdown
from lightning_streamprof.trace.reader import EventTable

__all__ = ["TraceAnalysis", "analyze_table", "merge_results"]


def plain(value: Any) -> Any:
    """JSON-ready copy: dataclasses to dicts, numpy scalars to Python numbers, NaN/inf to None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _ms(ns: float) -> float:
    return float(ns) / 1e6


@dataclass(frozen=True)
class TraceAnalysis:
    """Everything :func:`analyze_table` finds in one trace."""

    source: str
    gpu: tuple[GpuMetrics, ...]
    steps: StepBreakdown
    kernels: tuple[KernelStats, ...]
    tensor_cores: TensorCoreUse
    operators: tuple[OperatorStats, ...]
    source_lines: tuple[SourceLine, ...]
    memory: MemoryStats
    recommendations: tuple[Recommendation, ...]

    def to_json(self, top: int = 50) -> dict[str, Any]:
        """The public JSON form (see the module docstring); lists of kernels and operators keep ``top`` rows."""
        steps = self.steps
        per_step = [
            {"name": s.step.name, "start_ns": s.step.start_ns, "end_ns": s.step.end_ns,
             "duration_ms": _ms(s.step.duration_ns), "breakdown_ms": {c: _ms(s.parts[c]) for c in CATEGORIES}}
            for s in steps.steps
        ]
        return plain({
            "source": self.source,
            "gpu": list(self.gpu),
            "steps": {
                "count": steps.count,
                "mean_ms": _ms(steps.mean_step_ns),
                "breakdown_ms": {c: _ms(steps.mean_ns[c]) for c in CATEGORIES},
                "per_step": per_step,
            },
            "kernels": list(self.kernels[:top]),
            "tensor_cores": {**plain(self.tensor_cores), "eligible_without_tc": self.tensor_cores.eligible_without_tc},
            "operators": list(self.operators[:top]),
            "source_lines": [{**plain(s), "location": s.location} for s in self.source_lines],
            "memory": {"devices": list(self.memory.devices), "operators": list(self.memory.operators[:top])},
            "recommendations": [{"id": r.id, "message": r.message, "evidence": r.evidence}
                                for r in self.recommendations],
        })


def analyze_table(table: EventTable, *, source_limit: int = 20) -> TraceAnalysis:
    """Run every analysis on one trace."""
    breakdown = step_breakdown(table)
    span = (breakdown.steps[0].step.start_ns, breakdown.steps[-1].step.end_ns) if breakdown.count else None
    gpus = gpu_metrics(table, span) if span else []
    tc = tensor_core_use(table)
    memory = memory_stats(table)
    return TraceAnalysis(
        source=table.source,
        gpu=tuple(gpus),
        steps=breakdown,
        kernels=tuple(kernel_stats(table)),
        tensor_cores=tc,
        operators=tuple(operator_stats(table)),
        source_lines=tuple(source_lines(table, source_limit)),
        memory=memory,
        recommendations=tuple(recommend(table, breakdown, gpus, tc, memory)),
    )
