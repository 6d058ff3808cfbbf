"""Headline scalars of a window's result, as logged to the Trainer's loggers."""

from __future__ import annotations

from lightning_streamprof.results import Result

PREFIX = "streamprof"


def headline_metrics(result: Result, prefix: str = PREFIX) -> dict[str, float]:
    """``{prefix}/gpu_utilization``, ``/sm_efficiency``, ``/achieved_occupancy`` (fractions; a
    ``/cuda:<d>`` suffix when a trace has several devices), ``{prefix}/step_ms`` and
    ``{prefix}/step_ms/<category>`` (mean per step, milliseconds)."""
    out: dict[str, float] = {}
    for gpu in result.gpu:
        suffix = f"/cuda:{gpu.device}" if len(result.gpu) > 1 else ""
        for name, value in (("gpu_utilization", gpu.utilization), ("sm_efficiency", gpu.sm_efficiency),
                            ("achieved_occupancy", gpu.achieved_occupancy)):
            if value is not None:
                out[f"{prefix}/{name}{suffix}"] = float(value)
    steps = result.steps
    if steps.count:
        out[f"{prefix}/step_ms"] = float(steps.mean_ms)
        for category, ms in steps.breakdown_ms.items():
            out[f"{prefix}/step_ms/{category}"] = float(ms)
    return out
