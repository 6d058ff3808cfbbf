"""Headline scalars of a window's analysis, as logged to the Trainer's loggers."""

from __future__ import annotations

from typing import Any

PREFIX = "streamprof"


def headline_metrics(analysis: dict[str, Any], prefix: str = PREFIX) -> dict[str, float]:
    """``{prefix}/gpu_utilization``, ``/sm_efficiency``, ``/achieved_occupancy`` (fractions; a
    ``/cuda:<d>`` suffix when a trace has several devices), ``{prefix}/step_ms`` and
    ``{prefix}/step_ms/<category>`` (mean per step, milliseconds)."""
    out: dict[str, float] = {}
    gpus = analysis.get("gpu") or []
    for gpu in gpus:
        suffix = f"/cuda:{gpu['device']}" if len(gpus) > 1 else ""
        for key in ("utilization", "sm_efficiency", "achieved_occupancy"):
            value = gpu.get(key)
            if value is not None:
                name = "gpu_utilization" if key == "utilization" else key
                out[f"{prefix}/{name}{suffix}"] = float(value)
    steps = analysis.get("steps") or {}
    if steps.get("count"):
        out[f"{prefix}/step_ms"] = float(steps["mean_ms"])
        for category, ms in (steps.get("breakdown_ms") or {}).items():
            out[f"{prefix}/step_ms/{category}"] = float(ms)
    return out
